//go:build integration

package gonvml

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
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
