//go:build integration

package gonvml

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// The live state (package live) through go-nvml: a state file beside the
// snapshot that the test writes as nvmock ctl does, and the library reads
// at every call.

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// startLive inits go-nvml on an a100 node of n GPUs with a live state whose
// clock stands at t0, and returns the state and the model's boards.
func startLive(t testing.TB, n int) (nvml.Interface, *live.File, []live.Board) {
	t.Helper()
	return startLiveOn(t, "a100", n)
}

// startLiveOn is startLive on a node of another profile.
func startLiveOn(t testing.TB, profile string, n int) (nvml.Interface, *live.File, []live.Board) {
	t.Helper()
	path, _ := testenv.Snapshot(t, profile, n)
	f := testenv.LiveState(t, path, n, t0)
	cleanEnv(t, path)
	lib := newLib(t)
	start(t, lib)
	boards, err := live.Boards(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	return lib, f, boards
}

func update(t testing.TB, f *live.File, fn func(s *live.State, now int64) error) {
	t.Helper()
	if err := f.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// advance moves the frozen clock.
func advance(t *testing.T, f *live.File, d time.Duration) {
	t.Helper()
	update(t, f, func(s *live.State, _ int64) error { s.Header.FrozenNS += uint64(d); return nil })
}

func handle(t testing.TB, lib nvml.Interface, i int) nvml.Device {
	t.Helper()
	d, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetHandleByIndex(%d): %v", i, ret)
	}
	return d
}

// readings is what the getters say now.
type readings struct {
	util, mem, temp, power, sm uint32
	energy                     uint64
	reasons                    uint64
}

func read(t *testing.T, d nvml.Device) readings {
	t.Helper()
	var r readings
	u, ret := d.GetUtilizationRates()
	must(t, "GetUtilizationRates", ret)
	r.util, r.mem = u.Gpu, u.Memory
	r.temp, ret = d.GetTemperature(nvml.TEMPERATURE_GPU)
	must(t, "GetTemperature", ret)
	r.power, ret = d.GetPowerUsage()
	must(t, "GetPowerUsage", ret)
	r.sm, ret = d.GetClockInfo(nvml.CLOCK_SM)
	must(t, "GetClockInfo", ret)
	r.energy, ret = d.GetTotalEnergyConsumption()
	must(t, "GetTotalEnergyConsumption", ret)
	r.reasons, ret = d.GetCurrentClocksEventReasons()
	must(t, "GetCurrentClocksEventReasons", ret)
	return r
}

func must(t *testing.T, what string, ret nvml.Return) {
	t.Helper()
	if ret != nvml.SUCCESS {
		t.Fatalf("%s: %v", what, ret)
	}
}

func TestALiveStateLeftAloneChangesNoReading(t *testing.T) {
	lib, _, boards := startLive(t, 2)
	d := handle(t, lib, 0)
	r := read(t, d)
	if r.util != 0 || r.temp != boards[0].IdleTempC || r.power != boards[0].IdleMW || r.reasons != nvml.ClocksEventReasonGpuIdle {
		t.Errorf("untouched state: %+v, want the snapshot's idle readings", r)
	}
}

// The readings under a load are the model's, at the frozen clock, as the
// writer's side of the model (live.Board) computes them.
func TestReadingsFollowTheLoad(t *testing.T) {
	lib, f, boards := startLive(t, 2)
	d0, d1 := handle(t, lib, 0), handle(t, lib, 1)
	idle1 := read(t, d1)
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 80, Memory: 30, Encoder: 10}, now)
		return nil
	})
	start := f.Read().GPUs[0]
	var last uint64
	for _, after := range []time.Duration{0, 10 * time.Second, 30 * time.Second, 5 * time.Minute} {
		if after > 0 {
			advance(t, f, after-time.Duration(f.Read().Header.FrozenNS-uint64(t0.UnixNano())))
		}
		r := read(t, d0)
		tempMC, energy := boards[0].At(80, start.Temp0MC, start.Energy0MJ, int64(after))
		want := readings{util: 80, mem: 30, temp: uint32((float64(tempMC) + 500) / 1000),
			power: uint32(boards[0].PowerMW(80) + 0.5), energy: energy, reasons: 0}
		r.sm = 0
		if r != want {
			t.Errorf("%v into a load of 80 %%: %+v, want %+v", after, r, want)
		}
		if r.energy < last {
			t.Errorf("%v: energy went back from %d to %d", after, last, r.energy)
		}
		// Both energy fields say what the call says (review: field 83
		// counted the idle draw under a load).
		fv := []nvml.FieldValue{{FieldId: nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION}, {FieldId: nvml.FI_DEV_ENERGY}}
		must(t, "GetFieldValues", d0.GetFieldValues(fv))
		for _, v := range fv {
			if got := binary.LittleEndian.Uint64(v.Value[:]); nvml.Return(v.NvmlReturn) != nvml.SUCCESS || got != r.energy {
				t.Errorf("%v: field %d = %d (%v), want the call's %d", after, v.FieldId, got, nvml.Return(v.NvmlReturn), r.energy)
			}
		}
		last = r.energy
		enc, _, ret := d0.GetEncoderUtilization()
		check(t, "encoder utilization", enc, ret, 10)
	}
	if r := read(t, d0); r.temp <= uint32(boards[0].IdleTempC) || r.temp > 90-3 {
		t.Errorf("after 5 minutes at 80 %%: %d C; want warmer than idle and below the slowdown", r.temp)
	}
	max, ret := d0.GetMaxClockInfo(nvml.CLOCK_SM)
	must(t, "GetMaxClockInfo", ret)
	if sm, ret := d0.GetClockInfo(nvml.CLOCK_SM); ret != nvml.SUCCESS || sm != max {
		t.Errorf("SM clock under load: %d (%v), want the maximum %d", sm, ret, max)
	}
	// The other GPU is untouched (its energy counter runs on its own).
	got := read(t, d1)
	got.energy, idle1.energy = 0, 0
	if got != idle1 {
		t.Errorf("GPU 1 changed with GPU 0's load: %+v, was %+v", got, idle1)
	}
	// Near TDP the power cap shows.
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 100}, now)
		return nil
	})
	if r := read(t, d0); r.reasons != nvml.ClocksEventReasonSwPowerCap || r.sm >= max {
		t.Errorf("at 100 %%: reasons %#x, SM %d MHz; want the SW power cap below %d MHz", r.reasons, r.sm, max)
	}
}

