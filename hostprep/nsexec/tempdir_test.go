//go:build integration

package nsexec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nvmock/nvmock/internal/testenv"
)

// mountTmpfs mounts a tmpfs with opts at a new directory in parent, for
// the test's length.
func mountTmpfs(t *testing.T, parent, opts string) string {
	t.Helper()
	needRoot(t)
	d, err := os.MkdirTemp(parent, "nsexec-tmpfs-")
	if err != nil {
		testenv.Missing(t, "a directory in %s: %v", parent, err)
	}
	var flags uintptr
	var data []string
	for _, o := range strings.Split(opts, ",") {
		switch o {
		case "nosuid":
			flags |= unix.MS_NOSUID
		case "nodev":
			flags |= unix.MS_NODEV
		case "noexec":
			flags |= unix.MS_NOEXEC
		default:
			data = append(data, o)
		}
	}
	if err := unix.Mount("tmpfs", d, "tmpfs", flags, strings.Join(data, ",")); err != nil {
		os.Remove(d)
		t.Fatalf("mount a tmpfs at %s: %v", d, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(d, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", d, err)
		}
		os.Remove(d)
	})
	return d
}

// exec's default temporary directory is /dev/shm, under the /dev the
// namespace covers with its own, and a typical /dev/shm is nosuid,nodev,
// which a user namespace may not clear from the mounts it binds read-only.
// A first try at it failed with "stage/dev: no such file".
func TestAnOverlayInATmpfsUnderDevWorks(t *testing.T) {
	for _, userns := range []bool{false, true} {
		tmp := mountTmpfs(t, "/dev/shm", "nosuid,nodev,mode=755")
		r := runIn(t, tmp, "h100", 2, userns, "sh", "-c", `nvidia-smi -L && stat -f -c %T /dev/.nvmock/driver && echo x > /dev/null && ls /dev/shm >/dev/null && echo ok`)
		if r.err != nil || r.status != 0 {
			t.Fatalf("userns %v: status %d, %v; stdout %q, stderr %q", userns, r.status, r.err, r.stdout, r.stderr)
		}
		for _, w := range []string{"GPU 1: NVIDIA H100 80GB HBM3", "\ntmpfs\n", "ok"} {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("userns %v: no %q in\n%s", userns, w, r.stdout)
			}
		}
		if len(r.tmpLeft) != 0 {
			t.Errorf("userns %v: left behind: %v", userns, r.tmpLeft)
		}
	}
}

func TestTheOverlayGoesToATmpfsWhenTMPDIRIsUnset(t *testing.T) {
	needRoot(t)
	set := t.TempDir()
	t.Setenv("TMPDIR", set)
	if got := TempDir(); got != set {
		t.Errorf("TMPDIR %s: TempDir %s", set, got)
	}
	t.Setenv("TMPDIR", "")
	if isTmpfs("/tmp") {
		// The rest is for a /tmp on a disk; here /tmp is what to use.
		if got := TempDir(); got != "/tmp" {
			t.Errorf("/tmp is a tmpfs, yet TempDir is %s", got)
		}
		return
	}
	base := t.TempDir()
	for _, tc := range []struct {
		name, opts string
		want       bool // the tmpfs, not /tmp
	}{
		{"a tmpfs with room", "size=1g,mode=1777", true},
		{"noexec: the overlay's nvidia-smi could not run", "noexec,size=1g,mode=1777", false},
		{"too small", "size=16m,mode=1777", false},
	} {
		shm := mountTmpfs(t, base, tc.opts)
		old := shmDir
		shmDir = shm
		got := TempDir()
		shmDir = old
		if want := map[bool]string{true: shm, false: "/tmp"}[tc.want]; got != want {
			t.Errorf("%s: TempDir %s, want %s", tc.name, got, want)
		}
	}
	shmDir = filepath.Join(base, "none")
	defer func() { shmDir = "/dev/shm" }()
	if got := TempDir(); got != "/tmp" {
		t.Errorf("no /dev/shm: TempDir %s, want /tmp", got)
	}
}
