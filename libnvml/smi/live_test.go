//go:build integration

package smi

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/live"
)

// Every nvidia-smi shows the node's live state: a load, faults and a
// registered process, set as nvmock ctl sets them.
func TestEveryNvidiaSMIShowsTheLiveState(t *testing.T) {
	snap, _ := testenv.Snapshot(t, "a100", 4)
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	f := testenv.LiveState(t, snap, 4, start)
	boards, err := live.Boards(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	self := uint32(os.Getpid())
	err = f.Update(func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 80, Memory: 40}, now)
		if err := s.AddFault(2, live.Fault{Kind: live.FaultThermal}, now); err != nil {
			return err
		}
		if err := s.XID(3, 48, now); err != nil {
			return err
		}
		return s.AddProcess(live.Process{PID: self, GPU: 0, Type: 1, UsedBytes: 20 << 30, Name: "python3", PIDNS: live.PIDNamespace()}, now)
	})
	if err != nil {
		t.Fatal(err)
	}
	// Two minutes on: the samples buffer holds only the load.
	if err := f.Update(func(s *live.State, _ int64) error { s.Header.FrozenNS += uint64(2 * time.Minute); return nil }); err != nil {
		t.Fatal(err)
	}
	g := f.Read().GPUs[0]
	tempMC, _ := boards[0].At(80, g.Temp0MC, g.Energy0MJ, int64(2*time.Minute))
	hot := (tempMC + 500) / 1000
	watts := fmt.Sprintf("%.2f", float64(uint32(boards[0].PowerMW(80)+0.5))/1000)
	slow := boards[2].SlowdownC + 1

	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			q, code, err := runSMI(t, s.Path, snap, nil, "--query-gpu=index,utilization.gpu,utilization.memory,temperature.gpu,power.draw,clocks_throttle_reasons.hw_thermal_slowdown,ecc.errors.uncorrected.volatile.total,memory.used",
				"--format=csv,noheader,nounits")
			// What an idle GPU counts as used: 470 reads the first memory
			// call, which counts the driver's reserve as used; later
			// releases do not.
			base := 0
			if lines := strings.Split(q, "\n"); len(lines) > 1 {
				fmt.Sscanf(lines[1][strings.LastIndex(lines[1], ",")+1:], " %d", &base)
			}
			want := fmt.Sprintf("0, 80, 40, %d, %s, Not Active, 0, %d\n", hot, watts, base+20480) +
				fmt.Sprintf("1, 0, 0, %d, %.2f, Not Active, 0, %d\n", boards[1].IdleTempC, float64(boards[1].IdleMW)/1000, base) +
				fmt.Sprintf("2, 0, 0, %d, %.2f, Active, 0, %d\n", slow, float64(boards[2].IdleMW)/1000, base) +
				fmt.Sprintf("3, 0, 0, %d, %.2f, Not Active, 1, %d\n", boards[3].IdleTempC, float64(boards[3].IdleMW)/1000, base)
			if err != nil || code != 0 || q != want {
				t.Errorf("--query-gpu: exit %d (%v):\n%s\nwant\n%s", code, err, q, want)
			}

			out, code, err := runSMI(t, s.Path, snap, nil)
			row := regexp.MustCompile(fmt.Sprintf(`\|\s+0\s+N/A\s+N/A\s+%d\s+C\s+python3\s+20480MiB\s+\|`, self))
			if err != nil || code != 0 || !row.MatchString(out) {
				t.Errorf("default view: exit %d (%v), want the process row for pid %d:\n%s", code, err, self, tail(out))
			}
			if !regexp.MustCompile(fmt.Sprintf(`\|\s+N/A\s+%dC\s+P0\s+%dW /\s+400W \|\s+%dMiB /\s+40960MiB \|\s+80%%`, hot, uint32(boards[0].PowerMW(80)+0.5)/1000, base+20480)).MatchString(out) {
				t.Errorf("default view: GPU 0's row lacks %d C, its power and 80 %%:\n%s", hot, out)
			}

			out, code, err = runSMI(t, s.Path, snap, nil, "dmon", "-c", "1", "-s", "u")
			if err != nil || code != 0 || !regexp.MustCompile(`(?m)^\s+0\s+80\s+40\s+0\s+0\b`).MatchString(out) {
				t.Errorf("dmon -s u: exit %d (%v), want GPU 0 at sm 80 mem 40:\n%s", code, err, out)
			}

			out, code, err = runSMI(t, s.Path, snap, nil, "pmon", "-c", "1")
			if err != nil || code != 0 || !regexp.MustCompile(fmt.Sprintf(`(?m)^\s+0\s+%d\s+C\s.*python3`, self)).MatchString(out) {
				t.Errorf("pmon: exit %d (%v), want GPU 0's process %d:\n%s", code, err, self, out)
			}

			out, code, err = runSMI(t, s.Path, snap, nil, "-q", "-i", "0", "-d", "UTILIZATION")
			if err != nil || code != 0 || !regexp.MustCompile(`Gpu\s+: 80 %`).MatchString(out) ||
				!regexp.MustCompile(`GPU Utilization Samples\s+Duration\s+: [0-9.]+ sec\s+Number of Samples\s+: 10\s+Max\s+: 80 %\s+Min\s+: 80 %\s+Avg\s+: 80 %`).MatchString(out) {
				t.Errorf("-q -d UTILIZATION: exit %d (%v), want 80 %% now and in every sample:\n%s", code, err, out)
			}

			out, code, err = runSMI(t, s.Path, snap, nil, "-q", "-i", "2", "-d", "PERFORMANCE,TEMPERATURE")
			if err != nil || code != 0 || !regexp.MustCompile(`HW Thermal Slowdown\s+: Active`).MatchString(out) ||
				!regexp.MustCompile(fmt.Sprintf(`GPU Current Temp\s+: %d C`, slow)).MatchString(out) {
				t.Errorf("-q -d PERFORMANCE,TEMPERATURE on the hot GPU: exit %d (%v):\n%s", code, err, out)
			}

			out, code, err = runSMI(t, s.Path, snap, nil, "-q", "-i", "3", "-d", "ECC")
			if err != nil || code != 0 || !regexp.MustCompile(`Volatile(?s:.*?)DRAM Uncorrectable\s+: 1`).MatchString(out) &&
				!regexp.MustCompile(`Volatile(?s:.*?)Double Bit(?s:.*?)Device Memory\s+: 1`).MatchString(out) {
				t.Errorf("-q -d ECC after XID 48: exit %d (%v):\n%s", code, err, out)
			}
		})
	}
}