// utilTrace samples GPU 0's utilization every 100 ms of frozen time.
func utilTrace(t *testing.T, lib nvml.Interface, f *live.File) []uint32 {
	t.Helper()
	var out []uint32
	d := handle(t, lib, 0)
	for i := 0; i < 30; i++ {
		u, ret := d.GetUtilizationRates()
		must(t, "GetUtilizationRates", ret)
		out = append(out, u.Gpu)
		advance(t, f, 100*time.Millisecond)
	}
	return out
}

func TestTheSameSeedGivesTheSameTrace(t *testing.T) {
	traces := map[uint64][]uint32{}
	for _, seed := range []uint64{7, 7, 8} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			lib, f, boards := startLive(t, 1)
			update(t, f, func(s *live.State, now int64) error {
				s.Header.Seed = seed
				s.SetLoad(boards[0], 0, live.Loads{GPU: 50, Jitter: 20}, now)
				return nil
			})
			tr := utilTrace(t, lib, f)
			if prev, ok := traces[seed]; ok && fmt.Sprint(prev) != fmt.Sprint(tr) {
				t.Errorf("seed %d twice: %v and %v", seed, prev, tr)
			}
			traces[seed] = tr
		})
	}
	if fmt.Sprint(traces[7]) == fmt.Sprint(traces[8]) {
		t.Errorf("seeds 7 and 8 gave the same trace %v", traces[7])
	}
	lo, hi := uint32(100), uint32(0)
	for _, u := range traces[7] {
		lo, hi = min(lo, u), max(hi, u)
	}
	if lo < 30 || hi > 70 || lo == hi {
		t.Errorf("50 %% with 20 %% jitter ranged %d..%d; want variation within 30..70", lo, hi)
	}
}

