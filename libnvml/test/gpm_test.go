//go:build integration

package test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
)

// GPM's answers to what a client can get wrong, through the C ABI (go-nvml
// sets the versions itself): every error as nvml.h lists it, and samples
// that outlive a shutdown and a re-init.
func TestGPMRefusesWhatNVMLRefuses(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gpm")
	gcc(t, "-O1", "-I"+testenv.NVMLHeaderDir(t), "-o", bin, filepath.Join(testDir(), "gpm.c"),
		"-L"+testenv.LibDir(t), "-l:libnvidia-ml.so.1")
	snap, _ := testenv.Snapshot(t, "h100", 2)
	out, code := run(t, time.Minute, testenv.Env(t, snap), bin)
	want := `alloc before init: Uninitialized
support of version 2: Argument version mismatch
support into NULL: Invalid Argument
alloc into NULL: Invalid Argument
samples allocated: 4096
one more: Insufficient Memory
metrics of version 0: Argument version mismatch
metrics past the array: Invalid Argument
metrics into NULL: Invalid Argument
metrics: Success
metric 1: Success; 0: Not Supported; 0xffffffff: Not Supported
metrics after shutdown: Uninitialized
free after shutdown: Uninitialized
metrics after re-init: Success
free: Success
free again: Invalid Argument
metrics of a freed sample: Invalid Argument
`
	if code != 0 || out != want {
		t.Errorf("gpm exited %d:\n%s", code, testenv.FirstDiff(want, out))
	}
}
