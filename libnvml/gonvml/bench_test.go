//go:build integration

package gonvml

import (
	"os"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/live"
)

// These time one call through go-nvml into the mock, as a Go consumer such as
// the device plugin makes it. Each includes cgo's cost of crossing into C and
// back (tens of ns) and go-nvml's wrapper, so it overstates what the C getter
// itself costs.

func startBench(b *testing.B) (nvml.Interface, nvml.Device) {
	b.Helper()
	lib, _ := startSnapshot(b, 0)
	d, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		b.Fatalf("DeviceGetHandleByIndex(0): %v", ret)
	}
	b.ReportAllocs()
	b.ResetTimer()
	return lib, d
}

func BenchmarkGetMemoryInfo(b *testing.B) {
	_, d := startBench(b)
	for i := 0; i < b.N; i++ {
		if _, ret := d.GetMemoryInfo(); ret != nvml.SUCCESS {
			b.Fatalf("GetMemoryInfo: %v", ret)
		}
	}
}

func BenchmarkGetTemperature(b *testing.B) {
	_, d := startBench(b)
	for i := 0; i < b.N; i++ {
		if _, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret != nvml.SUCCESS {
			b.Fatalf("GetTemperature: %v", ret)
		}
	}
}

func BenchmarkGetHandleByIndex(b *testing.B) {
	lib, _ := startBench(b)
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		b.Fatalf("DeviceGetCount: %v", ret)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ret := lib.DeviceGetHandleByIndex(i % n); ret != nvml.SUCCESS {
			b.Fatalf("DeviceGetHandleByIndex(%d): %v", i%n, ret)
		}
	}
}

// The same getters with live state on: GPU 0 under a jittered load with
// two registered processes, GPU 1 with a fault (its calls take the fault
// path).
func startLiveBench(b *testing.B, gpu int) nvml.Device {
	b.Helper()
	lib, f, boards := startLive(b, 8)
	update(b, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 70, Jitter: 5}, now)
		for _, pid := range []uint32{uint32(os.Getpid()), 1} {
			if err := s.AddProcess(live.Process{PID: pid, GPU: 0, Type: 1, UsedBytes: 1 << 30, PIDNS: live.PIDNamespace()}, now); err != nil {
				return err
			}
		}
		return s.AddFault(1, live.Fault{Kind: live.FaultThermal}, now)
	})
	d := handle(b, lib, gpu)
	b.ReportAllocs()
	b.ResetTimer()
	return d
}

func BenchmarkLiveGetMemoryInfo(b *testing.B) {
	d := startLiveBench(b, 0)
	for i := 0; i < b.N; i++ {
		if _, ret := d.GetMemoryInfo(); ret != nvml.SUCCESS {
			b.Fatalf("GetMemoryInfo: %v", ret)
		}
	}
}

func BenchmarkLiveGetTemperature(b *testing.B) {
	d := startLiveBench(b, 0)
	for i := 0; i < b.N; i++ {
		if _, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret != nvml.SUCCESS {
			b.Fatalf("GetTemperature: %v", ret)
		}
	}
}

func BenchmarkLiveGetTemperatureWithAFault(b *testing.B) {
	d := startLiveBench(b, 1)
	for i := 0; i < b.N; i++ {
		if _, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret != nvml.SUCCESS {
			b.Fatalf("GetTemperature: %v", ret)
		}
	}
}

func BenchmarkLiveGetUtilizationRates(b *testing.B) {
	d := startLiveBench(b, 0)
	for i := 0; i < b.N; i++ {
		if _, ret := d.GetUtilizationRates(); ret != nvml.SUCCESS {
			b.Fatalf("GetUtilizationRates: %v", ret)
		}
	}
}

// MIG: a MIG device's handle (a read of the node's MIG state), and making
// and destroying a GPU instance (a write under the state file's lock).
func startMIGBench(b *testing.B) (nvml.Device, *live.File) {
	lib, f := startMIG(b, 1)
	d, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		b.Fatalf("DeviceGetHandleByIndex(0): %v", ret)
	}
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		b.Fatalf("SetMigMode: %v", ret)
	}
	return d, f
}