// nvmlDeviceGetSamples returns the history: each sample is the reading at
// its own time, across a change of load.
func TestSamplesAreTheHistory(t *testing.T) {
	lib, f, boards := startLive(t, 1)
	d := handle(t, lib, 0)
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 20}, now)
		return nil
	})
	advance(t, f, 2*time.Second)
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 90}, now)
		return nil
	})
	advance(t, f, 450*time.Millisecond)
	typ, samples, ret := d.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0)
	must(t, "GetSamples", ret)
	if typ != nvml.VALUE_TYPE_UNSIGNED_INT || len(samples) != 10 {
		t.Fatalf("GetSamples: type %v, %d samples; want 10 unsigned", typ, len(samples))
	}
	change := uint64(f.Read().GPUs[0].SinceNS / 1000)
	for _, s := range samples {
		v := binaryUint(s.SampleValue)
		want := uint32(90)
		if s.TimeStamp < change {
			want = 20
		}
		if v != want {
			t.Errorf("sample at %d (load changed at %d): %d, want %d", s.TimeStamp, change, v, want)
		}
	}
}

// A clock frozen a quarter second after 1970 has the samples of that
// quarter second, none before it (review: the rest wrapped to 2^64 and
// nvidia-smi printed a duration of 18 trillion seconds).
func TestNoSampleComesBefore1970(t *testing.T) {
	path, _ := testenv.Snapshot(t, "a100", 1)
	testenv.LiveState(t, path, 1, time.Unix(0, 250e6))
	cleanEnv(t, path)
	lib := newLib(t)
	start(t, lib)
	_, samples, ret := handle(t, lib, 0).GetSamples(nvml.TOTAL_POWER_SAMPLES, 0)
	must(t, "GetSamples", ret)
	var times []uint64
	for _, s := range samples {
		times = append(times, s.TimeStamp)
	}
	if len(times) != 2 || times[0] != 100000 || times[1] != 200000 {
		t.Errorf("samples at %v µs, want 100000 and 200000", times)
	}
}

func binaryUint(v [8]byte) uint32 {
	return uint32(v[0]) | uint32(v[1])<<8 | uint32(v[2])<<16 | uint32(v[3])<<24
}

func TestFaultsChangeWhatTheGPUAnswers(t *testing.T) {
	lib, f, _ := startLive(t, 8)
	fault := func(gpu int, fl live.Fault) {
		t.Helper()
		update(t, f, func(s *live.State, now int64) error { return s.AddFault(gpu, fl, now) })
	}
	d := make([]nvml.Device, 8)
	for i := range d {
		d[i] = handle(t, lib, i)
	}

	fault(1, live.Fault{Kind: live.FaultLost})
	_, ret := d[1].GetUUID()
	checkRet(t, "GetUUID on a lost GPU", ret, nvml.ERROR_GPU_IS_LOST)
	_, ret = d[1].GetTemperature(nvml.TEMPERATURE_GPU)
	checkRet(t, "GetTemperature on a lost GPU", ret, nvml.ERROR_GPU_IS_LOST)
	_, ret = lib.DeviceGetHandleByIndex(1)
	checkRet(t, "DeviceGetHandleByIndex of a lost GPU", ret, nvml.ERROR_GPU_IS_LOST)
	n, ret := lib.DeviceGetCount()
	check(t, "DeviceGetCount with a lost GPU", n, ret, 8)
	_, ret = d[0].GetUUID()
	checkRet(t, "GetUUID on another GPU", ret, nvml.SUCCESS)

	fault(2, live.Fault{Kind: live.FaultECC, XID: 48})
	c, ret := d[2].GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	check(t, "volatile uncorrected ECC after XID 48", c, ret, 1)
	c, ret = d[2].GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC)
	check(t, "aggregate uncorrected ECC after XID 48", c, ret, 1)
	corr, unc, pending, failed, ret := d[2].GetRemappedRows()
	must(t, "GetRemappedRows", ret)
	if corr != 0 || unc != 1 || !pending || failed {
		t.Errorf("remapped rows after XID 48: corr %d unc %d pending %v failed %v; want 0 1 true false", corr, unc, pending, failed)
	}

	fault(3, live.Fault{Kind: live.FaultThermal})
	r := read(t, d[3])
	slow, ret := d[3].GetTemperatureThreshold(nvml.TEMPERATURE_THRESHOLD_SLOWDOWN)
	must(t, "GetTemperatureThreshold", ret)
	want := uint64(nvml.ClocksThrottleReasonHwSlowdown | nvml.ClocksEventReasonSwThermalSlowdown | nvml.ClocksThrottleReasonHwThermalSlowdown)
	if r.temp <= slow || r.reasons != want {
		t.Errorf("thermal slowdown: %d C (slowdown %d), reasons %#x; want above the threshold and %#x", r.temp, slow, r.reasons, want)
	}
	// A slowdown caps the clock; on an idle GPU it stays idle (review: it
	// rose from idle to half the maximum).
	for _, gpu := range []int{3, 4} {
		if gpu == 4 {
			fault(4, live.Fault{Kind: live.FaultPowerBrake})
		}
		sm, ret := d[gpu].GetClockInfo(nvml.CLOCK_SM)
		must(t, "GetClockInfo", ret)
		idle, ret := d[0].GetClockInfo(nvml.CLOCK_SM)
		must(t, "GetClockInfo", ret)
		if sm > idle {
			t.Errorf("GPU %d, idle, in a slowdown: SM clock %d MHz, above the idle %d", gpu, sm, idle)
		}
	}

	// GPU 4's brake, on since the loop above.
	if r := read(t, d[4]); r.reasons != uint64(nvml.ClocksThrottleReasonHwSlowdown|nvml.ClocksThrottleReasonHwPowerBrakeSlowdown) {
		t.Errorf("power brake: reasons %#x", r.reasons)
	}

	fault(5, live.Fault{Kind: live.FaultNvlinkDown, Count: 3})
	for link := 0; link < 12; link++ {
		st, ret := d[5].GetNvLinkState(link)
		want := nvml.FEATURE_ENABLED
		if link == 3 {
			want = nvml.FEATURE_DISABLED
		}
		check(t, fmt.Sprintf("NVLink %d state", link), st, ret, want)
	}

	// Cleared, each GPU answers as before.
	update(t, f, func(s *live.State, _ int64) error {
		for g := 0; g < 8; g++ {
			s.ClearFaults(g, 0)
		}
		return nil
	})
	_, ret = d[1].GetUUID()
	checkRet(t, "GetUUID after clear", ret, nvml.SUCCESS)
	c, ret = d[2].GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	check(t, "ECC after clear", c, ret, 0)
}

