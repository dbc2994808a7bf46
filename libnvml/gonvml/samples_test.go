//go:build integration

package gonvml

import (
	"encoding/binary"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Monitors (DCGM-like exporters, nvtop) read sampled values: a steady mock
// GPU gives the profile's reading every 100 ms over the last second.
func TestSamplesRepeatTheProfilesReadings(t *testing.T) {
	lib, p := startSnapshot(t, 0)
	d, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	for _, c := range []struct {
		typ  nvml.SamplingType
		want uint32
	}{
		{nvml.TOTAL_POWER_SAMPLES, uint32(*p.Board.Power.Draw*1000 + 0.5)},
		{nvml.GPU_UTILIZATION_SAMPLES, *p.Board.Utilization.GPU},
		{nvml.PROCESSOR_CLK_SAMPLES, *p.Board.Clocks.Current.Graphics},
		{nvml.MEMORY_CLK_SAMPLES, *p.Board.Clocks.Current.Memory},
	} {
		vt, samples, ret := d.GetSamples(c.typ, 0)
		if ret != nvml.SUCCESS || vt != nvml.VALUE_TYPE_UNSIGNED_INT || len(samples) == 0 {
			t.Errorf("GetSamples(%d): %v, type %d, %d samples", c.typ, ret, vt, len(samples))
			continue
		}
		for k, s := range samples {
			if got := binary.LittleEndian.Uint32(s.SampleValue[:4]); got != c.want {
				t.Errorf("GetSamples(%d)[%d] = %d, want %d", c.typ, k, got, c.want)
			}
			if k > 0 && s.TimeStamp <= samples[k-1].TimeStamp {
				t.Errorf("GetSamples(%d): timestamps not increasing", c.typ)
			}
		}
		// Nothing newer than the last sample seen.
		if _, _, ret := d.GetSamples(c.typ, samples[len(samples)-1].TimeStamp); ret != nvml.ERROR_NOT_FOUND {
			t.Errorf("GetSamples(%d) after the last sample: %v, want ERROR_NOT_FOUND", c.typ, ret)
		}
	}
	// An idle GPU has no process samples: the driver answers NOT_FOUND
	// (rust-nvml/nvml-wrapper issue 56: an idle RTX 3080 Ti on 550.54.14).
	if _, ret := d.GetProcessUtilization(0); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("GetProcessUtilization on an idle GPU: %v, want ERROR_NOT_FOUND", ret)
	}
}
