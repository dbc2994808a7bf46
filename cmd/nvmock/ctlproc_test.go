package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A thread's id and a zombie are not processes a GPU could list: refused
// (QA: both were registered and listed with their memory).
func TestCtlProcTakesOnlyALiveProcess(t *testing.T) {
	state := ctlNode(t, "1")
	// A thread of this test that is not its main one: of two goroutines
	// each holding a thread of its own, one at most is on the main thread.
	tids := make(chan int)
	done := make(chan struct{})
	defer close(done)
	for range 2 {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tids <- unix.Gettid()
			<-done
		}()
	}
	tid := <-tids
	if other := <-tids; tid == os.Getpid() {
		tid = other
	}
	// A child that exited and is not waited for.
	z := exec.Command("true")
	if err := z.Start(); err != nil {
		t.Fatal(err)
	}
	defer z.Wait()
	for i := 0; ; i++ {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", z.Process.Pid))
		if _, rest, _ := strings.Cut(string(b), ") "); strings.HasPrefix(rest, "Z") {
			break
		}
		if i == 500 {
			t.Fatal("the child never became a zombie")
		}
		time.Sleep(2 * time.Millisecond)
	}
	for _, c := range []struct {
		pid  int
		want string
	}{
		{tid, fmt.Sprintf("pid %d is a thread of process %d; register the process", tid, os.Getpid())},
		{z.Process.Pid, fmt.Sprintf("pid %d has exited (a zombie its parent has not reaped)", z.Process.Pid)},
	} {
		err := run([]string{"ctl", "--state", state, "proc", "add", "0", strconv.Itoa(c.pid)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("proc add %d: %v, want %q", c.pid, err, c.want)
		}
	}
	// QA: "has no GPU instance 0" did not say why.
	err := run([]string{"ctl", "--state", state, "proc", "add", "0", strconv.Itoa(os.Getpid()), "--gi", "0"})
	if want := "GPU 0 is not in MIG mode, so it has no GPU instance 0 (nvidia-smi -i 0 -mig 1 turns it on)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("proc add --gi 0 with MIG off: %v, want %q", err, want)
	}
	if err := run([]string{"ctl", "--state", state, "proc", "add", "0", strconv.Itoa(os.Getpid())}); err != nil {
		t.Errorf("proc add of this process: %v", err)
	}
}