func TestCallAndProbabilityTriggersFireInEachProcess(t *testing.T) {
	lib, f, _ := startLive(t, 4)
	d := handle(t, lib, 0)
	update(t, f, func(s *live.State, now int64) error {
		if err := s.AddFault(0, live.Fault{Kind: live.FaultLost, Trigger: live.TriggerCalls, Param: 5}, now); err != nil {
			return err
		}
		if err := s.AddFault(1, live.Fault{Kind: live.FaultLost, Trigger: live.TriggerProbability, Param: 1 << 32}, now); err != nil {
			return err
		}
		if err := s.AddFault(2, live.Fault{Kind: live.FaultLost, Trigger: live.TriggerProbability, Param: 0}, now); err != nil {
			return err
		}
		return s.AddFault(3, live.Fault{Kind: live.FaultLost, PID: uint32(os.Getpid() + 1)}, now)
	})
	for i := 1; i <= 5; i++ {
		_, ret := d.GetTemperature(nvml.TEMPERATURE_GPU)
		checkRet(t, fmt.Sprintf("call %d of 5 before the fault", i), ret, nvml.SUCCESS)
	}
	_, ret := d.GetTemperature(nvml.TEMPERATURE_GPU)
	checkRet(t, "the sixth call", ret, nvml.ERROR_GPU_IS_LOST)
	_, ret = d.GetTemperature(nvml.TEMPERATURE_GPU)
	checkRet(t, "the seventh call (a fault persists)", ret, nvml.ERROR_GPU_IS_LOST)
	_, ret = handle(t, lib, 1).GetTemperature(nvml.TEMPERATURE_GPU)
	checkRet(t, "probability 1", ret, nvml.ERROR_GPU_IS_LOST)
	d2 := handle(t, lib, 2)
	for i := 0; i < 100; i++ {
		if _, ret := d2.GetTemperature(nvml.TEMPERATURE_GPU); ret != nvml.SUCCESS {
			t.Fatalf("probability 0, call %d: %v", i, ret)
		}
	}
	_, ret = handle(t, lib, 3).GetTemperature(nvml.TEMPERATURE_GPU)
	checkRet(t, "a fault scoped to another process", ret, nvml.SUCCESS)
}

