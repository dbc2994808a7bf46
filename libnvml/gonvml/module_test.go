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