// benchMIGDevice makes a GPU instance of a profile with its whole compute
// instance, and returns the GPU instance's id.
func benchMIGDevice(b *testing.B, d nvml.Device, gip, cip int) uint32 {
	info, _ := d.GetGpuInstanceProfileInfo(gip)
	gi, ret := d.CreateGpuInstance(&info)
	if ret != nvml.SUCCESS {
		b.Fatalf("CreateGpuInstance: %v", ret)
	}
	ci, _ := gi.GetComputeInstanceProfileInfo(cip, 0)
	if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
		b.Fatalf("CreateComputeInstance: %v", ret)
	}
	gid, _ := gi.GetInfo()
	return gid.Id
}

func BenchmarkMIGDeviceHandleByIndex(b *testing.B) {
	d, _ := startMIGBench(b)
	benchMIGDevice(b, d, nvml.GPU_INSTANCE_PROFILE_7_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ret := d.GetMigDeviceHandleByIndex(0); ret != nvml.SUCCESS {
			b.Fatalf("GetMigDeviceHandleByIndex: %v", ret)
		}
	}
}

func BenchmarkMIGCreateAndDestroyGPUInstance(b *testing.B) {
	d, _ := startMIGBench(b)
	info, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		gi, ret := d.CreateGpuInstance(&info)
		if ret != nvml.SUCCESS {
			b.Fatalf("CreateGpuInstance: %v", ret)
		}
		if ret := gi.Destroy(); ret != nvml.SUCCESS {
			b.Fatalf("Destroy: %v", ret)
		}
	}
}

// A MIG device's memory: its profile's idle use alone, or with processes
// registered on the node (a copy of the process table a call), as
// nvidia-smi asks it for every MIG device in its default view; and the
// GPU's, the sum over its GPU instances.
func benchMIGMemory(b *testing.B, procs int, onGPU bool) {
	d, f := startMIGBench(b)
	gid := benchMIGDevice(b, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE)
	err := f.Update(func(s *live.State, now int64) error {
		for p := 0; p < procs; p++ {
			proc := live.Process{PID: uint32(100000 + p), GPU: 0, MIG: &live.MIGRef{GI: int(gid)}, Type: 1, UsedBytes: 1 << 30}
			if err := s.AddProcess(proc, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	m, ret := d.GetMigDeviceHandleByIndex(0)
	if ret != nvml.SUCCESS {
		b.Fatalf("GetMigDeviceHandleByIndex: %v", ret)
	}
	if onGPU {
		m = d
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ret := m.GetMemoryInfo(); ret != nvml.SUCCESS {
			b.Fatalf("GetMemoryInfo: %v", ret)
		}
	}
}

func BenchmarkMIGDeviceMemoryIdle(b *testing.B)            { benchMIGMemory(b, 0, false) }
func BenchmarkMIGDeviceMemoryWith8Processes(b *testing.B)  { benchMIGMemory(b, 8, false) }
func BenchmarkMIGModeGPUMemoryWith8Processes(b *testing.B) { benchMIGMemory(b, 8, true) }

// GPM: the metrics between two samples a second apart (ten of the load
// model's slots each), as nvidia-smi dmon --gpm-metrics 1,2,10,20 asks
// for them every second.
func BenchmarkGPMMetricsGet(b *testing.B) {
	lib, f, boards := startLiveOn(b, "h100", 1)
	update(b, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 70, Memory: 30, Jitter: 5}, now)
		return nil
	})
	d := handle(b, lib, 0)
	s1, _ := lib.GpmSampleAlloc()
	s2, _ := lib.GpmSampleAlloc()
	defer s1.Free()
	defer s2.Free()
	d.GpmSampleGet(s1)
	update(b, f, func(s *live.State, _ int64) error { s.Header.FrozenNS += uint64(time.Second); return nil })
	d.GpmSampleGet(s2)
	m := &nvml.GpmMetricsGetType{NumMetrics: 4, Sample1: s1, Sample2: s2}
	for i, id := range []nvml.GpmMetricId{nvml.GPM_METRIC_GRAPHICS_UTIL, nvml.GPM_METRIC_SM_UTIL, nvml.GPM_METRIC_DRAM_BW_UTIL, nvml.GPM_METRIC_PCIE_TX_PER_SEC} {
		m.Metrics[i].MetricId = uint32(id)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if ret := lib.GpmMetricsGet(m); ret != nvml.SUCCESS || m.Metrics[0].NvmlReturn != 0 {
			b.Fatalf("GpmMetricsGet: %v, metric 1: %v", ret, m.Metrics[0].NvmlReturn)
		}
	}
}
