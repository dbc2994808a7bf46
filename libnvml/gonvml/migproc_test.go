//go:build integration

package gonvml

import (
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// Processes on MIG devices, as a privileged caller on a real node sees
// them (nvml.h: in MIG mode a GPU handle gives the aggregate, a MIG device
// handle its own): the GPU lists every one with its instance ids, a MIG
// device its own. A MIG device's used memory is the driver's idle use
// plus its GPU instance's processes'; the GPU's is the sum of its MIG
// devices', as a real R580 H100 shows (research/mig.md 9). A compute
// instance a process runs on cannot be destroyed.
func TestProcessesOnMIGDevices(t *testing.T) {
	_, f, dev := startMIGH100(t)
	var cis []nvml.ComputeInstance
	for _, e := range []int{nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE} {
		p := got(dev.GetGpuInstanceProfileInfo(e))(t, "profile")
		gi := got(dev.CreateGpuInstance(&p))(t, "create GPU instance")
		cp := got(gi.GetComputeInstanceProfileInfo(int(p.SliceCount)-1, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED))(t, "compute profile")
		cis = append(cis, got(gi.CreateComputeInstance(&cp))(t, "create compute instance"))
	}
	three, one := got(dev.GetMigDeviceHandleByIndex(0))(t, "MIG 0"), got(dev.GetMigDeviceHandleByIndex(1))(t, "MIG 1")
	threeGI := int(got(three.GetGpuInstanceId())(t, "GI id"))
	threeCI := int(got(three.GetComputeInstanceId())(t, "CI id"))

	// Idle: the profile's 44 and 15 MiB (R580's), the GPU their sum.
	wantUsed := func(what string, d nvml.Device, mib uint64) {
		t.Helper()
		m := got(d.GetMemoryInfo_v2())(t, what)
		if m.Used != mib<<20 || m.Free != m.Total-m.Reserved-m.Used {
			t.Errorf("%s memory %+v, want %d MiB used", what, m, mib)
		}
	}
	wantUsed("idle 3g.40gb", three, 44)
	wantUsed("idle 1g.10gb", one, 15)
	wantUsed("idle GPU", dev, 59)

	// Three processes on the 3g.40gb, as on the real one.
	pids := []uint32{23804, 23806, 23808}
	err := f.Update(func(s *live.State, now int64) error {
		for _, pid := range pids {
			p := live.Process{PID: pid, GPU: 0, MIG: &live.MIGRef{GI: threeGI, CI: threeCI}, Type: 1, UsedBytes: 4188 << 20, Name: "/tmp/loadgen"}
			if err := s.AddProcess(p, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		d    nvml.Device
		n    int
	}{{"the GPU", dev, 3}, {"the 3g.40gb", three, 3}, {"the 1g.10gb", one, 0}} {
		// go-nvml asks with room for one first: a short buffer's
		// INSUFFICIENT_SIZE and count, then the list.
		ps := got(c.d.GetComputeRunningProcesses())(t, c.what+" processes")
		if len(ps) != c.n {
			t.Errorf("%s lists %d processes, want %d: %+v", c.what, len(ps), c.n, ps)
		}
		for i, p := range ps {
			if p.Pid != pids[i] || p.UsedGpuMemory != 4188<<20 || int(p.GpuInstanceId) != threeGI || int(p.ComputeInstanceId) != threeCI {
				t.Errorf("%s process %d: %+v, want pid %d on GI %d CI %d", c.what, i, p, pids[i], threeGI, threeCI)
			}
		}
	}
	if ps := got(dev.GetGraphicsRunningProcesses())(t, "graphics"); len(ps) != 0 {
		t.Errorf("graphics processes %+v", ps)
	}
	wantUsed("busy 3g.40gb", three, 44+3*4188)
	wantUsed("idle 1g.10gb beside it", one, 15)
	wantUsed("GPU", dev, 59+3*4188)
	_, ret := dev.GetProcessUtilization(0)
	wantRet(t, "per-process utilization in MIG mode", ret, nvml.ERROR_NOT_SUPPORTED)

	// A process on the 1g.10gb, bigger than it: the MIG device and the GPU
	// count it up to the instance's 9984 MiB. A MIG device runs no
	// graphics, so the writer refuses one (review).
	oneGI := int(got(one.GetGpuInstanceId())(t, "GI id"))
	err = f.Update(func(s *live.State, now int64) error {
		if err := s.AddProcess(live.Process{PID: 23901, GPU: 0, MIG: &live.MIGRef{GI: oneGI}, Type: 2, UsedBytes: 1 << 20, Name: "gl"}, now); err == nil {
			return fmt.Errorf("a graphics process on a MIG device was taken")
		}
		return s.AddProcess(live.Process{PID: 23900, GPU: 0, MIG: &live.MIGRef{GI: oneGI}, Type: 1, UsedBytes: 20 << 30, Name: "X"}, now)
	})
	if err != nil {
		t.Fatal(err)
	}
	if ps := got(one.GetComputeRunningProcesses())(t, "compute on the 1g.10gb"); len(ps) != 1 || ps[0].Pid != 23900 || int(ps[0].GpuInstanceId) != oneGI {
		t.Errorf("compute processes of the 1g.10gb: %+v", ps)
	}
	if ps := got(one.GetGraphicsRunningProcesses())(t, "graphics on the 1g.10gb"); len(ps) != 0 {
		t.Errorf("graphics processes of the 1g.10gb: %+v", ps)
	}
	wantUsed("a full 1g.10gb", one, 9984)
	wantUsed("GPU with a full 1g.10gb", dev, 44+3*4188+9984)

	wantRet(t, "destroying a compute instance a process runs on", cis[0].Destroy(), nvml.ERROR_IN_USE)
	wantRet(t, "destroying the 1g.10gb's, which the big process runs on", cis[1].Destroy(), nvml.ERROR_IN_USE)
	if err := f.Update(func(s *live.State, _ int64) error {
		s.RemoveProcesses(func(live.Process) bool { return true })
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wantRet(t, "destroying it once they are gone", cis[0].Destroy(), nvml.SUCCESS)
	wantRet(t, "destroying the other", cis[1].Destroy(), nvml.SUCCESS)
}

// A channel XID is charged to the first process on its GPU, as xidlog logs
// it (live.ChargedTo): the event carries that process's GPU and compute
// instance when it runs on a MIG device (nvml.h's nvmlEventData_t), and
// 0xFFFFFFFF otherwise or for an XID of no channel (review: the log named
// the instances, the event did not).
func TestAChannelXIDOnAMIGDeviceNamesItsInstances(t *testing.T) {
	lib, f, dev := startMIGH100(t)
	var gis []int
	for _, e := range []int{nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE} {
		p := got(dev.GetGpuInstanceProfileInfo(e))(t, "profile")
		gi := got(dev.CreateGpuInstance(&p))(t, "create GPU instance")
		cp := got(gi.GetComputeInstanceProfileInfo(int(p.SliceCount)-1, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED))(t, "compute profile")
		got(gi.CreateComputeInstance(&cp))(t, "create compute instance")
		info := got(gi.GetInfo())(t, "GPU instance info")
		gis = append(gis, int(info.Id))
	}
	set := got(lib.EventSetCreate())(t, "EventSetCreate")
	defer lib.EventSetFree(set)
	checkRet(t, "RegisterEvents", dev.RegisterEvents(nvml.EventTypeXidCriticalError, set), nvml.SUCCESS)
	next := func() nvml.EventData {
		t.Helper()
		e, ret := lib.EventSetWait(set, 5000)
		checkRet(t, "EventSetWait", ret, nvml.SUCCESS)
		return e
	}
	const none = math.MaxUint32
	// No process: nothing to charge it to.
	update(t, f, func(s *live.State, now int64) error { s.Publish(0, live.EventXID, 13, now); return nil })
	if e := next(); e.EventData != 13 || e.GpuInstanceId != none || e.ComputeInstanceId != none {
		t.Errorf("XID 13 with no process: %+v, want no instance", e)
	}
	update(t, f, func(s *live.State, now int64) error {
		if err := s.AddProcess(live.Process{PID: uint32(os.Getpid()), GPU: 0, MIG: &live.MIGRef{GI: gis[1]}, Type: 1, UsedBytes: 1 << 30, Name: "trainer", PIDNS: live.PIDNamespace()}, now); err != nil {
			return err
		}
		s.Publish(0, live.EventXID, 13, now)
		s.Publish(0, live.EventXID, 79, now)
		return nil
	})
	if e := next(); e.EventData != 13 || int(e.GpuInstanceId) != gis[1] || e.ComputeInstanceId != 0 {
		t.Errorf("XID 13 of a process on GPU instance %d: %+v, want its instances", gis[1], e)
	}
	if e := next(); e.EventData != 79 || e.GpuInstanceId != none || e.ComputeInstanceId != none {
		t.Errorf("XID 79 (no channel's): %+v, want no instance", e)
	}
	// xidlog charges it the same.
	var charged *live.Process
	update(t, f, func(s *live.State, _ int64) error {
		charged = live.ChargedTo(s, live.Reported{GPU: 0, XID: 13})
		return nil
	})
	if charged == nil || charged.MIG == nil || charged.MIG.GI != gis[1] || charged.MIG.CI != 0 {
		t.Errorf("xidlog charges XID 13 to %+v, want the process on GPU instance %d", charged, gis[1])
	}
}

// nvml.h: on a MIG-enabled GPU with instances, remapped rows are not
// supported, the call and the field values alike (review: the counts
// showed). MIG mode alone, with no instance yet, still answers.
func TestRemappedRowsAreNotSupportedWithMIGInstances(t *testing.T) {
	_, f, dev := startH100(t)
	update(t, f, func(s *live.State, now int64) error {
		return s.AddFault(0, live.Fault{Kind: live.FaultECC, Count: 1}, now)
	})
	rows := func(what string, want nvml.Return, unc int) {
		t.Helper()
		_, u, _, _, ret := dev.GetRemappedRows()
		if ret != want || (ret == nvml.SUCCESS && u != unc) {
			t.Errorf("%s: GetRemappedRows %v, %d uncorrectable; want %v, %d", what, ret, u, want, unc)
		}
		v := []nvml.FieldValue{{FieldId: nvml.FI_DEV_REMAPPED_UNC}}
		checkRet(t, "GetFieldValues", dev.GetFieldValues(v), nvml.SUCCESS)
		if r := nvml.Return(v[0].NvmlReturn); r != want {
			t.Errorf("%s: FI_DEV_REMAPPED_UNC %v, want %v", what, r, want)
		}
	}
	rows("MIG off", nvml.SUCCESS, 1)
	enableMIG(t, dev)
	rows("MIG on, no instance", nvml.SUCCESS, 1)
	p := got(dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE))(t, "profile")
	gi := got(dev.CreateGpuInstance(&p))(t, "create GPU instance")
	rows("MIG on with a GPU instance", nvml.ERROR_NOT_SUPPORTED, 0)
	checkRet(t, "destroy", gi.Destroy(), nvml.SUCCESS)
	rows("its instance destroyed", nvml.SUCCESS, 1)
}

// Each fault's count may be full (2^32-1); their sum is NVML's 64-bit
// counter, never wrapped (review: it went back to 2^32-3).
func TestECCCountsOfFullFaultsAddUp(t *testing.T) {
	lib, f, _ := startLive(t, 1)
	update(t, f, func(s *live.State, now int64) error {
		for i := 0; i < 3; i++ {
			if err := s.AddFault(0, live.Fault{Kind: live.FaultSBE, Count: math.MaxUint32}, now); err != nil {
				return err
			}
		}
		return nil
	})
	dev := handle(t, lib, 0)
	for _, c := range []nvml.EccCounterType{nvml.VOLATILE_ECC, nvml.AGGREGATE_ECC} {
		// At least: the board's own count comes on top.
		n, ret := dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, c)
		if ret != nvml.SUCCESS || n < 3*math.MaxUint32 {
			t.Errorf("counter %d: %d (%v), want at least 3 x %d", c, n, ret, uint64(math.MaxUint32))
		}
	}
}

// startH100 starts the library on one h100 GPU with a live state, and
// returns it, the state and the GPU.
func startH100(t *testing.T) (nvml.Interface, *live.File, nvml.Device) {
	t.Helper()
	path, _ := testenv.Snapshot(t, "h100", 1)
	f := testenv.LiveState(t, path, 1, t0)
	cleanEnv(t, path)
	lib := newLib(t)
	start(t, lib)
	return lib, f, got(lib.DeviceGetHandleByIndex(0))(t, "handle")
}

// startMIGH100 is startH100 with the GPU in MIG mode.
func startMIGH100(t *testing.T) (nvml.Interface, *live.File, nvml.Device) {
	t.Helper()
	lib, f, dev := startH100(t)
	enableMIG(t, dev)
	return lib, f, dev
}

// A GPU in MIG mode answers through its own handle what nvml.h says it
// does (review: both answered): no core count, no volatile ECC counts;
// and a lost GPU's MIG devices and instances are lost with it (review:
// they answered).
func TestAMIGGPUAnswersAsNVMLSays(t *testing.T) {
	_, f, dev := startMIGH100(t)
	_, ret := dev.GetNumGpuCores()
	wantRet(t, "GetNumGpuCores in MIG mode", ret, nvml.ERROR_NOT_SUPPORTED)
	_, ret = dev.GetMemoryErrorCounter(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC, nvml.MEMORY_LOCATION_DRAM)
	wantRet(t, "volatile ECC count in MIG mode", ret, nvml.ERROR_NOT_SUPPORTED)
	_, ret = dev.GetMemoryErrorCounter(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC, nvml.MEMORY_LOCATION_DRAM)
	wantRet(t, "aggregate ECC count in MIG mode", ret, nvml.SUCCESS)

	info := got(dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE))(t, "GPU instance profile")
	gi := got(dev.CreateGpuInstance(&info))(t, "create GPU instance")
	ciInfo := got(gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED))(t, "compute instance profile")
	ci := got(gi.CreateComputeInstance(&ciInfo))(t, "create compute instance")
	mig := got(dev.GetMigDeviceHandleByIndex(0))(t, "MIG device")
	update(t, f, func(s *live.State, now int64) error { return s.AddFault(0, live.Fault{Kind: live.FaultLost}, now) })
	_, ret = mig.GetName()
	wantRet(t, "a lost GPU's MIG device's name", ret, nvml.ERROR_GPU_IS_LOST)
	_, ret = mig.GetPowerUsage() // a GPU's getter: NOT_SUPPORTED on a MIG device, before
	wantRet(t, "a lost GPU's MIG device's power", ret, nvml.ERROR_GPU_IS_LOST)
	_, ret = gi.GetInfo()
	wantRet(t, "a lost GPU's GPU instance", ret, nvml.ERROR_GPU_IS_LOST)
	_, ret = ci.GetInfo()
	wantRet(t, "a lost GPU's compute instance", ret, nvml.ERROR_GPU_IS_LOST)
}