func TestRegisteredProcessesAppearAndUseMemory(t *testing.T) {
	lib, f, boards := startLive(t, 2)
	d := handle(t, lib, 0)
	before, ret := d.GetMemoryInfo_v2()
	must(t, "GetMemoryInfo_v2", ret)
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	self, other := uint32(os.Getpid()), uint32(sleeper.Process.Pid)
	ns := live.PIDNamespace()
	update(t, f, func(s *live.State, now int64) error {
		for _, p := range []live.Process{
			{PID: self, GPU: 0, Type: 1, UsedBytes: 20 << 30, Name: "train.py", PIDNS: ns},
			{PID: other, GPU: 0, Type: 2, UsedBytes: 1 << 30, Name: "render", PIDNS: ns},
		} {
			if err := s.AddProcess(p, now); err != nil {
				return err
			}
		}
		return nil
	})
	procs, ret := d.GetComputeRunningProcesses()
	must(t, "GetComputeRunningProcesses", ret)
	if len(procs) != 1 || procs[0].Pid != self || procs[0].UsedGpuMemory != 20<<30 || procs[0].GpuInstanceId != math.MaxUint32 {
		t.Errorf("compute processes %+v, want this test's pid with 20 GiB, no MIG instance", procs)
	}
	procs, ret = d.GetGraphicsRunningProcesses()
	must(t, "GetGraphicsRunningProcesses", ret)
	if len(procs) != 1 || procs[0].Pid != other {
		t.Errorf("graphics processes %+v, want the sleeper", procs)
	}
	// The same through nvmlDeviceGetRunningProcessDetailList (go-nvml asks
	// compute processes).
	list, ret := d.GetRunningProcessDetailList()
	must(t, "GetRunningProcessDetailList", ret)
	if got := unsafe.Slice(list.ProcArray, list.NumProcArrayEntries); len(got) != 1 || got[0].Pid != self || got[0].UsedGpuMemory != 20<<30 || got[0].GpuInstanceId != math.MaxUint32 {
		t.Errorf("the compute process detail list %+v, want this test's pid with 20 GiB, no MIG instance", got)
	}
	if procs, ret := handle(t, lib, 1).GetComputeRunningProcesses(); ret != nvml.SUCCESS || len(procs) != 0 {
		t.Errorf("GPU 1: %+v (%v), want none", procs, ret)
	}
	after, ret := d.GetMemoryInfo_v2()
	must(t, "GetMemoryInfo_v2", ret)
	if after.Used-before.Used != 21<<30 || after.Free != before.Free-21<<30 {
		t.Errorf("memory used %d -> %d, free %d -> %d; want 21 GiB more used", before.Used, after.Used, before.Free, after.Free)
	}
	name, ret := lib.SystemGetProcessName(int(self))
	check(t, "SystemGetProcessName", name, ret, "train.py")

	// Per-process utilization: the GPU's, shared by its two processes.
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 80, Memory: 40}, now)
		return nil
	})
	samples, ret := d.GetProcessUtilization(0)
	must(t, "GetProcessUtilization", ret)
	if len(samples) != 2 || samples[0].SmUtil != 40 || samples[0].MemUtil != 20 || samples[1].SmUtil != 40 {
		t.Errorf("process utilization %+v, want two samples of 40 %% SM, 20 %% memory", samples)
	}
	if _, ret := d.GetProcessUtilization(samples[0].TimeStamp); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("GetProcessUtilization since the last sample: %v, want NOT_FOUND", ret)
	}

	// A process that exits leaves the list, without anyone removing it:
	// at once, a zombie not yet reaped (review: it stayed, memory and all).
	sleeper.Process.Kill()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", other)); strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed sleeper is no zombie in 10 s")
		}
	}
	procs, ret = d.GetGraphicsRunningProcesses()
	if ret != nvml.SUCCESS || len(procs) != 0 {
		t.Errorf("after the sleeper exited, a zombie: %+v (%v), want none", procs, ret)
	}
	sleeper.Wait()
	procs, ret = d.GetGraphicsRunningProcesses()
	if ret != nvml.SUCCESS || len(procs) != 0 {
		t.Errorf("after the sleeper exited: %+v (%v), want none", procs, ret)
	}
}

