//go:build integration

package smi

import (
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// nvidia-smi drain, on every release: the query in the words a real node
// prints (NVIDIA's dcgm-exporter issue #213 quotes "The current drain
// state of GPU 00000000:3F:00.0 is: not draining."), a drain refused
// while persistence mode is on, and a drained GPU missing from the
// nvidia-smi runs after it (its device plugin issue #451: "nvidia-smi on
// the host shows 1 less GPU") until it is undrained. A read-only view of
// the state (a GPU container that is not privileged) may not drain.
func TestEveryNvidiaSMIDrainsAGPU(t *testing.T) {
	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			snap, p := testenv.Snapshot(t, "a100", 4)
			testenv.LiveState(t, snap, 4, time.Time{})
			long := snapshot.BusID(p, 2) // 00000000:47:00.0
			arg := "0000" + long[8:]     // nvidia-smi drain -p takes a 4-digit domain
			run := func(want string, code int, args ...string) {
				t.Helper()
				out, c, err := runSMI(t, s.Path, snap, nil, args...)
				if err != nil || c != code || !strings.Contains(out, want) {
					t.Errorf("nvidia-smi %s: exit %d (%v), want %d and %q:\n%s", strings.Join(args, " "), c, err, code, want, out)
				}
			}
			gpus := func(want int) {
				t.Helper()
				out, _, _ := runSMI(t, s.Path, snap, nil, "-L")
				if n := strings.Count(out, "(UUID: GPU-"); n != want {
					t.Errorf("-L lists %d GPUs, want %d:\n%s", n, want, out)
				}
			}
			run("The current drain state of GPU "+long+" is: not draining.", 0, "drain", "-p", arg, "-q")
			run("Failed to modify the GPU drain state.", 255, "drain", "-p", arg, "-m", "1")
			out, code, err := runReadOnly(t, s.Path, snap, "drain", "-p", arg, "-m", "1")
			if err != nil || code != 255 || !strings.Contains(out, "Failed to modify the GPU drain state.") {
				t.Errorf("a read-only state: exit %d, %v\n%s", code, err, out)
			}
			run("Disabled persistence mode", 0, "-pm", "0", "-i", "2")
			run("Successfully set GPU "+long+" drain state to: draining.", 0, "drain", "-p", arg, "-m", "1")
			run("The current drain state of GPU "+long+" is: draining.", 0, "drain", "-p", arg, "-q")
			gpus(3)
			out, _, _ = runSMI(t, s.Path, snap, nil, "--query-gpu=pci.bus_id", "--format=csv,noheader")
			if strings.Contains(out, long) {
				t.Errorf("the drained GPU is still listed:\n%s", out)
			}
			run("Successfully set GPU "+long+" drain state to: not draining.", 0, "drain", "-p", arg, "-m", "0")
			gpus(4)
			run("Failed to query the GPU drain state.", 255, "drain", "-p", "0000:99:00.0", "-q")
		})
	}
}
