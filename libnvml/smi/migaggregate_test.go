//go:build integration

package smi

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
)

// capRoot is a container's /dev with GPU 0 and the capability nodes of
// GPU instance gi's compute instance 0, and the MIG monitor capability's
// with monitor.
func capRoot(t *testing.T, gi int, monitor bool) string {
	nodes := []string{"nvidiactl", "nvidia0", "nvidia-caps/nvidia-cap" + strconv.Itoa(hostprep.MIGCapMinor(0, gi, -1)),
		"nvidia-caps/nvidia-cap" + strconv.Itoa(hostprep.MIGCapMinor(0, gi, 0))}
	if monitor {
		nodes = append(nodes, "nvidia-caps/nvidia-cap2")
	}
	return devRoot(t, nodes...)
}

// In a container given one MIG device (its GPU's node and the two
// capability nodes) every nvidia-smi shows the GPU's memory as a real
// one does there: N/A in the default view (an A100 and an H100 NVL in
// containers on R535: DCGM #152, dcgm-exporter #544) and "[Insufficient
// Permissions]" in queries (an A100 pod on 535.161.08,
// StableSwarmUI #388), while its MIG device's row has its own. The MIG
// monitor capability (NVIDIA_MIG_MONITOR_DEVICES=all) gives the GPU's.
func TestAContainerOnAMIGDeviceReadsNoGPUTotals(t *testing.T) {
	snap, p := testenv.Snapshot(t, "a100", 2)
	gpuRow := regexp.MustCompile(`(?m)^\|\s+N/A\s+\d+C\s+P0\s+\d+W /\s+400W \|\s+(.*?)\s+\|\s+N/A\s+Default \|$`)
	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			testenv.LiveState(t, snap, 2, time.Time{})
			run := smiRunner(t, s.Path, snap)
			run("-i", "0", "-mig", "1")
			if out := run("mig", "-cgi", "19", "-C"); !strings.Contains(out, "GPU instance ID 13") {
				t.Fatalf("the 1g.5gb is not GPU instance 13:\n%s", out)
			}
			for _, monitor := range []bool{false, true} {
				env := []string{"NVMOCK_DEV_ROOT=" + capRoot(t, 13, monitor)}
				wantMem, wantQuery := "N/A", "[Insufficient Permissions], [Insufficient Permissions]\n"
				if monitor {
					// 470 reads the first memory call, which counts the
					// driver's reserve as used.
					used := 0
					if major(s.Version) < 535 {
						used = int(p.Board.Memory.Reserved >> 20)
					}
					wantMem, wantQuery = fmt.Sprintf("%dMiB / 40960MiB", used), fmt.Sprintf("40960 MiB, %d MiB\n", used)
				}
				out, code, err := runSMI(t, s.Path, snap, env)
				m := gpuRow.FindStringSubmatch(out)
				if err != nil || code != 0 || m == nil || squash(m[1]) != wantMem || !strings.Contains(squash(out), "| 0 13 0 0 | 0MiB / 4864MiB |") {
					t.Errorf("monitor %v: default view (exit %d, %v): want the GPU's memory %q and the MIG device's:\n%s", monitor, code, err, wantMem, out)
				}
				out, code, err = runSMI(t, s.Path, snap, env, "--query-gpu=memory.total,memory.used", "--format=csv,noheader")
				if err != nil || code != 0 || out != wantQuery {
					t.Errorf("monitor %v: --query-gpu (exit %d, %v):\n%s\nwant\n%s", monitor, code, err, out, wantQuery)
				}
			}
		})
	}
}

// Making and destroying instances needs the MIG config capability's node
// (nvidia-cap1), as the driver asks: a container given one MIG device
// cannot repartition its GPU (review: -dci succeeded), one given the
// capability (NVIDIA_MIG_CONFIG_DEVICES=all) can. Every release prints
// Insufficient Permissions for the first.
func TestMakingInstancesNeedsTheMIGConfigCapability(t *testing.T) {
	snap, _ := testenv.Snapshot(t, "a100", 2)
	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			testenv.LiveState(t, snap, 2, time.Time{})
			run := smiRunner(t, s.Path, snap)
			run("-i", "0", "-mig", "1")
			run("mig", "-cgi", "19", "-C")
			without := []string{"NVMOCK_DEV_ROOT=" + capRoot(t, 13, true)}
			out, _, err := runSMI(t, s.Path, snap, without, "mig", "-i", "0", "-dci", "-gi", "13")
			if err != nil || !strings.Contains(out, "Insufficient Permissions") {
				t.Errorf("-dci without nvidia-cap1 (%v):\n%s\nwant Insufficient Permissions", err, out)
			}
			if got := run("mig", "-lci"); !strings.Contains(got, " 13 ") {
				t.Errorf("the refused -dci destroyed the compute instance:\n%s", got)
			}
			with := []string{"NVMOCK_DEV_ROOT=" + devRoot(t, "nvidiactl", "nvidia0", "nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap2")}
			out, code, err := runSMI(t, s.Path, snap, with, "mig", "-i", "0", "-dci", "-gi", "13")
			if err != nil || code != 0 || !strings.Contains(out, "Successfully destroyed compute instance") {
				t.Errorf("-dci with nvidia-cap1 (exit %d, %v):\n%s", code, err, out)
			}
		})
	}
}
