//go:build integration

package gonvml

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/live"
)

// Locked clocks as nvml.h describes the calls: numbers, or both limits
// named (unlimited twice unlocks); mixed, reversed or unknown limits are
// refused. A lock holds the clock the load asks for, but a thermal
// slowdown or a power limit still pulls it below the lock.
func TestLockedClocksFollowNVMLsRules(t *testing.T) {
	lib, f, boards := startLive(t, 1)
	d := handle(t, lib, 0)
	// go-nvml types the names as int32; the C calls take them unsigned.
	start, tdp, unlimited := uint32(0xffffff00), uint32(0xffffff01), uint32(0xffffff02)
	if nvml.CLOCK_LIMIT_ID_UNLIMITED != -254 {
		t.Fatalf("nvml.h's unlimited is %d", nvml.CLOCK_LIMIT_ID_UNLIMITED)
	}
	checkRet(t, "min above max", d.SetGpuLockedClocks(1400, 1000), nvml.ERROR_INVALID_ARGUMENT)
	checkRet(t, "a number and a name", d.SetGpuLockedClocks(1000, unlimited), nvml.ERROR_INVALID_ARGUMENT)
	checkRet(t, "the range's start as a name", d.SetGpuLockedClocks(start, unlimited), nvml.ERROR_INVALID_ARGUMENT)
	checkRet(t, "a name past unlimited", d.SetGpuLockedClocks(unlimited+1, unlimited+1), nvml.ERROR_INVALID_ARGUMENT)
	checkRet(t, "at TDP (its clock is not modelled)", d.SetGpuLockedClocks(tdp, tdp), nvml.ERROR_NOT_SUPPORTED)
	checkRet(t, "memory min above max", d.SetMemoryLockedClocks(1215, 1000), nvml.ERROR_INVALID_ARGUMENT)
	if r := read(t, d); r.sm != 210 || r.reasons != nvml.ClocksEventReasonGpuIdle {
		t.Fatalf("refused locks changed the idle GPU: SM %d MHz, reasons %#x", r.sm, r.reasons)
	}

	checkRet(t, "a lock at 1400", d.SetGpuLockedClocks(1400, 1400), nvml.SUCCESS)
	// 1400 is not one of the A100's 15 MHz steps: the one below.
	if r := read(t, d); r.sm != 1395 || r.reasons != 0 {
		t.Errorf("idle, locked at 1400: SM %d MHz, reasons %#x; want 1395 and not idle", r.sm, r.reasons)
	}
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 100}, now)
		return s.AddFault(0, live.Fault{Kind: live.FaultThermal}, now)
	})
	if r := read(t, d); r.sm != 705 || r.reasons&nvml.ClocksEventReasonSwThermalSlowdown == 0 {
		t.Errorf("loaded and hot, locked at 1400: SM %d MHz, reasons %#x; want half of 1410 and the slowdown", r.sm, r.reasons)
	}
	update(t, f, func(s *live.State, now int64) error { s.ClearFaults(0, 0); return nil })
	checkRet(t, "a 150 W limit", d.SetPowerManagementLimit(150000), nvml.SUCCESS)
	if r := read(t, d); r.sm >= 1400 || r.reasons&nvml.ClocksEventReasonSwPowerCap == 0 {
		t.Errorf("loaded under 150 W, locked at 1400: SM %d MHz, reasons %#x; want lower, by the power cap", r.sm, r.reasons)
	}
	checkRet(t, "unlimited twice", d.SetGpuLockedClocks(unlimited, unlimited), nvml.SUCCESS)
	checkRet(t, "the default limit", d.SetPowerManagementLimit(400000), nvml.SUCCESS)
	if r := read(t, d); r.sm != 1335 {
		t.Errorf("unlocked at full load: SM %d MHz, want 95 per cent of 1410 on a step, 1335", r.sm)
	}
}

