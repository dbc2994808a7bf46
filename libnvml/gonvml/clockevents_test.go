//go:build integration

package gonvml

import (
	"slices"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/live"
)

// The clock event reason counters CUDA 13 clients read instead of the
// deprecated nvmlDeviceGetViolationStatus are its times by nvml.h's
// translations, in ns: the SW power cap's field is the power policy's, the
// SW thermal slowdown's the thermal policy's. A thermal fault is both
// thermal slowdowns, a power brake its own.
func TestClockEventCountersAreTheViolationTimes(t *testing.T) {
	lib, f, boards := startLiveOn(t, "h100", 1) // driver 580
	d := handle(t, lib, 0)
	s := time.Second
	checkRet(t, "a 200 W limit", d.SetPowerManagementLimit(200000), nvml.SUCCESS)
	update(t, f, func(st *live.State, now int64) error { st.SetLoad(boards[0], 0, live.Loads{GPU: 100}, now); return nil })
	advance(t, f, 10*s)
	update(t, f, func(st *live.State, now int64) error { return st.AddFault(0, live.Fault{Kind: live.FaultThermal}, now) })
	advance(t, f, 5*s)
	update(t, f, func(st *live.State, now int64) error {
		return st.AddFault(0, live.Fault{Kind: live.FaultPowerBrake}, now)
	})
	advance(t, f, 3*s)

	viol := func(p nvml.PerfPolicyType) uint64 {
		t.Helper()
		v, ret := d.GetViolationStatus(p)
		must(t, "GetViolationStatus", ret)
		return v.ViolationTime
	}
	ids := []uint32{
		nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP, nvml.FI_DEV_PERF_POLICY_THERMAL,
		nvml.FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST, nvml.FI_DEV_PERF_POLICY_BOARD_LIMIT,
		nvml.FI_DEV_PERF_POLICY_LOW_UTILIZATION, nvml.FI_DEV_PERF_POLICY_RELIABILITY,
		nvml.FI_DEV_PERF_POLICY_TOTAL_APP_CLOCKS, nvml.FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS,
		nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,
		nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN,
	}
	thermal := viol(nvml.PERF_POLICY_THERMAL)
	want := []uint64{
		viol(nvml.PERF_POLICY_POWER), thermal,
		viol(nvml.PERF_POLICY_SYNC_BOOST), viol(nvml.PERF_POLICY_BOARD_LIMIT),
		viol(nvml.PERF_POLICY_LOW_UTILIZATION), viol(nvml.PERF_POLICY_RELIABILITY),
		viol(nvml.PERF_POLICY_TOTAL_APP_CLOCKS), viol(nvml.PERF_POLICY_TOTAL_BASE_CLOCKS),
		thermal, thermal,
		uint64(3 * s),
	}
	if want[0] < uint64(10*s) || thermal != uint64(8*s) {
		t.Fatalf("violation times: power %v, thermal %v; want at least 10 s of power cap and 8 s of thermal slowdown",
			time.Duration(want[0]), time.Duration(thermal))
	}
	got, rets := fields(t, d, ids...)
	for i, id := range ids {
		if rets[i] != nvml.SUCCESS || got[i] != want[i] {
			t.Errorf("field %d: %v (%v), want %v", id, time.Duration(got[i]), rets[i], time.Duration(want[i]))
		}
	}
}

// R575 added the slowdowns' own fields: the a100's driver, 570, answers
// them Not Supported, and the policies' older fields as before.
func TestClockEventSlowdownFieldsCameWithR575(t *testing.T) {
	lib, _, _ := startLive(t, 1) // a100: driver 570
	d := handle(t, lib, 0)
	_, rets := fields(t, d, nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP,
		nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,
		nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN)
	if want := []nvml.Return{nvml.SUCCESS, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED}; !slices.Equal(rets, want) {
		t.Errorf("SW power cap, SW and HW thermal, power brake fields: %v, want %v", rets, want)
	}
}
