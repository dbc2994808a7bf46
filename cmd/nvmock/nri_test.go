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

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/ibshim/umad"
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

// On an InfiniBand node the plugin serves the fabric; stopped, it takes
// its socket away as nvmock ibd does.
func TestNRIRemovesItsFabricSocketOnSIGTERM(t *testing.T) {
	bin := filepath.Join(testenv.BuildDir(), "bin", "nvmock")
	if _, err := os.Stat(bin); err != nil {
		testenv.Missing(t, "%s (run make build)", bin)
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (the install makes device nodes)")
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	install := exec.Command(bin, "hostprep", "install", "--root", root, "--cdi-dir", filepath.Join(dir, "cdi"), "--nfd-dir", filepath.Join(dir, "nfd"),
		"--profile", "h100", "--gpus", "1", "--node-name", "n1", "--assets", filepath.Join(testenv.BuildDir(), "driver"))
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command(bin, "hostprep", "uninstall", "--root", root).Run() })
	cmd := exec.Command(bin, "nri", "--socket", filepath.Join(dir, "nri.sock"), "--overlay-root", root, "--listen", "")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(root, hostprep.IBSocket)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no fabric socket at %s in 10 s", sock)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v", err)
	}
	for _, p := range []string{sock, sock + umad.IDSuffix} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is still there", p)
		}
	}
}
