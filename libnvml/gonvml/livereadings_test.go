//go:build integration

package gonvml

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/live"
)

// Readings that follow the live state beyond the model's core ones
// (live_test.go): field values of faults, the T.Limit margin, dynamic
// P-state utilization, violation times and the power brake.

// fields reads field values of one device: each value (its first 8 bytes
// as a number) and its return.
func fields(t *testing.T, d nvml.Device, ids ...uint32) ([]uint64, []nvml.Return) {
	t.Helper()
	fv := make([]nvml.FieldValue, len(ids))
	for i, id := range ids {
		fv[i].FieldId = id
	}
	must(t, "GetFieldValues", d.GetFieldValues(fv))
	vals, rets := make([]uint64, len(ids)), make([]nvml.Return, len(ids))
	for i, v := range fv {
		rets[i] = nvml.Return(v.NvmlReturn)
		switch nvml.ValueType(v.ValueType) {
		case nvml.VALUE_TYPE_UNSIGNED_INT, nvml.VALUE_TYPE_SIGNED_INT:
			vals[i] = uint64(binary.LittleEndian.Uint32(v.Value[:4]))
		default:
			vals[i] = binary.LittleEndian.Uint64(v.Value[:])
		}
	}
	return vals, rets
}

var (
	remapFields  = []uint32{nvml.FI_DEV_REMAPPED_COR, nvml.FI_DEV_REMAPPED_UNC, nvml.FI_DEV_REMAPPED_PENDING, nvml.FI_DEV_REMAPPED_FAILURE}
	retireFields = []uint32{nvml.FI_DEV_RETIRED_SBE, nvml.FI_DEV_RETIRED_DBE, nvml.FI_DEV_RETIRED_PENDING,
		nvml.FI_DEV_RETIRED_PENDING_SBE, nvml.FI_DEV_RETIRED_PENDING_DBE}
)

func allRet(rets []nvml.Return, want nvml.Return) bool {
	for _, r := range rets {
		if r != want {
			return false
		}
	}
	return true
}

// On an A100 (a row remapper, no page retirement) the remapped-row fields
// read what GetRemappedRows does, faults included.
func TestRemappedRowFieldsAgreeWithTheGetter(t *testing.T) {
	lib, f, _ := startLive(t, 4)
	d := handle(t, lib, 2)
	if _, rets := fields(t, d, retireFields...); !allRet(rets, nvml.ERROR_NOT_SUPPORTED) {
		t.Errorf("retired-page fields on an A100: %v, want Not Supported (it remaps rows)", rets)
	}
	for _, step := range []struct {
		what  string
		fault live.Fault
	}{
		{"idle", live.Fault{}},
		{"after ecc_uncorrectable", live.Fault{Kind: live.FaultECC, XID: 48}},
		{"and remap_failure", live.Fault{Kind: live.FaultRemapFailure}},
	} {
		if step.fault.Kind != 0 {
			update(t, f, func(s *live.State, now int64) error { return s.AddFault(2, step.fault, now) })
		}
		corr, unc, pending, failed, ret := d.GetRemappedRows()
		must(t, "GetRemappedRows", ret)
		want := []uint64{uint64(corr), uint64(unc), uint64(boolInt(pending)), uint64(boolInt(failed))}
		got, rets := fields(t, d, remapFields...)
		if !allRet(rets, nvml.SUCCESS) || !equal(got, want) {
			t.Errorf("%s: REMAPPED_COR, UNC, PENDING, FAILURE = %v (%v), want GetRemappedRows' %v", step.what, got, rets, want)
		}
	}
	if corr, unc, pending, failed, _ := d.GetRemappedRows(); corr != 0 || unc != 1 || !pending || !failed {
		t.Errorf("GetRemappedRows after both faults: %d %d %v %v", corr, unc, pending, failed)
	}
}

