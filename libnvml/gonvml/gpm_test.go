//go:build integration

package gonvml

import (
	"math"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// GPM is for Hopper and later (nvml.h: "For Hopper or newer fully
// supported devices"): the query says so on every board, and an older
// GPU takes no sample.
func TestGPMIsForHopperAndLater(t *testing.T) {
	for _, c := range []struct {
		profile string
		want    uint32
	}{{"t4", 0}, {"a100", 0}, {"l40s", 0}, {"h100", 1}, {"b200", 1}, {"gb200", 1}} {
		t.Run(c.profile, func(t *testing.T) {
			snap, _ := testenv.Snapshot(t, c.profile, 2)
			cleanEnv(t, snap)
			lib := newLib(t)
			start(t, lib)
			d := handle(t, lib, 1)
			sup, ret := d.GpmQueryDeviceSupport()
			if ret != nvml.SUCCESS || sup.IsSupportedDevice != c.want {
				t.Fatalf("GpmQueryDeviceSupport: %v, supported %d, want SUCCESS, %d", ret, sup.IsSupportedDevice, c.want)
			}
			s, ret := lib.GpmSampleAlloc()
			if ret != nvml.SUCCESS {
				t.Fatalf("GpmSampleAlloc: %v", ret)
			}
			defer s.Free()
			_, stream := d.GpmQueryIfStreamingEnabled()
			want := nvml.SUCCESS
			if c.want == 0 {
				want = nvml.ERROR_NOT_SUPPORTED
			}
			if ret := d.GpmSampleGet(s); ret != want {
				t.Errorf("GpmSampleGet: %v, want %v", ret, want)
			}
			if stream != want {
				t.Errorf("GpmQueryIfStreamingEnabled: %v, want %v", stream, want)
			}
		})
	}
}

// startGPM inits go-nvml on an h100 node of two GPUs whose clock stands
// at t0.
func startGPM(t *testing.T) (nvml.Interface, *live.File, []live.Board) {
	t.Helper()
	return startLiveOn(t, "h100", 2)
}

func gpmSamples(t *testing.T, lib nvml.Interface, n int) []nvml.GpmSample {
	t.Helper()
	out := make([]nvml.GpmSample, n)
	for i := range out {
		s, ret := lib.GpmSampleAlloc()
		if ret != nvml.SUCCESS {
			t.Fatalf("GpmSampleAlloc: %v", ret)
		}
		out[i] = s
		t.Cleanup(func() { s.Free() })
	}
	return out
}

// gpmMetrics asks for ids between two samples.
func gpmMetrics(t *testing.T, lib nvml.Interface, a, b nvml.GpmSample, ids ...uint32) ([]nvml.GpmMetric, nvml.Return) {
	t.Helper()
	m := &nvml.GpmMetricsGetType{NumMetrics: uint32(len(ids)), Sample1: a, Sample2: b}
	for i, id := range ids {
		m.Metrics[i].MetricId = id
	}
	ret := lib.GpmMetricsGet(m)
	return m.Metrics[:len(ids)], ret
}

// The metrics between two samples follow the load over that time: graphics
// and SM activity the GPU load, DRAM bandwidth the memory load, each NVDEC
// the decoder load; PCIe traffic is the board's throughput reading and
// NVLink carries none. What the model has no reading for is NOT_SUPPORTED
// on its own, and the call still succeeds.
func TestGPMMetricsFollowTheLoad(t *testing.T) {
	lib, f, boards := startGPM(t)
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 80, Memory: 30, Decoder: 20}, now)
		return nil
	})
	busy, idle := handle(t, lib, 0), handle(t, lib, 1)
	ss := gpmSamples(t, lib, 4)
	for i, d := range []nvml.Device{busy, idle} {
		if ret := d.GpmSampleGet(ss[2*i]); ret != nvml.SUCCESS {
			t.Fatalf("GpmSampleGet: %v", ret)
		}
	}
	// Half a second on, the GPU's load falls to nothing.
	advance(t, f, 500*time.Millisecond)
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{}, now)
		return nil
	})
	advance(t, f, 500*time.Millisecond)
	for i, d := range []nvml.Device{busy, idle} {
		if ret := d.GpmSampleGet(ss[2*i+1]); ret != nvml.SUCCESS {
			t.Fatalf("GpmSampleGet: %v", ret)
		}
	}
	tx, _ := busy.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES)
	ids := []uint32{uint32(nvml.GPM_METRIC_GRAPHICS_UTIL), uint32(nvml.GPM_METRIC_SM_UTIL), uint32(nvml.GPM_METRIC_DRAM_BW_UTIL),
		uint32(nvml.GPM_METRIC_NVDEC_0_UTIL), uint32(nvml.GPM_METRIC_PCIE_TX_PER_SEC), uint32(nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC),
		uint32(nvml.GPM_METRIC_NVLINK_L17_TX_PER_SEC), uint32(nvml.GPM_METRIC_NVLINK_L18_RX_PER_SEC),
		uint32(nvml.GPM_METRIC_SM_OCCUPANCY), uint32(nvml.GPM_METRIC_ANY_TENSOR_UTIL)}
	want := []struct {
		ret nvml.Return
		v   float64
	}{{nvml.SUCCESS, 40}, {nvml.SUCCESS, 40}, {nvml.SUCCESS, 15}, {nvml.SUCCESS, 10}, {nvml.SUCCESS, float64(tx) / 1024},
		{nvml.SUCCESS, 0}, {nvml.SUCCESS, 0}, {nvml.ERROR_NOT_SUPPORTED, 0}, // an H100 has 18 links
		{nvml.ERROR_NOT_SUPPORTED, 0}, {nvml.ERROR_NOT_SUPPORTED, 0}}
	got, ret := gpmMetrics(t, lib, ss[0], ss[1], ids...)
	if ret != nvml.SUCCESS {
		t.Fatalf("GpmMetricsGet: %v", ret)
	}
	for i, m := range got {
		if nvml.Return(m.NvmlReturn) != want[i].ret || (m.NvmlReturn == 0 && m.Value != want[i].v) {
			t.Errorf("metric %d: %v, %v; want %v, %v", m.MetricId, nvml.Return(m.NvmlReturn), m.Value, want[i].ret, want[i].v)
		}
	}
	got, ret = gpmMetrics(t, lib, ss[2], ss[3], ids[:4]...)
	if ret != nvml.SUCCESS {
		t.Fatalf("GpmMetricsGet on the idle GPU: %v", ret)
	}
	for _, m := range got {
		if m.NvmlReturn != 0 || m.Value != 0 {
			t.Errorf("idle GPU, metric %d: %v, %v; want 0", m.MetricId, nvml.Return(m.NvmlReturn), m.Value)
		}
	}
}

