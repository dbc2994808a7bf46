package live

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A writer held up by another that holds the lock says so, naming it,
// then goes on once it is free (review: a stopped writer looked like a
// hang).
func TestAWriterSaysWhomItWaitsFor(t *testing.T) {
	f := newState(t, 1)
	hold := exec.Command("flock", f.Path, "sleep", "60") // util-linux: exclusive
	hold.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := hold.Start(); err != nil {
		t.Fatalf("flock(1) from util-linux: %v", err)
	}
	stop := func() { syscall.Kill(-hold.Process.Pid, syscall.SIGKILL); hold.Wait() }
	defer stop()
	probe, err := os.Open(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	for end := time.Now().Add(10 * time.Second); unix.Flock(int(probe.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil; {
		unix.Flock(int(probe.Fd()), unix.LOCK_UN)
		if time.Now().After(end) {
			t.Fatal("flock(1) never took the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var mu sync.Mutex
	var said []string
	oldWait, oldWarn := lockWait, Warn
	lockWait, Warn = 50*time.Millisecond, func(msg string) { mu.Lock(); said = append(said, msg); mu.Unlock() }
	t.Cleanup(func() { lockWait, Warn = oldWait, oldWarn })
	done := make(chan error, 1)
	go func() { done <- f.Update(func(*State, int64) error { return nil }) }()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(said)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the waiting writer said nothing in 10 s")
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Update returned while the lock was held: %v", err)
	default:
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("state %s: waiting for another writer (pid %d, flock) to finish (50ms so far; a stopped process holds every writer)", f.Path, hold.Process.Pid)
	if mu.Lock(); len(said) != 1 || said[0] != want {
		t.Errorf("said %q, want %q", said, want)
	}
	mu.Unlock()
}
