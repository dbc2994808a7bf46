//go:build integration

package gonvml

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/live"
)

// nvidia-smi drain -q: every GPU of the node reads not draining until
// drained; an address with no GPU is an invalid argument.
func TestEveryGPUReadsNotDraining(t *testing.T) {
	lib, _, _ := startLiveOn(t, "h100", 2)
	pci := got(handle(t, lib, 1).GetPciInfo())(t, "PCI info")
	state, ret := lib.DeviceQueryDrainState(&pci)
	check(t, "drain state of GPU 1", state, ret, nvml.FEATURE_DISABLED)
	pci.Bus = 0x99
	_, ret = lib.DeviceQueryDrainState(&pci)
	checkRet(t, "drain state of no GPU", ret, nvml.ERROR_INVALID_ARGUMENT)
	checkRet(t, "draining no GPU", lib.DeviceModifyDrainState(&pci, nvml.FEATURE_ENABLED), nvml.ERROR_INVALID_ARGUMENT)
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

// A drained GPU takes no new clients: a process that starts after the
// drain (here, NVML initialized again) does not see it, while one running
// since before keeps its handle, as NVIDIA's device plugin kept listing
// a drained GPU (its issue #451). Persistence mode must be off first
// (nvml.h: IN_USE); undraining brings the GPU back to new processes.
func TestADrainedGPUIsLeftOutOfNewProcesses(t *testing.T) {
	lib, f, _ := startLive(t, 4)
	d2 := handle(t, lib, 2)
	pci := got(d2.GetPciInfo())(t, "PCI info")
	uuid := got(d2.GetUUID())(t, "UUID")
	checkRet(t, "draining a GPU in persistence mode", lib.DeviceModifyDrainState(&pci, nvml.FEATURE_ENABLED), nvml.ERROR_IN_USE)
	checkRet(t, "a bad drain state", lib.DeviceModifyDrainState(&pci, 2), nvml.ERROR_INVALID_ARGUMENT)
	checkRet(t, "persistence off", d2.SetPersistenceMode(nvml.FEATURE_DISABLED), nvml.SUCCESS)
	checkRet(t, "draining GPU 2", lib.DeviceModifyDrainState(&pci, nvml.FEATURE_ENABLED), nvml.SUCCESS)
	state, ret := lib.DeviceQueryDrainState(&pci)
	check(t, "drain state of GPU 2", state, ret, nvml.FEATURE_ENABLED)
	n, ret := lib.DeviceGetCount()
	check(t, "GPUs of the process that drained it", n, ret, 4)
	name, ret := d2.GetName()
	check(t, "the drained GPU's name, through the handle from before", name, ret, "NVIDIA A100-SXM4-40GB")
	if s := f.Read(); s.GPUs[2].CfgSet&live.CfgDrain == 0 || s.GPUs[2].Drain != 1 {
		t.Errorf("the state holds no drain of GPU 2: %+v", s.GPUs[2].CfgSet)
	}

	restart(t, lib)
	n, ret = lib.DeviceGetCount()
	check(t, "GPUs of a process started after the drain", n, ret, 3)
	for i := range 3 {
		if u := got(handle(t, lib, i).GetUUID())(t, "UUID"); u == uuid {
			t.Errorf("GPU %d of the new process is the drained one, %s", i, u)
		}
	}
	_, ret = lib.DeviceGetHandleByUUID(uuid)
	checkRet(t, "the drained GPU by UUID", ret, nvml.ERROR_NOT_FOUND)
	state, ret = lib.DeviceQueryDrainState(&pci)
	check(t, "drain state, asked by a new process", state, ret, nvml.FEATURE_ENABLED)

	checkRet(t, "undraining GPU 2", lib.DeviceModifyDrainState(&pci, nvml.FEATURE_DISABLED), nvml.SUCCESS)
	restart(t, lib)
	n, ret = lib.DeviceGetCount()
	check(t, "GPUs after the GPU was undrained", n, ret, 4)
	if s := f.Read(); s.GPUs[2].CfgSet&live.CfgDrain != 0 {
		t.Errorf("undrained, the state still shows the drain")
	}
}

// Undraining asks nothing of persistence mode: a process from before the
// drain may turn it on again through its handle, and no process after can
// reach the GPU to turn it off (review: the GPU stayed drained for good).
// A process that may not see a GPU (NVMOCK_VISIBLE_DEVICES, as its device
// nodes in a container) cannot drain it.
func TestADrainedGPUCanBeUndrainedWhateverItsPersistence(t *testing.T) {
	lib, _, _ := startLive(t, 4)
	d2 := handle(t, lib, 2)
	pci := got(d2.GetPciInfo())(t, "PCI info")
	checkRet(t, "persistence off", d2.SetPersistenceMode(nvml.FEATURE_DISABLED), nvml.SUCCESS)
	checkRet(t, "draining GPU 2", lib.DeviceModifyDrainState(&pci, nvml.FEATURE_ENABLED), nvml.SUCCESS)
	checkRet(t, "persistence on again, through the handle from before", d2.SetPersistenceMode(nvml.FEATURE_ENABLED), nvml.SUCCESS)

	t.Setenv("NVMOCK_VISIBLE_DEVICES", "0,1")
	restart(t, lib)
	_, ret := lib.DeviceQueryDrainState(&pci)
	checkRet(t, "the drain state of a GPU the process may not see", ret, nvml.ERROR_INVALID_ARGUMENT)
	checkRet(t, "undraining a GPU the process may not see", lib.DeviceModifyDrainState(&pci, nvml.FEATURE_DISABLED), nvml.ERROR_INVALID_ARGUMENT)

	t.Setenv("NVMOCK_VISIBLE_DEVICES", "")
	restart(t, lib)
	checkRet(t, "undraining GPU 2 in persistence mode", lib.DeviceModifyDrainState(&pci, nvml.FEATURE_DISABLED), nvml.SUCCESS)
	restart(t, lib)
	n, ret := lib.DeviceGetCount()
	check(t, "GPUs after the GPU was undrained", n, ret, 4)
}

// restart shuts NVML down and initializes it again: it enumerates the
// GPUs afresh, as a new process does.
func restart(t *testing.T, lib nvml.Interface) {
	t.Helper()
	if ret := lib.Shutdown(); ret != nvml.SUCCESS {
		t.Fatalf("nvmlShutdown: %v", ret)
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("nvmlInit: %v", ret)
	}
}