// Samples are checked as the driver would: two read samples of one GPU, in
// order; a freed one is gone.
func TestGPMRefusesSamplesThatDoNotPair(t *testing.T) {
	lib, f, _ := startGPM(t)
	ss := gpmSamples(t, lib, 4)
	g0, g1 := handle(t, lib, 0), handle(t, lib, 1)
	id := uint32(nvml.GPM_METRIC_GRAPHICS_UTIL)
	if _, ret := gpmMetrics(t, lib, ss[0], ss[1], id); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("metrics of two unread samples: %v, want INVALID_ARGUMENT", ret)
	}
	must(t, "GpmSampleGet", g0.GpmSampleGet(ss[0]))
	must(t, "GpmSampleGet", g1.GpmSampleGet(ss[1]))
	if _, ret := gpmMetrics(t, lib, ss[0], ss[1], id); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("metrics of two GPUs' samples: %v, want INVALID_ARGUMENT", ret)
	}
	advance(t, f, time.Second)
	must(t, "GpmSampleGet", g0.GpmSampleGet(ss[2]))
	if _, ret := gpmMetrics(t, lib, ss[2], ss[0], id); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("metrics of samples in the wrong order: %v, want INVALID_ARGUMENT", ret)
	}
	if _, ret := gpmMetrics(t, lib, ss[0], ss[2], id); ret != nvml.SUCCESS {
		t.Errorf("metrics of samples in order: %v, want SUCCESS", ret)
	}
	m := &nvml.GpmMetricsGetType{NumMetrics: uint32(len(nvml.GpmMetricsGetType{}.Metrics)) + 1, Sample1: ss[0], Sample2: ss[2]}
	if ret := lib.GpmMetricsGet(m); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("%d metrics, more than the array holds: %v, want INVALID_ARGUMENT", m.NumMetrics, ret)
	}
	must(t, "GpmSampleFree", ss[3].Free())
	if ret := ss[3].Free(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("a second free: %v, want INVALID_ARGUMENT", ret)
	}
	if ret := g0.GpmSampleGet(ss[3]); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("a sample into a freed buffer: %v, want INVALID_ARGUMENT", ret)
	}
}

