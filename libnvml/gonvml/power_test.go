//go:build integration

package gonvml

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/live"
)

// A power limit set through NVML is node state, as nvidia-smi -pl leaves
// it: the requested and enforced limits become it, a load's draw is held
// to it with lower clocks and the SW power cap, and what the GPU drew
// before the change stays as it was. The writer's side of the model
// (live.Board, used when ctl sets a load) agrees with the library's.
func TestAPowerLimitHoldsTheDrawFromWhenItIsSet(t *testing.T) {
	lib, f, boards := startLive(t, 2)
	d0, d1 := handle(t, lib, 0), handle(t, lib, 1)
	lo, hi, ret := d0.GetPowerManagementLimitConstraints()
	must(t, "GetPowerManagementLimitConstraints", ret)

	// What the real library refuses.
	checkRet(t, "a limit under the minimum", d0.SetPowerManagementLimit(lo-1), nvml.ERROR_INVALID_ARGUMENT)
	checkRet(t, "a limit over the maximum", d0.SetPowerManagementLimit(hi+1), nvml.ERROR_INVALID_ARGUMENT)
	v2 := func(scope uint8, mw uint32) *nvml.PowerValue_v2 {
		v := &nvml.PowerValue_v2{PowerScope: scope, PowerValueMw: mw}
		v.Version = nvml.STRUCT_VERSION(v, 2)
		return v
	}
	bad := v2(nvml.POWER_SCOPE_GPU, 250000)
	bad.Version = nvml.STRUCT_VERSION(bad, 1)
	checkRet(t, "SetPowerManagementLimit_v2 version 1", d0.SetPowerManagementLimit_v2(bad), nvml.ERROR_ARGUMENT_VERSION_MISMATCH)
	checkRet(t, "a module's limit", d0.SetPowerManagementLimit_v2(v2(nvml.POWER_SCOPE_MODULE, 250000)), nvml.ERROR_NOT_SUPPORTED)
	checkRet(t, "scope 4", d0.SetPowerManagementLimit_v2(v2(4, 250000)), nvml.ERROR_INVALID_ARGUMENT)
	if l, ret := d0.GetPowerManagementLimit(); ret != nvml.SUCCESS || l != hi {
		t.Fatalf("after refused changes the limit is %d (%v), want %d", l, ret, hi)
	}

	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 100}, now)
		return nil
	})
	advance(t, f, time.Minute)
	before := read(t, d0)
	if before.power != hi {
		t.Fatalf("at 100 %% before the change: %d mW, want the limit %d", before.power, hi)
	}
	const limit = 250000
	checkRet(t, "SetPowerManagementLimit_v2 250 W", d0.SetPowerManagementLimit_v2(v2(nvml.POWER_SCOPE_GPU, limit)), nvml.SUCCESS)

	at := read(t, d0)
	if at.power != limit || at.reasons != nvml.ClocksEventReasonSwPowerCap || at.sm >= before.sm {
		t.Errorf("at 100 %% under a 250 W limit: %d mW, reasons %#x, SM %d MHz; want 250000, the SW power cap, below %d MHz",
			at.power, at.reasons, at.sm, before.sm)
	}
	if at.energy != before.energy || at.temp != before.temp {
		t.Errorf("the change moved the past: energy %d -> %d mJ, temperature %d -> %d C", before.energy, at.energy, before.temp, at.temp)
	}
	// The power history before the change is what was drawn then (review:
	// it was recomputed at the new limit).
	change := f.Read().GPUs[0].SinceNS / 1000
	_, samples, ret := d0.GetSamples(nvml.TOTAL_POWER_SAMPLES, 0)
	must(t, "GetSamples", ret)
	for _, sm := range samples {
		if v := binaryUint(sm.SampleValue); sm.TimeStamp < change && v != hi {
			t.Errorf("power sample at %d, before the limit changed at %d: %d mW, want %d", sm.TimeStamp, change, v, hi)
		}
	}
	for _, c := range []struct {
		what string
		get  func() (uint32, nvml.Return)
	}{
		{"GetPowerManagementLimit", d0.GetPowerManagementLimit},
		{"GetEnforcedPowerLimit", d0.GetEnforcedPowerLimit},
	} {
		v, ret := c.get()
		check(t, c.what, v, ret, limit)
	}
	fv := []nvml.FieldValue{{FieldId: nvml.FI_DEV_POWER_CURRENT_LIMIT}, {FieldId: nvml.FI_DEV_POWER_REQUESTED_LIMIT}, {FieldId: nvml.FI_DEV_POWER_INSTANT}}
	checkRet(t, "GetFieldValues", d0.GetFieldValues(fv), nvml.SUCCESS)
	for _, v := range fv {
		if got := binary.LittleEndian.Uint32(v.Value[:]); nvml.Return(v.NvmlReturn) != nvml.SUCCESS || got != limit {
			t.Errorf("field %d: %d (%v), want %d", v.FieldId, got, nvml.Return(v.NvmlReturn), limit)
		}
	}
	if l, ret := d1.GetEnforcedPowerLimit(); ret != nvml.SUCCESS || l != hi {
		t.Errorf("GPU 1's limit: %d (%v), want its own %d", l, ret, hi)
	}

	// A minute on: energy grows at the limit, and the writer, setting the
	// same load again, starts from exactly where the library stands.
	advance(t, f, time.Minute)
	later := read(t, d0)
	if got := later.energy - at.energy; got != limit*60 {
		t.Errorf("a minute at 250 W: %d mJ, want %d", got, limit*60)
	}
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 100}, now)
		return nil
	})
	if again := read(t, d0); again != later {
		t.Errorf("the writer's new segment: %+v, the library's readings before it: %+v", again, later)
	}

	// Clearing the readings keeps the setting, as nvmock ctl clear --load does.
	update(t, f, func(s *live.State, _ int64) error { s.ResetReadings(0); return nil })
	if l, ret := d0.GetEnforcedPowerLimit(); ret != nvml.SUCCESS || l != limit {
		t.Errorf("after ResetReadings the limit is %d (%v), want %d kept", l, ret, limit)
	}
	checkRet(t, "SetPowerManagementLimit back to the default", d0.SetPowerManagementLimit(hi), nvml.SUCCESS)
	if l, ret := d0.GetPowerManagementLimit(); ret != nvml.SUCCESS || l != hi {
		t.Errorf("after setting the default back: %d (%v)", l, ret)
	}
}

