//go:build integration

package smi

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// pmon shows each registered process's share of its GPU's load, engine by
// engine, on every release: two processes on a GPU at 80 % take 40 % each,
// three take a second's samples 4, 3 and 3, and an engine that does
// nothing, or a GPU without a load, prints "-".
func TestEveryNvidiaSMIPmonSharesTheLoadAmongProcesses(t *testing.T) {
	snap, _ := testenv.Snapshot(t, "a100", 3)
	f := testenv.LiveState(t, snap, 3, time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	boards, err := live.Boards(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	var pids []uint32
	for range 2 {
		other := exec.Command("sleep", "120")
		if err := other.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Process.Kill(); other.Wait() })
		pids = append(pids, uint32(other.Process.Pid))
	}
	self, second, third := uint32(os.Getpid()), pids[0], pids[1]
	err = f.Update(func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 80, Memory: 40, Decoder: 30}, now)
		s.SetLoad(boards[2], 2, live.Loads{GPU: 60}, now)
		for _, p := range []live.Process{
			{PID: self, GPU: 0, Type: 1, UsedBytes: 1 << 30, Name: "python3"},
			{PID: second, GPU: 0, Type: 1, UsedBytes: 1 << 30, Name: "train"},
			{PID: second, GPU: 1, Type: 1, UsedBytes: 1 << 30, Name: "train"},
			{PID: self, GPU: 2, Type: 1, UsedBytes: 1 << 30, Name: "python3"},
			{PID: second, GPU: 2, Type: 1, UsedBytes: 1 << 30, Name: "train"},
			{PID: third, GPU: 2, Type: 1, UsedBytes: 1 << 30, Name: "eval"},
		} {
			p.PIDNS = live.PIDNamespace()
			if err := s.AddProcess(p, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A minute on: pmon's last second holds only the load.
	if err := f.Update(func(s *live.State, _ int64) error { s.Header.FrozenNS += uint64(time.Minute); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			// sm mem enc dec, and from 550 jpg and ofa, which no
			// load moves.
			idle := ""
			if !strings.HasPrefix(s.Version, "470.") && !strings.HasPrefix(s.Version, "535.") {
				idle = `\s+-\s+-`
			}
			out, code, err := runSMI(t, s.Path, snap, nil, "pmon", "-c", "1")
			for _, want := range []string{
				fmt.Sprintf(`(?m)^\s+0\s+%d\s+C\s+40\s+20\s+-\s+15%s\s+python3`, self, idle),
				fmt.Sprintf(`(?m)^\s+0\s+%d\s+C\s+40\s+20\s+-\s+15%s\s+train`, second, idle),
				fmt.Sprintf(`(?m)^\s+1\s+%d\s+C\s+-\s+-\s+-\s+-%s\s+train`, second, idle),
			} {
				if err != nil || code != 0 || !regexp.MustCompile(want).MatchString(out) {
					t.Errorf("pmon: exit %d (%v), want a line matching %s:\n%s", code, err, want, out)
				}
			}
			// Three processes share a second's ten samples 4, 3, 3:
			// 24 or 18 % of 60 each, 60 in all.
			sum := 0
			for _, pid := range []uint32{self, second, third} {
				m := regexp.MustCompile(fmt.Sprintf(`(?m)^\s+2\s+%d\s+C\s+(\d+)\s`, pid)).FindStringSubmatch(out)
				if m == nil || (m[1] != "24" && m[1] != "18") {
					t.Errorf("pmon: process %d on GPU 2 at 60 %% with two others: %v, want 24 or 18:\n%s", pid, m, out)
					continue
				}
				var v int
				fmt.Sscan(m[1], &v)
				sum += v
			}
			if sum != 60 && !t.Failed() {
				t.Errorf("pmon: GPU 2's processes take %d %%, want its 60:\n%s", sum, out)
			}
			// The one private entry whose layout changed between
			// releases is left out of the table for unknown ones.
			out, code, err = runSMI(t, s.Path, snap, []string{"NVMOCK_SMI_TABLE=generic"}, "pmon", "-c", "1")
			want := fmt.Sprintf(`(?m)^\s+0\s+%d\s+C\s+-\s+-\s+-\s+-%s\s+python3`, self, idle)
			if err != nil || code != 0 || !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("pmon on the generic table: exit %d (%v), want a line matching %s:\n%s", code, err, want, out)
			}
		})
	}
}