// helperRead prints GPU 0's readings (the "read" helper).
func helperRead() int {
	lib := nvml.New(nvml.WithLibraryPath(filepath.Join(testenv.BuildDir(), "driver", "usr", "lib64", "libnvidia-ml.so.1")))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		fmt.Println("init", ret)
		return 1
	}
	defer lib.Shutdown()
	d, _ := lib.DeviceGetHandleByIndex(0)
	u, _ := d.GetUtilizationRates()
	temp, _ := d.GetTemperature(nvml.TEMPERATURE_GPU)
	p, _ := d.GetPowerUsage()
	_, lost := lib.DeviceGetHandleByIndex(1)
	fmt.Printf("util=%d temp=%d power=%d gpu1=%d\n", u.Gpu, temp, p, int32(lost))
	return 0
}

// helperEvents registers every GPU for every event it supports, prints
// "ready", then prints each event it receives within 20 s (the "events"
// helper).
func helperEvents() int {
	lib := nvml.New(nvml.WithLibraryPath(filepath.Join(testenv.BuildDir(), "driver", "usr", "lib64", "libnvidia-ml.so.1")))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		fmt.Println("init", ret)
		return 1
	}
	defer lib.Shutdown()
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		fmt.Println("EventSetCreate", ret)
		return 1
	}
	n, _ := lib.DeviceGetCount()
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue // a lost GPU has no handle to register
		}
		types, _ := d.GetSupportedEventTypes()
		if ret := d.RegisterEvents(types, set); ret != nvml.SUCCESS {
			fmt.Println("RegisterEvents", ret)
			return 1
		}
	}
	fmt.Println("ready")
	end := time.Now().Add(20 * time.Second)
	for time.Now().Before(end) {
		e, ret := set.Wait(1000)
		if ret == nvml.ERROR_TIMEOUT {
			continue
		}
		if ret != nvml.SUCCESS {
			fmt.Println("Wait", ret)
			return 1
		}
		idx, _ := e.Device.GetIndex()
		fmt.Printf("event gpu=%d type=%#x data=%d gi=%#x at=%d\n", idx, e.EventType, e.EventData, e.GpuInstanceId, time.Now().UnixNano())
	}
	return 0
}

// Several processes read the same state; an XID injected from here reaches
// a process waiting for events, with its lasting effects and the ECC event.
func TestAnotherProcessSeesTheStateAndReceivesTheEvents(t *testing.T) {
	path, _ := testenv.Snapshot(t, "a100", 4)
	f := testenv.LiveState(t, path, 4, t0)
	boards, err := live.Boards(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 70}, now)
		return s.AddFault(1, live.Fault{Kind: live.FaultLost}, now)
	})
	advance(t, f, time.Minute)
	g := f.Read().GPUs[0]
	tempMC, _ := boards[0].At(70, g.Temp0MC, g.Energy0MJ, int64(time.Minute))
	want := fmt.Sprintf("util=70 temp=%d power=%d gpu1=%d\n", (tempMC+500)/1000, uint32(boards[0].PowerMW(70)+0.5), int32(nvml.ERROR_GPU_IS_LOST))
	for i := 0; i < 3; i++ {
		cmd := exec.Command(os.Args[0])
		cmd.Env = testenv.Env(t, path, helperEnv+"=read")
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != want {
			t.Errorf("process %d: %v: %q, want %q", i, err, out, want)
		}
	}

	// Events: the clock runs again, as it does on a node.
	update(t, f, func(s *live.State, _ int64) error { s.Header.Frozen = 0; return nil })
	cmd := exec.Command(os.Args[0])
	cmd.Env = testenv.Env(t, path, helperEnv+"=events")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("events helper: %q, want ready", lines.Text())
	}
	sent := time.Now()
	update(t, f, func(s *live.State, now int64) error {
		if err := s.XID(2, 48, now); err != nil {
			return err
		}
		return s.XID(3, 13, now)
	})
	var got []string
	for len(got) < 3 && lines.Scan() {
		fields := strings.Fields(lines.Text())
		at, _ := strconv.ParseInt(strings.TrimPrefix(fields[len(fields)-1], "at="), 10, 64)
		t.Logf("%s: %v after the injection", lines.Text(), time.Unix(0, at).Sub(sent))
		got = append(got, strings.Join(fields[:len(fields)-1], " "))
	}
	wantEvents := []string{
		"event gpu=3 type=0x8 data=13 gi=0xffffffff",
		"event gpu=2 type=0x8 data=48 gi=0xffffffff",
		"event gpu=2 type=0x2 data=0 gi=0xffffffff",
	}
	// Each GPU's events come in order; the GPUs' are not ordered between them.
	slices.Sort(got)
	slices.Sort(wantEvents)
	if strings.Join(got, "\n") != strings.Join(wantEvents, "\n") {
		t.Errorf("events in the other process:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantEvents, "\n"))
	}
}

