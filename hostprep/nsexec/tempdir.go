package nsexec

import (
	"os"

	"golang.org/x/sys/unix"
)

// shmDir is the tmpfs RunRendered's overlay prefers when TMPDIR is not
// set and /tmp is on a disk.
var shmDir = "/dev/shm"

// minShmFree is the room /dev/shm must have left to hold an overlay (a
// few MiB with MIG's capability files) with plenty to spare: Docker's
// default is 64 MiB in all.
const minShmFree = 256 << 20

// TempDir is where RunRendered makes its overlay when Options.TempDir is
// empty: TMPDIR when the user set it, else a tmpfs, as an overlay is a few
// hundred small files written and removed on every run, each of which a
// disk's file system journals. So /tmp if it is a tmpfs, else /dev/shm if
// this user may make directories there and run programs from it (the
// overlay's nvidia-smi) and it has room, else /tmp.
func TempDir() string {
	if os.Getenv("TMPDIR") != "" || isTmpfs(os.TempDir()) {
		return os.TempDir()
	}
	var st unix.Statfs_t
	if unix.Statfs(shmDir, &st) != nil || st.Type != unix.TMPFS_MAGIC || st.Flags&unix.ST_NOEXEC != 0 ||
		st.Flags&unix.ST_RDONLY != 0 || st.Bavail*uint64(st.Bsize) < minShmFree ||
		unix.Access(shmDir, unix.W_OK|unix.X_OK) != nil {
		return os.TempDir()
	}
	return shmDir
}

func isTmpfs(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.TMPFS_MAGIC
}
