package nsexec

import (
	"os"
	"sort"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// inherited are the descriptors above stderr this process was started
// with (a socket from systemd, a `3>file`): the command gets them at the
// same numbers, as a shell would pass them. Go opens its own close-on-exec,
// so those without the flag are the inherited ones, whenever they are
// read; read once, when a command is started (not in the plugin, whose
// runtime may hand it a socket), and kept so that no finalizer closes them.
var (
	inheritedOnce sync.Once
	inherited     []*os.File
)

func scanInherited() []*os.File {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	self := int(d.Fd())
	var fds []int
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd <= 2 || fd == self {
			continue
		}
		// Only what exec passed on: this process's own are close-on-exec.
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC != 0 {
			continue
		}
		fds = append(fds, fd)
	}
	sort.Ints(fds)
	out := make([]*os.File, 0, len(fds))
	for _, fd := range fds {
		out = append(out, os.NewFile(uintptr(fd), "inherited-"+strconv.Itoa(fd)))
	}
	return out
}

// extraFiles lays out the child's descriptors from 3 on: the inherited
// ones at their numbers, then status. It returns the list for
// exec.Cmd.ExtraFiles and status's number in the child. Where that number
// would pass the open-file limit (which the fork must keep to), status
// takes the lowest number no inherited one has, and only those below it
// are listed: the others reach the child as they are, having no
// close-on-exec flag (an entry left out would be closed).
func extraFiles(status *os.File) ([]*os.File, int) {
	inheritedOnce.Do(func() { inherited = scanInherited() })
	top := 2
	for _, f := range inherited {
		top = max(top, int(f.Fd()))
	}
	slot := top + 1
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && uint64(slot) >= lim.Cur {
		slot = 3
		for _, f := range inherited { // sorted
			if int(f.Fd()) == slot {
				slot++
			}
		}
	}
	files := make([]*os.File, slot-3+1)
	for _, f := range inherited {
		if n := int(f.Fd()); n < slot {
			files[n-3] = f
		}
	}
	files[slot-3] = status
	return files, slot
}