// On a T4 (page retirement, no row remapper) the retired-page fields read
// what the retired-page getters do after XID 48.
func TestRetiredPageFieldsAgreeWithTheGetters(t *testing.T) {
	lib, f, _ := startLiveOn(t, "t4", 2)
	if _, rets := fields(t, handle(t, lib, 0), remapFields...); !allRet(rets, nvml.ERROR_NOT_SUPPORTED) {
		t.Errorf("remapped-row fields on a T4: %v, want Not Supported (it retires pages)", rets)
	}
	for _, step := range []struct{ gpu, xid int }{{0, 0}, {0, 48}, {1, 63}} {
		d, xid := handle(t, lib, step.gpu), step.xid
		if xid != 0 {
			update(t, f, func(s *live.State, now int64) error { return s.XID(step.gpu, uint32(xid), now) })
		}
		sbe, ret := d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
		must(t, "GetRetiredPages(SBE)", ret)
		dbe, ret := d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
		must(t, "GetRetiredPages(DBE)", ret)
		pending, ret := d.GetRetiredPagesPendingStatus()
		must(t, "GetRetiredPagesPendingStatus", ret)
		p := uint64(boolInt(pending == nvml.FEATURE_ENABLED))
		// Pages pending for SBE: none retire so; for DBE, the one cause
		// modelled: whether any is.
		want := []uint64{uint64(len(sbe)), uint64(len(dbe)), p, 0, p}
		got, rets := fields(t, d, retireFields...)
		if !allRet(rets, nvml.SUCCESS) || !equal(got, want) {
			t.Errorf("XID %d: RETIRED_SBE, DBE, PENDING, PENDING_SBE, PENDING_DBE = %v (%v), want the getters' %v", xid, got, rets, want)
		}
		if xid == 48 && (len(dbe) != 1 || p != 1) {
			t.Errorf("after XID 48: %d pages retired, pending %d; want 1 and 1", len(dbe), p)
		}
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The T.Limit margin falls one for one as the GPU warms under a load, and
// a thermal slowdown takes it to the slowdown T.Limit threshold or below.
func TestTheMarginFollowsTheTemperature(t *testing.T) {
	lib, f, boards := startLiveOn(t, "l40s", 1)
	d := handle(t, lib, 0)
	margin := func() int {
		t.Helper()
		m, ret := d.GetMarginTemperature()
		must(t, "GetMarginTemperature", ret)
		return int(m.MarginTemperature)
	}
	idle := margin()
	update(t, f, func(s *live.State, now int64) error { s.SetLoad(boards[0], 0, live.Loads{GPU: 100}, now); return nil })
	for _, after := range []time.Duration{10 * time.Second, 5 * time.Minute} {
		advance(t, f, after)
		temp := read(t, d).temp
		if m, want := margin(), idle-(int(temp)-int(boards[0].IdleTempC)); m != want || temp <= boards[0].IdleTempC {
			t.Errorf("under load at %d C: margin %d C, want %d (idle margin %d at %d C)", temp, m, want, idle, boards[0].IdleTempC)
		}
	}
	update(t, f, func(s *live.State, now int64) error { return s.AddFault(0, live.Fault{Kind: live.FaultThermal}, now) })
	v, rets := fields(t, d, nvml.FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT)
	must(t, "FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT", rets[0])
	slow := int(int32(uint32(v[0])))
	temp := read(t, d).temp
	if m := margin(); m > slow || m != idle-(int(temp)-int(boards[0].IdleTempC)) {
		t.Errorf("thermal slowdown at %d C: margin %d C, want at most the slowdown T.Limit %d and T.Limit unmoved", temp, m, slow)
	}
}

// Dynamic P-state utilization follows the load: the GPU domain the GPU's
// utilization, the frame buffer the memory's.
func TestDynamicPstatesFollowTheLoad(t *testing.T) {
	lib, f, boards := startLiveOn(t, "l40s", 1)
	d := handle(t, lib, 0)
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 100, Memory: 50, Decoder: 30}, now)
		return nil
	})
	info, ret := d.GetDynamicPstatesInfo()
	must(t, "GetDynamicPstatesInfo", ret)
	u, ret := d.GetUtilizationRates()
	must(t, "GetUtilizationRates", ret)
	got := [4]uint32{}
	for k := range got {
		got[k] = info.Utilization[k].Percentage
	}
	if want := [4]uint32{u.Gpu, u.Memory, 30, 0}; got != want || u.Gpu != 100 || u.Memory != 50 {
		t.Errorf("at 100 %% (memory 50, decoder 30): GPU, FB, VID, BUS domains %v, want %v", got, want)
	}
}

