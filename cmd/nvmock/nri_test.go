//go:build integration

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
)

// TestNRIExitsCleanlyOnSIGTERM runs the built binary while it is still
// retrying to reach a runtime, as when the kubelet stops it.
func TestNRIExitsCleanlyOnSIGTERM(t *testing.T) {
	bin := filepath.Join(testenv.BuildDir(), "bin", "nvmock")
	if _, err := os.Stat(bin); err != nil {
		testenv.Missing(t, "%s (run make build)", bin)
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "nri", "--socket", filepath.Join(dir, "nri.sock"), "--overlay-root", dir, "--listen", "")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Errorf("exit status %d after SIGTERM, want 0", ee.ExitCode())
		} else if err != nil {
			t.Error(err)
		}
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		t.Fatal("still running 5 s after SIGTERM")
	}
}
