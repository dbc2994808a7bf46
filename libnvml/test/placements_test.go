//go:build integration

package test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
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
