package nsexec

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A run's temporary directories carry a lock file that the run holds for
// its lifetime; a directory whose lock no one holds belongs to a run that
// was killed (SIGKILL, a crash) and is swept by the next one.
const lockName = ".nvmock-lock"

// held keeps the locks this process holds until it exits.
var held []*os.File

// Prefixed matches the names that start with prefix.
func Prefixed(prefix string) func(string) bool {
	return func(name string) bool { return strings.HasPrefix(name, prefix) }
}

// Claim marks dir as this process's until it exits. The lock file is
// locked under another name and then renamed into place: a sweep that
// found it created and not yet locked took the directory of a run that
// had just started (two exec runs at once: CI saw it).
func Claim(dir string) error {
	tmp := filepath.Join(dir, lockName+".new")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, lockName)); err != nil {
		f.Close()
		return err
	}
	held = append(held, f)
	return nil
}

// unclaimedAge is how old a directory without a lock file must be before a
// sweep takes it: younger ones may be a run between making it and claiming
// it.
const unclaimedAge = 10 * time.Minute

// Sweep removes this user's directories in parent whose names match and
// whose run is gone. Errors are ignored: sweeping is housekeeping.
func Sweep(parent string, match func(name string) bool) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !match(e.Name()) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		if abandoned(dir) {
			os.RemoveAll(dir)
		}
	}
}

// abandoned says whether dir is this user's and no live run holds it.
func abandoned(dir string) bool {
	var st unix.Stat_t
	if unix.Lstat(dir, &st) != nil || int(st.Uid) != os.Geteuid() || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return time.Since(time.Unix(st.Mtim.Sec, st.Mtim.Nsec)) > unclaimedAge
	}
	if err != nil {
		return false
	}
	defer f.Close()
	// Taken and let go at once: the remover holds nothing afterwards.
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
}

// keepCached is how many trees of a kind the cache keeps: each is some
// 20 MB, and every profile, GPU count and InfiniBand fault makes another.
const keepCached = 8

// use holds a shared lock on the cached entry dst for this process's
// lifetime, so that no prune removes it under a running namespace, and
// marks it used now.
func use(dst string) error {
	f, err := os.OpenFile(dst+".lock", os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return err
	}
	now := time.Now()
	os.Chtimes(f.Name(), now, now)
	held = append(held, f)
	return nil
}

// prune removes the least recently used entries of kind (the name's prefix
// up to its first '-') beyond keepCached, other than those in use.
func prune(base, kind string) {
	locks, _ := filepath.Glob(filepath.Join(base, kind+"-*.lock"))
	type entry struct {
		lock string
		used time.Time
	}
	var es []entry
	for _, l := range locks {
		if fi, err := os.Stat(l); err == nil {
			es = append(es, entry{l, fi.ModTime()})
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].used.After(es[j].used) })
	for _, e := range es[min(keepCached, len(es)):] {
		f, err := os.OpenFile(e.lock, os.O_RDWR|syscall.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			// Renamed aside first: a run that looks it up meanwhile
			// renders it afresh rather than find half of it.
			dst := strings.TrimSuffix(e.lock, ".lock")
			if gone, err := os.MkdirTemp(base, filepath.Base(dst)+".tmp-"); err == nil {
				if os.Rename(dst, filepath.Join(gone, "t")) == nil || !isDir(dst) {
					os.Remove(e.lock)
				}
				os.RemoveAll(gone)
			}
		}
		f.Close()
	}
}
