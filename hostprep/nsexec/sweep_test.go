package nsexec

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// A sweep running beside runs that are starting never takes a directory
// a run has made and claimed (CI saw one taken between the lock file's
// creation and its lock, with two exec runs at once).
func TestASweepNeverTakesADirectoryBeingClaimed(t *testing.T) {
	parent := t.TempDir()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				Sweep(parent, Prefixed("run-"))
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for i := 0; i < 3000; i++ {
		dir := filepath.Join(parent, fmt.Sprintf("run-%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := Claim(dir); err != nil {
			t.Fatalf("run %d: claim: %v", i, err)
		}
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("run %d: a sweep took the directory just claimed: %v", i, err)
		}
	}
	for _, f := range held {
		f.Close()
	}
	held = nil
}