// SetEccMode takes ENABLED or DISABLED only, and changes the pending mode
// alone.
func TestSetEccModeChangesOnlyThePendingMode(t *testing.T) {
	lib, f, _ := startLive(t, 1)
	d := handle(t, lib, 0)
	if ret := d.SetEccMode(2); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("SetEccMode(2): %v, want INVALID_ARGUMENT", ret)
	}
	must(t, "SetEccMode", d.SetEccMode(nvml.FEATURE_DISABLED))
	cur, pend, ret := d.GetEccMode()
	if ret != nvml.SUCCESS || cur != nvml.FEATURE_ENABLED || pend != nvml.FEATURE_DISABLED {
		t.Errorf("GetEccMode after SetEccMode(DISABLED): %v, %v, %v; want ENABLED, DISABLED", ret, cur, pend)
	}
	// The counters go on as with ECC on: the mode changes at the next boot.
	if _, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret != nvml.SUCCESS {
		t.Errorf("GetTotalEccErrors with ECC pending off: %v", ret)
	}

	// Back to the profile's mode: nothing is pending, so nothing is kept
	// (ctl status would list it).
	must(t, "SetEccMode", d.SetEccMode(nvml.FEATURE_ENABLED))
	if g := f.Read().GPUs[0]; g.CfgSet&live.CfgECCPending != 0 {
		t.Errorf("ECC set back to the profile's mode is still a setting: cfg %#x", g.CfgSet)
	}
	// A damaged word reads as unset.
	update(t, f, func(s *live.State, _ int64) error {
		s.GPUs[0].CfgSet, s.GPUs[0].ECCPending = live.CfgECCPending, 7
		return nil
	})
	if _, pend, ret := d.GetEccMode(); ret != nvml.SUCCESS || pend != nvml.FEATURE_ENABLED {
		t.Errorf("GetEccMode with pending 7 in the state: %v, %v; want the profile's ENABLED", ret, pend)
	}
}