// The stream state is the node's: one process enables it, another sees
// it; only ENABLED and DISABLED are states.
func TestGPMStreamStateIsTheNodes(t *testing.T) {
	lib, f, _ := startGPM(t)
	d := handle(t, lib, 1)
	if st, ret := d.GpmQueryIfStreamingEnabled(); ret != nvml.SUCCESS || st != uint32(nvml.FEATURE_DISABLED) {
		t.Fatalf("stream state at first: %v, %d; want DISABLED", ret, st)
	}
	must(t, "GpmSetStreamingEnabled", d.GpmSetStreamingEnabled(uint32(nvml.FEATURE_ENABLED)))
	if ret := d.GpmSetStreamingEnabled(2); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("stream state 2: %v, want INVALID_ARGUMENT", ret)
	}
	g := f.Read().GPUs
	if g[1].CfgSet&live.CfgGpmStream == 0 || g[1].GpmStream != uint32(nvml.FEATURE_ENABLED) || g[0].CfgSet != 0 {
		t.Errorf("state file: GPU 1 cfg %#x stream %d, GPU 0 cfg %#x; want only GPU 1's stream enabled", g[1].CfgSet, g[1].GpmStream, g[0].CfgSet)
	}
	other := newLib(t)
	start(t, other)
	if st, ret := handle(t, other, 1).GpmQueryIfStreamingEnabled(); ret != nvml.SUCCESS || st != uint32(nvml.FEATURE_ENABLED) {
		t.Errorf("stream state read again: %v, %d; want ENABLED", ret, st)
	}
	// A damaged word reads as unset.
	update(t, f, func(s *live.State, _ int64) error { s.GPUs[1].GpmStream = 5; return nil })
	if st, ret := d.GpmQueryIfStreamingEnabled(); ret != nvml.SUCCESS || st != uint32(nvml.FEATURE_DISABLED) {
		t.Errorf("stream state 5 in the state: %v, %d; want DISABLED", ret, st)
	}
}