// Applications clocks are what GetApplicationsClock and the application
// clock target show; the defaults stay the board's.
func TestApplicationsClocksAreTheTarget(t *testing.T) {
	lib, _, _ := startLive(t, 1)
	d := handle(t, lib, 0)
	checkRet(t, "a pair the A100 lists", d.SetApplicationsClocks(1215, 1305), nvml.SUCCESS)
	for _, c := range []struct {
		what string
		id   nvml.ClockId
		typ  nvml.ClockType
		want uint32
	}{
		{"target graphics", nvml.CLOCK_ID_APP_CLOCK_TARGET, nvml.CLOCK_GRAPHICS, 1305},
		{"target memory", nvml.CLOCK_ID_APP_CLOCK_TARGET, nvml.CLOCK_MEM, 1215},
		{"default graphics", nvml.CLOCK_ID_APP_CLOCK_DEFAULT, nvml.CLOCK_GRAPHICS, 1095},
	} {
		if got, ret := d.GetClock(c.typ, c.id); ret != nvml.SUCCESS || got != c.want {
			t.Errorf("%s: %d (%v), want %d", c.what, got, ret, c.want)
		}
	}
	checkRet(t, "a pair it does not", d.SetApplicationsClocks(1215, 1300), nvml.ERROR_INVALID_ARGUMENT)
	checkRet(t, "the reset", d.ResetApplicationsClocks(), nvml.SUCCESS)
	if got, ret := d.GetApplicationsClock(nvml.CLOCK_GRAPHICS); ret != nvml.SUCCESS || got != 1095 {
		t.Errorf("after the reset: %d (%v), want 1095", got, ret)
	}
}

// Where the driver deprecated reading applications clocks (the L40S and
// T4 captures), setting or resetting them is deprecated too (nvml.h); QA:
// both were taken and could never be read back.
func TestApplicationsClocksDeprecatedForReadingAreNotTaken(t *testing.T) {
	for _, c := range []struct {
		board    string
		mem, gfx uint32 // a pair the board lists
	}{{"l40s", 9001, 2520}, {"t4", 5001, 1530}} {
		lib, _, _ := startLiveOn(t, c.board, 1)
		d := handle(t, lib, 0)
		_, ret := d.GetApplicationsClock(nvml.CLOCK_GRAPHICS)
		checkRet(t, c.board+" applications clock", ret, nvml.ERROR_DEPRECATED)
		checkRet(t, c.board+" set, a listed pair", d.SetApplicationsClocks(c.mem, c.gfx), nvml.ERROR_DEPRECATED)
		checkRet(t, c.board+" reset", d.ResetApplicationsClocks(), nvml.ERROR_DEPRECATED)
	}
}

// A memory lock runs memory at the highest clock the board lists in the
// range (an L40S lists 9001 and 405 MHz).
func TestMemoryLocksPickAListedClock(t *testing.T) {
	lib, _, _ := startLiveOn(t, "l40s", 1)
	d := handle(t, lib, 0)
	idle, ret := d.GetClockInfo(nvml.CLOCK_MEM)
	must(t, "GetClockInfo", ret)
	for _, c := range []struct{ lo, hi, want uint32 }{{0, 1000, 405}, {5000, 10000, 9001}, {1000, 2000, idle}} {
		checkRet(t, "SetMemoryLockedClocks", d.SetMemoryLockedClocks(c.lo, c.hi), nvml.SUCCESS)
		if got, ret := d.GetClockInfo(nvml.CLOCK_MEM); ret != nvml.SUCCESS || got != c.want {
			t.Errorf("memory locked %d-%d: %d MHz (%v), want %d", c.lo, c.hi, got, ret, c.want)
		}
	}
	checkRet(t, "ResetMemoryLockedClocks", d.ResetMemoryLockedClocks(), nvml.SUCCESS)
	if got, _ := d.GetClockInfo(nvml.CLOCK_MEM); got != idle {
		t.Errorf("after the reset: %d MHz, want %d", got, idle)
	}
}

// A T4's capture idles at its 1590 MHz maximum; a lock below that still
// holds it, loaded or not, down to its lowest listed clock (300 MHz).
func TestALockBelowTheIdleClockHoldsIt(t *testing.T) {
	lib, f, boards := startLiveOn(t, "t4", 1)
	d := handle(t, lib, 0)
	if r := read(t, d); r.sm != 1590 {
		t.Fatalf("idle T4 unlocked: SM %d MHz, want the capture's 1590", r.sm)
	}
	checkRet(t, "a lock at 300-600", d.SetGpuLockedClocks(300, 600), nvml.SUCCESS)
	if r := read(t, d); r.sm != 600 {
		t.Errorf("idle, locked at 300-600: SM %d MHz, want 600", r.sm)
	}
	update(t, f, func(s *live.State, now int64) error { s.SetLoad(boards[0], 0, live.Loads{GPU: 50}, now); return nil })
	if r := read(t, d); r.sm != 600 {
		t.Errorf("half loaded, locked at 300-600: SM %d MHz, want 600", r.sm)
	}
	checkRet(t, "a lock at 100-200", d.SetGpuLockedClocks(100, 200), nvml.SUCCESS)
	if r := read(t, d); r.sm != 300 {
		t.Errorf("locked below every listed clock: SM %d MHz, want the lowest, 300", r.sm)
	}
}