// Violation time counts, in ns of the node's clock, how long the power cap
// and a thermal slowdown held the GPU back; the power count never goes
// back, across load changes.
func TestViolationTimeAccumulates(t *testing.T) {
	lib, f, boards := startLive(t, 1)
	d := handle(t, lib, 0)
	viol := func(p nvml.PerfPolicyType) (uint64, uint64) {
		t.Helper()
		v, ret := d.GetViolationStatus(p)
		must(t, "GetViolationStatus", ret)
		return v.ViolationTime, v.ReferenceTime
	}
	type counts struct{ power, thermal, total, other time.Duration }
	at := func() counts {
		t.Helper()
		var c counts
		p, ref := viol(nvml.PERF_POLICY_POWER)
		if want := f.Read().Header.FrozenNS / 1000; ref != want {
			t.Errorf("referenceTime %d, want the node's clock in microseconds, %d", ref, want)
		}
		th, _ := viol(nvml.PERF_POLICY_THERMAL)
		tot, _ := viol(nvml.PERF_POLICY_TOTAL_APP_CLOCKS)
		c.power, c.thermal, c.total = time.Duration(p), time.Duration(th), time.Duration(tot)
		for _, o := range []nvml.PerfPolicyType{nvml.PERF_POLICY_SYNC_BOOST, nvml.PERF_POLICY_BOARD_LIMIT,
			nvml.PERF_POLICY_LOW_UTILIZATION, nvml.PERF_POLICY_RELIABILITY, nvml.PERF_POLICY_TOTAL_BASE_CLOCKS} {
			v, _ := viol(o)
			c.other += time.Duration(v)
		}
		return c
	}
	s := time.Second
	// load sets a load and lets 5 s pass.
	load := func(pct uint32) {
		update(t, f, func(st *live.State, now int64) error { st.SetLoad(boards[0], 0, live.Loads{GPU: pct}, now); return nil })
		advance(t, f, 5*s)
	}
	update(t, f, func(st *live.State, now int64) error { st.SetLoad(boards[0], 0, live.Loads{GPU: 80}, now); return nil })
	advance(t, f, 10*s)
	steps := []struct {
		what string
		do   func()
		want counts
	}{
		{"80 % under the default limit", func() {}, counts{}},
		{"10 s more under 150 W", func() {
			checkRet(t, "a 150 W limit", d.SetPowerManagementLimit(150000), nvml.SUCCESS)
			advance(t, f, 10*s)
		}, counts{power: 10 * s, total: 10 * s}},
		{"5 s of thermal slowdown", func() {
			update(t, f, func(st *live.State, now int64) error {
				return st.AddFault(0, live.Fault{Kind: live.FaultThermal}, now)
			})
			advance(t, f, 5*s)
		}, counts{power: 15 * s, thermal: 5 * s, total: 15 * s}},
		{"a new load, still capped", func() { load(50) }, counts{power: 20 * s, thermal: 10 * s, total: 20 * s}},
		// Two load changes later the capped segments are no longer the
		// state's, and their time still counts: a counter never goes back.
		{"an idle GPU", func() { load(0) }, counts{power: 20 * s, thermal: 15 * s, total: 20 * s}},
		{"a light load", func() { load(10) }, counts{power: 20 * s, thermal: 20 * s, total: 20 * s}},
	}
	for _, st := range steps {
		st.do()
		if got := at(); got != st.want {
			t.Errorf("%s: violation power %v, thermal %v, total %v, others %v; want %v, %v, %v, 0",
				st.what, got.power, got.thermal, got.total, got.other, st.want.power, st.want.thermal, st.want.total)
		}
	}
}

// A power brake halves the power limit in force, one set with -pl too.
func TestPowerBrakeHalvesTheLimitInForce(t *testing.T) {
	lib, f, boards := startLive(t, 1)
	d := handle(t, lib, 0)
	checkRet(t, "a 150 W limit", d.SetPowerManagementLimit(150000), nvml.SUCCESS)
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 80}, now)
		return s.AddFault(0, live.Fault{Kind: live.FaultPowerBrake}, now)
	})
	if r := read(t, d); r.power > 75000 {
		t.Errorf("80 %% under 150 W with the power brake: %d mW, want at most 75000", r.power)
	}
}

// On a running clock an idle GPU's thermal time runs on (review: the
// library decided it at a cached time, and it stood still).
func TestThermalTimeRunsOnAnIdleGPU(t *testing.T) {
	lib, f, _ := startLive(t, 1)
	update(t, f, func(s *live.State, _ int64) error { s.Header.Frozen, s.Header.FrozenNS = 0, 0; return nil })
	update(t, f, func(s *live.State, now int64) error { return s.AddFault(0, live.Fault{Kind: live.FaultThermal}, now) })
	d := handle(t, lib, 0)
	a, ret := d.GetViolationStatus(nvml.PERF_POLICY_THERMAL)
	must(t, "GetViolationStatus", ret)
	time.Sleep(50 * time.Millisecond)
	b, ret := d.GetViolationStatus(nvml.PERF_POLICY_THERMAL)
	must(t, "GetViolationStatus", ret)
	if b.ViolationTime < a.ViolationTime+40e6 || b.ReferenceTime < a.ReferenceTime+40e3 {
		t.Errorf("50 ms apart: %+v then %+v, want both to move on by 50 ms", a, b)
	}
}
