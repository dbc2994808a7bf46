//go:build integration

package smi

import (
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// nvidia-smi -lgc, -lmc and -ac set the node's clocks, with every release:
// a locked range holds an idle GPU's clock up (no longer idle) and a loaded
// one's down, a lock past the board's clocks holds them at its maximum, and
// the resets give the board's back. Applications clocks are the listed
// pairs only. T4 (Turing) locks GPU clocks but not memory clocks; from a
// read-only view, no permission.
func TestClockSettingsAreSetForTheNode(t *testing.T) {
	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			snap, _ := testenv.Snapshot(t, "a100", 2)
			f := testenv.LiveState(t, snap, 2, time.Time{})
			run := smiRunner(t, s.Path, snap)
			q := func() string {
				t.Helper()
				return run("--query-gpu=clocks.sm,clocks.mem,clocks.applications.graphics,clocks.applications.memory,clocks_throttle_reasons.gpu_idle", "--format=csv,noheader")
			}
			fresh := "210 MHz, 1215 MHz, 1095 MHz, 1215 MHz, Active\n"
			if got := q(); got != fresh+fresh {
				t.Fatalf("a fresh node:\n%s", got)
			}
			if out := run("-lgc", "1000,1400"); !strings.Contains(out, `GPU clocks set to "(gpuClkMin 1000, gpuClkMax 1400)" for GPU 00000000:0F:00.0`) {
				t.Errorf("-lgc 1000,1400:\n%s", out)
			}
			if out := run("-i", "0", "-ac", "1215,1305"); !strings.Contains(out, `Applications clocks set to "(MEM 1215, SM 1305)" for GPU 00000000:07:00.0`) {
				t.Errorf("-i 0 -ac 1215,1305:\n%s", out)
			}
			if out := run("-i", "1", "-ac", "1215,1300"); !strings.Contains(out, `Specified clock combination "(MEM 1215, SM 1300)" is not supported`) {
				t.Errorf("-ac with a pair the board does not list:\n%s", out)
			}
			// A locked clock runs on a step inside the range: 1005, above 1000.
			if got, want := q(), "1005 MHz, 1215 MHz, 1305 MHz, 1215 MHz, Not Active\n1005 MHz, 1215 MHz, 1095 MHz, 1215 MHz, Not Active\n"; got != want {
				t.Errorf("locked 1000-1400, GPU 0's applications clocks set:\n%swant:\n%s", got, want)
			}
			// The clock samples -q shows agree.
			if out := strings.Join(strings.Fields(run("-i", "0", "-q", "-d", "CLOCK")), " "); !strings.Contains(out, "SM Clock Samples Duration : 0.90 sec Number of Samples : 10 Max : 1005 MHz Min : 1005 MHz Avg : 1005 MHz") {
				t.Errorf("-q -d CLOCK, locked 1000-1400:\n%s", out)
			}
			// Under full load the lock's maximum holds the clock.
			boards, err := live.Boards(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Update(func(st *live.State, now int64) error {
				st.SetLoad(boards[1], 1, live.Loads{GPU: 100}, now)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			// The model runs a full load at 95 per cent of 1410 MHz, in the
			// range, on the board's 15 MHz steps.
			if got := run("-i", "1", "--query-gpu=clocks.sm", "--format=csv,noheader"); got != "1335 MHz\n" {
				t.Errorf("GPU 1 at full load, locked to 1000-1400: %q", got)
			}
			run("-i", "1", "-lgc", "1000,1100")
			if got := run("-i", "1", "--query-gpu=clocks.sm", "--format=csv,noheader"); got != "1095 MHz\n" {
				t.Errorf("GPU 1 at full load, locked to 1100 at most: %q", got)
			}
			run("-i", "0", "-lgc", "3000")
			if got := run("-i", "0", "--query-gpu=clocks.sm", "--format=csv,noheader"); got != "1410 MHz\n" {
				t.Errorf("GPU 0 locked at 3000 MHz, past its 1410: %q", got)
			}
			if out := run("-lmc", "1000,2000"); !strings.Contains(out, `Memory clocks set to "(memClkMin 1000, memClkMax 2000)"`) {
				t.Errorf("-lmc on an A100:\n%s", out)
			}
			out, code, err := runReadOnly(t, s.Path, snap, "-i", "0", "-lgc", "500,600")
			if err != nil || code == 0 || !strings.Contains(out, "The current user does not have permission to change clocks") {
				t.Errorf("a read-only state: exit %d, %v\n%s", code, err, out)
			}
			for _, reset := range []string{"-rgc", "-rac", "-rmc"} {
				if out := run(reset); !strings.Contains(out, "All done.") || strings.Contains(out, "not supported") {
					t.Errorf("%s:\n%s", reset, out)
				}
			}
			if err := f.Update(func(st *live.State, now int64) error {
				st.SetLoad(boards[1], 1, live.Loads{}, now)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if got := q(); got != fresh+fresh {
				t.Errorf("after -rgc, -rac and -rmc:\n%swant:\n%s", got, fresh+fresh)
			}

			t4, _ := testenv.Snapshot(t, "t4", 1)
			testenv.LiveState(t, t4, 1, time.Time{})
			run = smiRunner(t, s.Path, t4)
			if out := run("-lmc", "405"); !strings.Contains(out, "not supported") {
				t.Errorf("-lmc on a T4:\n%s", out)
			}
			if out := run("-lgc", "900"); !strings.Contains(out, `GPU clocks set to "(gpuClkMin 900, gpuClkMax 900)"`) {
				t.Errorf("-lgc on a T4:\n%s", out)
			}
		})
	}
}
