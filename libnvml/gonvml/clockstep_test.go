//go:build integration

package gonvml

import (
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// A GPU's graphics clock runs only at its supported clocks, under any load,
// power limit, slowdown or lock (QA: 95 % load read 1339 MHz on an A100,
// whose clocks step by 15 MHz).
func TestGraphicsClocksStayOnTheSupportedSteps(t *testing.T) {
	lib, f, boards := startLive(t, 1)
	d := handle(t, lib, 0)
	var steps []uint32 // as the profile lists them (go-nvml reads no list)
	for _, sc := range testenv.Profile(t, "a100", 1).Board.Clocks.Supported {
		steps = append(steps, graphicsClocks(sc)...)
	}
	if len(steps) == 0 {
		t.Fatal("the a100 profile lists no supported clocks")
	}
	load := func(pct uint32) func() {
		return func() {
			update(t, f, func(s *live.State, now int64) error { s.SetLoad(boards[0], 0, live.Loads{GPU: pct}, now); return nil })
		}
	}
	fault := func(k uint32) func() {
		return func() {
			update(t, f, func(s *live.State, now int64) error { return s.AddFault(0, live.Fault{Kind: k}, now) })
		}
	}
	for _, c := range []struct {
		what string
		do   func()
	}{
		{"95 % load", load(95)},
		{"97 % load", load(97)},
		{"a 150 W limit", func() { checkRet(t, "-pl 150", d.SetPowerManagementLimit(150000), nvml.SUCCESS) }},
		{"a 237 W limit", func() { checkRet(t, "-pl 237", d.SetPowerManagementLimit(237000), nvml.SUCCESS) }},
		{"a thermal slowdown", fault(live.FaultThermal)},
		{"a power brake", fault(live.FaultPowerBrake)},
		{"a lock at 1000 MHz", func() { checkRet(t, "-lgc 1000", d.SetGpuLockedClocks(1000, 1000), nvml.SUCCESS) }},
	} {
		c.do()
		for _, typ := range []nvml.ClockType{nvml.CLOCK_GRAPHICS, nvml.CLOCK_SM} {
			mhz, ret := d.GetClockInfo(typ)
			must(t, "GetClockInfo", ret)
			if !slices.Contains(steps, mhz) {
				t.Errorf("%s: clock %d at %d MHz, not a supported clock", c.what, typ, mhz)
			}
		}
	}
}