// A MIG GPU instance is sampled through its MIG device or by its id; a
// sample of an instance has no PCIe traffic of its own.
func TestGPMSamplesAMIGInstance(t *testing.T) {
	lib, f, boards := startGPM(t)
	d := handle(t, lib, 0)
	ss := gpmSamples(t, lib, 3)
	if ret := d.GpmMigSampleGet(0, ss[0]); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GpmMigSampleGet with MIG off: %v, want NOT_SUPPORTED", ret)
	}
	_, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	must(t, "SetMigMode", ret)
	info, ret := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	must(t, "GetGpuInstanceProfileInfo", ret)
	gi, ret := d.CreateGpuInstance(&info)
	must(t, "CreateGpuInstance", ret)
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	must(t, "GetComputeInstanceProfileInfo", ret)
	_, ret = gi.CreateComputeInstance(&ciInfo)
	must(t, "CreateComputeInstance", ret)
	giInfo, ret := gi.GetInfo()
	must(t, "GetInfo", ret)
	if ret := d.GpmMigSampleGet(int(giInfo.Id)+1, ss[0]); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("GpmMigSampleGet of no instance: %v, want NOT_FOUND", ret)
	}
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 60}, now)
		return nil
	})
	must(t, "GpmMigSampleGet", d.GpmMigSampleGet(int(giInfo.Id), ss[0]))
	mig, ret := d.GetMigDeviceHandleByIndex(0)
	must(t, "GetMigDeviceHandleByIndex", ret)
	advance(t, f, time.Second)
	must(t, "GpmSampleGet on the MIG device", mig.GpmSampleGet(ss[1]))
	must(t, "GpmSampleGet on the GPU", d.GpmSampleGet(ss[2]))
	got, ret := gpmMetrics(t, lib, ss[0], ss[1], uint32(nvml.GPM_METRIC_GRAPHICS_UTIL), uint32(nvml.GPM_METRIC_PCIE_TX_PER_SEC))
	if ret != nvml.SUCCESS || got[0].NvmlReturn != 0 || got[0].Value != 60 || nvml.Return(got[1].NvmlReturn) != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("an instance's metrics: %v, %+v; want graphics 60 and no PCIe", ret, got)
	}
	if _, ret := gpmMetrics(t, lib, ss[0], ss[2], uint32(nvml.GPM_METRIC_GRAPHICS_UTIL)); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("an instance's sample against the GPU's: %v, want INVALID_ARGUMENT", ret)
	}
}

// The mean between two samples reads at most about a thousand points
// whatever the gap, and ends: a clock frozen (nvmock ctl clock freeze
// 1969-12-31T23:59:59.9Z, or a damaged state file) just short of 2^64 ns
// after a sample at 2026 made the last step wrap past zero and the loop
// never end, in the monitoring agent's process.
func TestGPMMetricsOverAnyGapEnd(t *testing.T) {
	lib, f, boards := startGPM(t)
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 50}, now)
		return nil
	})
	d := handle(t, lib, 0)
	ss := gpmSamples(t, lib, 2)
	must(t, "GpmSampleGet", d.GpmSampleGet(ss[0]))
	update(t, f, func(s *live.State, _ int64) error {
		s.Header.FrozenNS = math.MaxUint64 - uint64(100*time.Millisecond)
		return nil
	})
	must(t, "GpmSampleGet", d.GpmSampleGet(ss[1]))
	done := make(chan nvml.Return, 1)
	go func() {
		_, ret := gpmMetrics(t, lib, ss[0], ss[1], uint32(nvml.GPM_METRIC_GRAPHICS_UTIL))
		done <- ret
	}()
	select {
	case ret := <-done:
		if ret != nvml.SUCCESS {
			t.Errorf("GpmMetricsGet over a gap of %d ns: %v, want SUCCESS", uint64(math.MaxUint64)-uint64(t0.UnixNano()), ret)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("GpmMetricsGet over a gap of nearly 2^64 ns has not returned in 10s")
	}
}

// The wall clock that times the model may step back between two samples
// (NTP), where a GPU's counters never do: the pair still gives metrics, the
// model's reading at the later sample's time.
func TestGPMSamplesSurviveAClockSteppedBack(t *testing.T) {
	lib, f, boards := startGPM(t)
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 30}, now)
		return nil
	})
	advance(t, f, 2*time.Minute)
	d := handle(t, lib, 0)
	ss := gpmSamples(t, lib, 2)
	must(t, "GpmSampleGet", d.GpmSampleGet(ss[0]))
	// Back a minute: still under the load, which the model reads there.
	update(t, f, func(s *live.State, _ int64) error { s.Header.FrozenNS -= uint64(time.Minute); return nil })
	must(t, "GpmSampleGet", d.GpmSampleGet(ss[1]))
	got, ret := gpmMetrics(t, lib, ss[0], ss[1], uint32(nvml.GPM_METRIC_GRAPHICS_UTIL))
	if ret != nvml.SUCCESS || got[0].NvmlReturn != 0 || got[0].Value != 30 {
		t.Errorf("metrics across a clock stepped back: %v, %+v; want 30", ret, got[0])
	}
}
