//go:build integration

package test

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// The first placements call writes no more than the profile's instance
// count: a100's 1g.5gb+me has 7 places and room for 1 instance.
func TestPlacementsV1StayInTheCallersBuffer(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "placements_v1")
	gcc(t, "-O1", "-I"+testenv.NVMLHeaderDir(t), "-o", bin, filepath.Join(testDir(), "placements_v1.c"),
		"-L"+testenv.LibDir(t), "-l:libnvidia-ml.so.1")
	snap, _ := testenv.Snapshot(t, "a100", gpus)
	out, code := run(t, time.Minute, testenv.Env(t, snap), bin)
	if code != 0 {
		t.Fatalf("placements_v1 exited %d (1: wrote past the instance count):\n%s", code, out)
	}
	for _, want := range []string{"profile 20: Success, 1 of 1", "profile 19: Success, 7 of 7", "no buffer: Invalid Argument"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

// A GPU instance replaced by one of another profile between a compute
// instance create's lookup and its lock is not the one the handle named:
// the create fails, where it made a 4-slice CI in a 3-slice GI (review).
func TestACIIsNotMadeInAGPUInstanceReplacedMeanwhile(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cirace")
	gcc(t, "-O1", "-I"+testenv.NVMLHeaderDir(t), "-o", bin, filepath.Join(testDir(), "cirace.c"),
		"-L"+testenv.LibDir(t), "-l:libnvidia-ml.so.1", "-ldl")
	snap, _ := testenv.Snapshot(t, "a100", 1)
	f := testenv.LiveState(t, snap, 1, time.Time{})
	if err := f.Update(func(s *live.State, _ int64) error { return s.SetMIGMode(0, true) }); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, time.Minute, testenv.Env(t, snap, "NVMOCK_STATE="+f.Path), bin)
	if code != 0 || !strings.Contains(out, "3g: Success, Success") || !regexp.MustCompile(`GI \d+: 3g`).MatchString(out) {
		t.Fatalf("cirace exited %d; the GPU instance was not replaced by a 3g one as the test needs:\n%s", code, out)
	}
	if !strings.Contains(out, "4c.4g create: Invalid Argument") {
		t.Errorf("a 4-slice CI through a handle to a replaced GI, want Invalid Argument:\n%s", out)
	}
}