// A writer that dies inside the seqlock leaves it odd. Readers must not
// hang: after 100 ms once they read the state as it lies, as the Go
// readers do (static readings hid the node's MIG devices, settings and
// faults: review), and the next write goes on from it.
func TestADeadWriterLeavesTheStateAsItLiesNotAHang(t *testing.T) {
	lib, f, boards := startLive(t, 2)
	d := handle(t, lib, 0)
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 90}, now)
		return nil
	})
	if r := read(t, d); r.util != 90 {
		t.Fatalf("under load: %+v", r)
	}
	// What a writer killed in the middle of publishing leaves.
	fd, err := os.OpenFile(f.Path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	var seqOff int64
	for _, o := range live.HeaderLayout {
		if o.C == "seq" {
			seqOff = int64(o.Offset)
		}
	}
	var b [4]byte
	if _, err := fd.ReadAt(b[:], seqOff); err != nil {
		t.Fatal(err)
	}
	b[0] |= 1
	if _, err := fd.WriteAt(b[:], seqOff); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := read(t, d)
	first := time.Since(start)
	start = time.Now()
	for i := 0; i < 20; i++ {
		read(t, d)
	}
	per := time.Since(start) / 20
	if r.util != 90 {
		t.Errorf("with the lock held by a dead writer: %+v, want the load as it lies", r)
	}
	t.Logf("first read %v, then %v per read", first, per)
	// Not a speed bound: a library that waited out the dead writer's
	// 100 ms on every call takes at least that per read; one that learnt
	// it once takes microseconds. Half the wait tells them apart on any
	// machine.
	if per > 50*time.Millisecond {
		t.Errorf("reads took %v, then %v each: a dead writer's 100 ms is waited out on every call", first, per)
	}
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 40}, now)
		return nil
	})
	if r := read(t, d); r.util != 40 {
		t.Errorf("after the next write: %+v, want its load", r)
	}
}

// An XID published when the state's clock stood later (frozen ahead, then
// thawed) is delivered, and holds back none published after it (review:
// the ring stopped at it until the wall clock came that far).
func TestAnEventStampedAheadHoldsBackNoOther(t *testing.T) {
	lib, f, _ := startLive(t, 2)
	set, ret := lib.EventSetCreate()
	must(t, "EventSetCreate", ret)
	defer lib.EventSetFree(set)
	for i := 0; i < 2; i++ {
		must(t, "RegisterEvents", handle(t, lib, i).RegisterEvents(nvml.EventTypeXidCriticalError, set))
	}
	update(t, f, func(s *live.State, now int64) error {
		s.Publish(0, live.EventXID, 13, now+int64(time.Hour))
		s.Publish(1, live.EventXID, 31, now)
		return nil
	})
	for _, want := range []uint64{13, 31} {
		e, ret := lib.EventSetWait(set, 1000)
		if ret != nvml.SUCCESS || e.EventData != want {
			t.Fatalf("event %+v (%v), want XID %d at once", e, ret, want)
		}
	}
}

