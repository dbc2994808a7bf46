//go:build integration

package smi

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// Every nvidia-smi that knows GPM (525 on) shows an H100's GPM metrics in
// dmon, following the load, and sets its stream state for the node; an
// A100 has no GPM, as nvidia-smi then says.
func TestEveryNvidiaSMIShowsGPMOnHopper(t *testing.T) {
	for _, s := range testenv.NvidiaSMIs(t) {
		if major(s.Version) < 525 {
			continue // no gpm commands
		}
		t.Run(s.Version, func(t *testing.T) {
			t.Parallel() // dmon takes a second a round
			snap, _ := testenv.Snapshot(t, "h100", 2)
			f := testenv.LiveState(t, snap, 2, time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
			boards, err := live.Boards(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Update(func(st *live.State, now int64) error {
				st.SetLoad(boards[0], 0, live.Loads{GPU: 80, Memory: 30}, now)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			run := smiRunner(t, s.Path, snap)
			// The first round has one sample, so "-"; later ones the
			// metrics, though nvidia-smi's sampling thread, racing its
			// printer, leaves a round "-" at times (in some releases the
			// first round shows its empty buffer, zeros): every round after
			// the first shows the metrics or dashes, and one at least the
			// metrics.
			out := run("dmon", "--gpm-metrics", "1,2,10,3", "-c", "5", "-s", "p")
			rows := testenv.Lines(out)
			if len(rows) != 12 || !strings.Contains(rows[0], "id=1") || !strings.Contains(rows[1], "GPM") {
				t.Fatalf("dmon --gpm-metrics:\n%s", out)
			}
			// Each row: GPU, power, two temperatures (these move with the
			// load), then ids 1, 2, 10 and 3.
			for i, want := range []string{"80 80 30 -", "0 0 0 -"} {
				seen := false
				for r := 1; r < 5; r++ {
					got := strings.Fields(rows[2+2*r+i])
					if len(got) != 8 || got[0] != fmt.Sprint(i) {
						t.Fatalf("dmon row %q", rows[2+2*r+i])
					}
					switch strings.Join(got[4:], " ") {
					case want:
						seen = true
					case "- - - -":
					default:
						t.Errorf("GPU %d, round %d: %q, want %q (occupancy is not modelled: -)\n%s", i, r+1, got, want, out)
					}
				}
				if !seen {
					t.Errorf("GPU %d: no round shows the metrics\n%s", i, out)
				}
			}
			state := func() string { return run("gpm", "-i", "0", "-g") + run("gpm", "-i", "1", "-g") }
			if got := state(); got != "GPM stream state: DISABLED\nGPM stream state: DISABLED\n" {
				t.Errorf("gpm -g at first:\n%s", got)
			}
			run("gpm", "-i", "1", "-s", "1")
			if got := state(); got != "GPM stream state: DISABLED\nGPM stream state: ENABLED\n" {
				t.Errorf("gpm -g after gpm -i 1 -s 1:\n%s", got)
			}
			if out, code, _ := runSMI(t, s.Path, snap, nil, "gpm", "-s", "2"); code == 0 || !strings.Contains(out, "Invalid Argument") {
				t.Errorf("gpm -s 2: exit %d\n%s", code, out)
			}

			old, _ := testenv.Snapshot(t, "a100", 1)
			out, code, err := runSMI(t, s.Path, old, nil, "gpm", "-g")
			if err != nil || code == 0 || !strings.Contains(out, "No GPM capable devices found") {
				t.Errorf("gpm -g on an A100: exit %d, %v\n%s", code, err, out)
			}
		})
	}
}
