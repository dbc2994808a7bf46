package nsexec

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// leftoverGrace is how long processes the command left running have, after
// SIGTERM, before SIGKILL.
const leftoverGrace = 2 * time.Second

// mountNS names process pid's mount namespace ("mnt:[4026532301]"); "" if
// it cannot be read (the process is gone, or not ours to see).
func mountNS(pid int) string {
	ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	if err != nil {
		return ""
	}
	return ns
}

// holdMountNS opens a mount namespace (path: a process's or a thread's
// ns/mnt), which keeps it, and so its name, from being freed and reused
// while the file is open; "", nil if it cannot be opened.
func holdMountNS(path string) (string, *os.File) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return "", nil
	}
	return fmt.Sprintf("mnt:[%d]", st.Ino), f
}

// inNamespace lists the live processes in mount namespace ns, with their
// names. A zombie has no namespace left and is not listed.
func inNamespace(ns string) map[int]string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := map[int]string{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || mountNS(pid) != ns {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
		out[pid] = strings.TrimSpace(string(comm))
	}
	return out
}

// endLeftovers ends the processes the command left running in its private
// mount namespace (ns), as a container's are when its first process ends:
// the mock node, its fabric and its files go with the command, and what
// runs on would wait on them forever. They get SIGTERM, and SIGKILL after
// leftoverGrace; note (if set) is told which they were.
func endLeftovers(ns string, note func(string)) {
	if ns == "" {
		return
	}
	left := inNamespace(ns)
	if len(left) == 0 {
		return
	}
	if note != nil {
		var names []string
		for pid, comm := range left {
			names = append(names, fmt.Sprintf("%d (%s)", pid, comm))
		}
		slices.Sort(names)
		note(fmt.Sprintf("ending %d process(es) the command left running: %s", len(left), strings.Join(names, ", ")))
	}
	signalAll := func(procs map[int]string, sig syscall.Signal) {
		for pid := range procs {
			signalIn(pid, ns, sig)
		}
	}
	signalAll(left, syscall.SIGTERM)
	for end := time.Now().Add(leftoverGrace); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if left = inNamespace(ns); len(left) == 0 {
			return
		}
	}
	// What a dying process forks is in the namespace too: until none is.
	for range 10 {
		signalAll(left, syscall.SIGKILL)
		time.Sleep(10 * time.Millisecond)
		if left = inNamespace(ns); len(left) == 0 {
			return
		}
	}
}

// signalIn sends sig to pid if it is still in namespace ns: through a pidfd,
// so that a pid reused since the scan is never signalled.
func signalIn(pid int, ns string, sig syscall.Signal) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone
	}
	defer unix.Close(fd)
	if mountNS(pid) == ns {
		_ = unix.PidfdSendSignal(fd, sig, nil, 0)
	}
}