// An idle GPU's energy follows the state's clock once nvmock ctl clock has
// moved it (live.FollowClock), as a loaded one's does: ten minutes on the
// frozen clock are ten minutes at its idle power (review: it kept the wall
// clock, so two GPUs of one node disagreed).
func TestAnIdleGPUsEnergyFollowsTheFrozenClock(t *testing.T) {
	lib, f, boards := startLive(t, 2)
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[1], 1, live.Loads{GPU: 50}, now)
		s.FollowClock(boards, now)
		return nil
	})
	energy := func(i int) uint64 {
		t.Helper()
		e, ret := handle(t, lib, i).GetTotalEnergyConsumption()
		must(t, "GetTotalEnergyConsumption", ret)
		return e
	}
	idle0, busy0 := energy(0), energy(1)
	advance(t, f, 10*time.Minute)
	if got, want := energy(0)-idle0, uint64(boards[0].IdleMW)*600; got != want {
		t.Errorf("idle GPU drew %d mJ in 10 minutes of the state's clock, want %d (%d mW)", got, want, boards[0].IdleMW)
	}
	if energy(1)-busy0 <= uint64(boards[1].IdleMW)*600 {
		t.Errorf("the loaded GPU drew no more than the idle one")
	}
	advance(t, f, time.Minute)
	if p, ret := handle(t, lib, 0).GetPowerUsage(); ret != nvml.SUCCESS || p != boards[0].IdleMW {
		t.Errorf("idle GPU's power %d (%v), want its static %d mW", p, ret, boards[0].IdleMW)
	}
}

// A power brake holds power at half the limit, and energy and temperature
// follow the power drawn, not the load's: its stretch counts at the
// braked power, before and after it is cleared, and neither jumps when
// it is (review: power said 200 W while energy grew at 400 W).
func TestAPowerBrakesEnergyAndHeatAreTheBrakedPowers(t *testing.T) {
	lib, f, boards := startLive(t, 1)
	b := boards[0]
	d := handle(t, lib, 0)
	energy := func() uint64 {
		t.Helper()
		e, ret := d.GetTotalEnergyConsumption()
		must(t, "GetTotalEnergyConsumption", ret)
		return e
	}
	temp := func() uint32 {
		t.Helper()
		c, ret := d.GetTemperature(nvml.TEMPERATURE_GPU)
		must(t, "GetTemperature", ret)
		return c
	}
	update(t, f, func(s *live.State, now int64) error { s.SetLoad(b, 0, live.Loads{GPU: 100}, now); return nil })
	advance(t, f, 10*time.Minute)
	hot := temp()
	update(t, f, func(s *live.State, now int64) error {
		return s.AddFault(0, live.Fault{Kind: live.FaultPowerBrake}, now)
	})
	e0 := energy()
	advance(t, f, 100*time.Second)
	half := b.TDPMW / 2
	if p, ret := d.GetPowerUsage(); ret != nvml.SUCCESS || p != half {
		t.Errorf("power under the brake %d mW (%v), want %d", p, ret, half)
	}
	if got, want := energy()-e0, uint64(half)*100; got+1 < want || got > want+1 {
		t.Errorf("100 s under the brake drew %d mJ, want %d (%d mW)", got, want, half)
	}
	if c := temp(); c >= hot {
		t.Errorf("under the brake the GPU stays at %d C; it was %d C at full power", c, hot)
	}
	r, ret := d.GetCurrentClocksEventReasons()
	must(t, "GetCurrentClocksEventReasons", ret)
	if r&nvml.ClocksEventReasonSwPowerCap != 0 || r&nvml.ClocksThrottleReasonHwPowerBrakeSlowdown == 0 {
		t.Errorf("reasons under the brake %#x: want the HW power brake and no SW power cap", r)
	}
	// Cleared as nvmock ctl clear does: the segment cut first.
	eBefore, cBefore := energy(), temp()
	update(t, f, func(s *live.State, now int64) error {
		s.Cut(b, 0, now)
		s.ClearFaults(0, live.FaultPowerBrake)
		return nil
	})
	if e, c := energy(), temp(); e+1 < eBefore || e > eBefore+1 || c != cBefore {
		t.Errorf("clearing the brake moved energy %d -> %d mJ, temperature %d -> %d C", eBefore, e, cBefore, c)
	}
	e1 := energy()
	advance(t, f, 100*time.Second)
	if got, want := energy()-e1, uint64(b.TDPMW)*100; got+1 < want || got > want+1 {
		t.Errorf("100 s after the brake drew %d mJ, want %d", got, want)
	}
}
