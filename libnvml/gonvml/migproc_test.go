//go:build integration

package gonvml

import (
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
	path, _ := testenv.Snapshot(t, "h100", 1)
	f := testenv.LiveState(t, path, 1, t0)
	cleanEnv(t, path)
	lib := newLib(t)
	start(t, lib)
	dev := got(lib.DeviceGetHandleByIndex(0))(t, "handle")
	enableMIG(t, dev)
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

	// A graphics process on the 1g.10gb, bigger than it: the MIG device and
	// the GPU count it up to the instance's 9984 MiB.
	oneGI := int(got(one.GetGpuInstanceId())(t, "GI id"))
	err = f.Update(func(s *live.State, now int64) error {
		return s.AddProcess(live.Process{PID: 23900, GPU: 0, MIG: &live.MIGRef{GI: oneGI}, Type: 2, UsedBytes: 20 << 30, Name: "X"}, now)
	})
	if err != nil {
		t.Fatal(err)
	}
	if ps := got(one.GetGraphicsRunningProcesses())(t, "graphics on the 1g.10gb"); len(ps) != 1 || ps[0].Pid != 23900 || int(ps[0].GpuInstanceId) != oneGI {
		t.Errorf("graphics processes of the 1g.10gb: %+v", ps)
	}
	if ps := got(one.GetComputeRunningProcesses())(t, "compute on the 1g.10gb"); len(ps) != 0 {
		t.Errorf("compute processes of the 1g.10gb: %+v", ps)
	}
	wantUsed("a full 1g.10gb", one, 9984)
	wantUsed("GPU with a full 1g.10gb", dev, 44+3*4188+9984)

	wantRet(t, "destroying a compute instance a process runs on", cis[0].Destroy(), nvml.ERROR_IN_USE)
	wantRet(t, "destroying one a graphics process runs on", cis[1].Destroy(), nvml.ERROR_IN_USE)
	if err := f.Update(func(s *live.State, _ int64) error {
		s.RemoveProcesses(func(live.Process) bool { return true })
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wantRet(t, "destroying it once they are gone", cis[0].Destroy(), nvml.SUCCESS)
	wantRet(t, "destroying the other", cis[1].Destroy(), nvml.SUCCESS)
}
