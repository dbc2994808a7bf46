//go:build integration

package smi

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
)

// nvidia-smi compute-policy, which NVIDIA's DRA driver runs for its
// time-slicing config, lists and sets the GPUs' timeslice through the
// export table (0x600 and 0x608 in every release): Default until set, then
// what was set, for every later process. A value past Long is refused;
// from a read-only view, Insufficient Permissions.
func TestComputePolicyTimesliceIsSetForTheNode(t *testing.T) {
	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			snap, _ := testenv.Snapshot(t, "a100", 2)
			testenv.LiveState(t, snap, 2, time.Time{})
			run := smiRunner(t, s.Path, snap)
			rows := regexp.MustCompile(`\|\s+(\d)\s+(\S+)\s+(\S+)\s+\|`)
			list := func() string {
				t.Helper()
				var b strings.Builder
				for _, m := range rows.FindAllStringSubmatch(run("compute-policy", "-l"), -1) {
					b.WriteString(m[1] + " " + m[2] + " " + m[3] + "\n")
				}
				return b.String()
			}
			if got, want := list(), "0 Timeslice Default\n1 Timeslice Default\n"; got != want {
				t.Fatalf("compute-policy -l on a fresh node:\n%swant:\n%s", got, want)
			}
			if out := run("compute-policy", "-i", "1", "--set-timeslice", "3"); !strings.Contains(out, "Successfully set timeslice policy with value Long for GPU 1") {
				t.Errorf("compute-policy -i 1 --set-timeslice 3:\n%s", out)
			}
			if got, want := list(), "0 Timeslice Default\n1 Timeslice Long\n"; got != want {
				t.Errorf("compute-policy -l after GPU 1 was set Long:\n%swant:\n%s", got, want)
			}
			if out := run("compute-policy", "-i", "0", "--set-timeslice", "7"); !strings.Contains(out, "Invalid Argument") {
				t.Errorf("a timeslice past Long:\n%s", out)
			}
			out, code, err := runReadOnly(t, s.Path, snap, "compute-policy", "-i", "0", "--set-timeslice", "1")
			if err != nil || code == 0 || !strings.Contains(out, "Insufficient Permissions") {
				t.Errorf("a read-only state: exit %d, %v\n%s", code, err, out)
			}
			if got, want := list(), "0 Timeslice Default\n1 Timeslice Long\n"; got != want {
				t.Errorf("refused changes changed the policies:\n%swant:\n%s", got, want)
			}
		})
	}
}
