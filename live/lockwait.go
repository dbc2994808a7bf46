package live

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// lockWait is how long a writer waits for the writers' lock before it says
// whom it waits for: a writer stopped while holding it (a debugger, SIGSTOP,
// a frozen cgroup) holds every other one, which looked like a hang (review).
// A var for the tests.
var lockWait = 2 * time.Second

// lock takes the writers' lock on fd, saying after lockWait that it waits.
func lock(path string, fd int) error {
	err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if !errors.Is(err, unix.EWOULDBLOCK) {
		return err
	}
	t := time.AfterFunc(lockWait, func() {
		Warn(fmt.Sprintf("state %s: waiting for another writer%s to finish (%v so far; a stopped process holds every writer)", path, holder(fd), lockWait))
	})
	defer t.Stop()
	return unix.Flock(fd, unix.LOCK_EX)
}

// holder names the process /proc/locks shows holding fd's file's lock, as
// " (pid N, NAME)"; "" when it does not show one.
func holder(fd int) string {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return ""
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return ""
	}
	defer f.Close()
	// "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; a waiter's line has "->".
	want := ":" + strconv.FormatUint(st.Ino, 10)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		if len(w) < 6 || w[1] != "FLOCK" || !strings.HasSuffix(w[5], want) {
			continue
		}
		pid, err := strconv.Atoi(w[4])
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + w[4] + "/comm")
		return fmt.Sprintf(" (pid %d, %s)", pid, strings.TrimSpace(string(comm)))
	}
	return ""
}
