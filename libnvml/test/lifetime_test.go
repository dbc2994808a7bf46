//go:build integration

package test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// One thread ending what another uses: a shutdown or a free during an
// event wait ends the wait (they crashed the process), handles survive a
// re-init, and a writer stalled inside the seqlock for 20 ms delays a
// reading rather than turn it static. Found in review.
func TestLifetimesAcrossThreads(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lifetime")
	gcc(t, "-O1", "-pthread", "-I"+testenv.NVMLHeaderDir(t), "-o", bin, filepath.Join(testDir(), "lifetime.c"),
		"-L"+testenv.LibDir(t), "-l:libnvidia-ml.so.1")
	snap, _ := testenv.Snapshot(t, "a100", gpus)
	testenv.LiveState(t, snap, gpus, time.Time{})
	state := filepath.Join(filepath.Dir(snap), "state")
	nvmock := filepath.Join(testenv.BuildDir(), "bin", "nvmock")
	if out, err := exec.Command(nvmock, "ctl", "--state", state, "load", "0", "80").CombinedOutput(); err != nil {
		t.Fatalf("nvmock ctl load: %v\n%s", err, out)
	}
	var s live.State
	seq := unsafe.Offsetof(s.Header) + unsafe.Offsetof(s.Header.Seq)
	out, code := run(t, time.Minute, testenv.Env(t, snap), bin, state, fmt.Sprint(seq))
	if code != 0 {
		t.Fatalf("lifetime exited %d:\n%s", code, out)
	}
	for _, want := range []string{
		"shutdown during a wait: Success; the wait: Uninitialized",
		"handle after re-init: same, name through the old one: Success",
		"free during a wait: Success; the wait: Invalid Argument",
		`process name in 4 bytes: Success "lif"`,
		"samples into a buffer of count 0: Invalid Argument",
		"utilization while a writer stalls 20 ms: Success 80%",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}