// A lost GPU prints what the real nvidia-smi prints for one: its bus id,
// "GPU is lost" and the advice to reboot, and no table.
func TestEveryNvidiaSMIReportsALostGPUAsOnRealHardware(t *testing.T) {
	snap, p := testenv.Snapshot(t, "a100", 8)
	f := testenv.LiveState(t, snap, 8, time.Time{})
	if err := f.Update(func(s *live.State, now int64) error { return s.XID(4, 79, now) }); err != nil {
		t.Fatal(err)
	}
	bus := snapshot.BusID(p, 4)[4:] // nvidia-smi names it with a 4-digit domain
	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			// Each release's own format string: 470 puts a space
			// after "GPU", later ones do not.
			sep := ""
			if strings.HasPrefix(s.Version, "470.") {
				sep = " "
			}
			want := "Unable to determine the device handle for GPU" + sep + bus + ": GPU is lost.  Reboot the system to recover this GPU"
			out, code, err := runSMI(t, s.Path, snap, nil)
			if err != nil || code != 15 || !strings.Contains(out, want) || strings.Contains(out, "NVIDIA-SMI") {
				t.Errorf("default view: exit %d (%v), want 15 (NVML_ERROR_GPU_IS_LOST) and only %q:\n%s", code, err, want, out)
			}
			out, _, err = runSMI(t, s.Path, snap, nil, "-L")
			if err != nil || !strings.Contains(out, "Unable to determine the device handle for gpu "+bus+": GPU is lost") ||
				strings.Count(out, "(UUID: GPU-") != 7 {
				t.Errorf("-L: (%v) want the seven others listed and GPU 4 lost:\n%s", err, out)
			}
		})
	}
}
