//go:build integration

package gonvml

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/live"
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

// A caller that gives only the bus id is answered the same; a lost GPU is
// lost, not draining or not.
func TestTheDrainStateByBusIdAndOfALostGPU(t *testing.T) {
	lib, f, _ := startLiveOn(t, "h100", 2)
	var pci nvml.PciInfo
	id := got(handle(t, lib, 1).GetPciInfo())(t, "PCI info").BusId
	copy(pci.BusId[:], id[:])
	state, ret := lib.DeviceQueryDrainState(&pci)
	check(t, "drain state by bus id", state, ret, nvml.FEATURE_DISABLED)
	update(t, f, func(s *live.State, now int64) error {
		return s.AddFault(1, live.FaultOf(live.FaultLost, 0, 0, 0, 0), now)
	})
	_, ret = lib.DeviceQueryDrainState(&pci)
	checkRet(t, "drain state of a lost GPU", ret, nvml.ERROR_GPU_IS_LOST)
}
