//go:build integration

package smi

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// dmon's thermal violation column follows the live state on every
// release: 0 on a cool GPU, 1 on one held back by heat. 550 prints 1 once
// the violation time has grown since its last sample; the others also as
// soon as the GPU is at its slowdown temperature.
// On a board with no slowdown threshold (h100's capture) those three
// print "-".
func TestEveryNvidiaSMIDmonShowsThermalViolations(t *testing.T) {
	row := regexp.MustCompile(`(?m)^\s+(\d)\s+(\d+)\s+(\S+)\s*$`)
	for _, profile := range []string{"a100", "h100"} {
		snap, _ := testenv.Snapshot(t, profile, 2)
		f := testenv.LiveState(t, snap, 2, time.Time{}) // the real clock: the violation time grows
		err := f.Update(func(s *live.State, now int64) error {
			return s.AddFault(1, live.Fault{Kind: live.FaultThermal}, now)
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range testenv.NvidiaSMIs(t) {
			t.Run(profile+"/"+s.Version, func(t *testing.T) {
				out, code, err := runSMI(t, s.Path, snap, nil, "dmon", "-c", "2", "-s", "v")
				var got []string
				for _, m := range row.FindAllStringSubmatch(out, -1) {
					got = append(got, m[1]+":"+m[3])
				}
				want := "0:0 1:1 0:0 1:1"
				if profile == "h100" {
					want = "0:- 1:- 0:- 1:-"
				}
				if strings.HasPrefix(s.Version, "550.") {
					want = "0:0 1:0 0:0 1:1"
				}
				if err != nil || code != 0 || strings.Join(got, " ") != want {
					t.Errorf("dmon -s v: exit %d (%v), want GPU:tviol %s, got %v:\n%s", code, err, want, got, out)
				}
			})
		}
	}
}
