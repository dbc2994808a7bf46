//go:build integration

package gonvml

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

var moduleIDTag = regexp.MustCompile(`<module_id>(\d+)</module_id>`)

// Each GPU's module id is its baseboard slot, as the captures give it GPU
// by GPU (found N/A by a review with pynvml). The a100 capture has one GPU
// on a bus of another system: that profile models none, and answers as a
// board without it.
func TestModuleIDsAreTheCaptures(t *testing.T) {
	for _, board := range profile.Builtins() {
		t.Run(board, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(testenv.Root(), "libnvml", "smi", "testdata", "hardware", "qx-"+board+".xml"))
			if err != nil {
				t.Fatal(err)
			}
			captured := moduleIDTag.FindAllStringSubmatch(string(data), -1)
			lib, p := startProfile(t, "base: "+board+"\nname: "+board+"\n")
			for i := 0; i < p.GPUs; i++ {
				id, ret := deviceAt(t, lib, i).GetModuleId()
				if board == "a100" {
					if ret != nvml.ERROR_NOT_SUPPORTED {
						t.Errorf("GPU %d: module id %d (%v), want NOT_SUPPORTED", i, id, ret)
					}
					continue
				}
				if len(captured) != p.GPUs {
					t.Fatalf("the capture has %d module ids for %d GPUs", len(captured), p.GPUs)
				}
				want, _ := strconv.Atoi(captured[i][1])
				if ret != nvml.SUCCESS || id != want {
					t.Errorf("GPU %d: module id %d (%v), want the capture's %d", i, id, ret, want)
				}
			}
		})
	}
}

// A board repeated past its GPU count is its tree again, 0x10000 PCI
// domains up: GPUs on one NUMA node are NODE to each other, as the tree and
// sysfs say (review: they were SYS, the rule for a GB200 tray's domains).
// The GB200 tray's own GPUs stay SYS.
func TestRepeatedBoardsAreOnTheNUMANodesOfTheFirst(t *testing.T) {
	for _, c := range []struct {
		yaml string
		a, b int
		want nvml.GpuTopologyLevel
	}{
		{"base: t4\nname: x\ngpus: 2\n", 0, 1, nvml.TOPOLOGY_NODE},
		{"base: h100\nname: x\ngpus: 16\n", 0, 8, nvml.TOPOLOGY_NODE},
		{"base: h100\nname: x\ngpus: 16\n", 0, 12, nvml.TOPOLOGY_SYSTEM},
		{"base: gb200\nname: x\n", 0, 1, nvml.TOPOLOGY_SYSTEM},
	} {
		t.Run("", func(t *testing.T) { // each its own library init
			lib, _ := startProfile(t, c.yaml)
			got, ret := deviceAt(t, lib, c.a).GetTopologyCommonAncestor(deviceAt(t, lib, c.b))
			if ret != nvml.SUCCESS || got != c.want {
				t.Errorf("%q: GPUs %d and %d: %v (%v), want %v", c.yaml, c.a, c.b, got, ret, c.want)
			}
		})
	}
}
