//go:build integration

package gonvml

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvidia-smi drain -q: every GPU of the node reads not draining (QA:
// "Failed to query the GPU drain state"); an address with no GPU is an
// invalid argument.
func TestEveryGPUReadsNotDraining(t *testing.T) {
	lib, _, _ := startLiveOn(t, "h100", 2)
	pci := got(handle(t, lib, 1).GetPciInfo())(t, "PCI info")
	state, ret := lib.DeviceQueryDrainState(&pci)
	check(t, "drain state of GPU 1", state, ret, nvml.FEATURE_DISABLED)
	pci.Bus = 0x99
	_, ret = lib.DeviceQueryDrainState(&pci)
	checkRet(t, "drain state of no GPU", ret, nvml.ERROR_INVALID_ARGUMENT)
}
