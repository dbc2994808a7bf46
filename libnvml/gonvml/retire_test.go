//go:build integration

package gonvml

import (
	"slices"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/live"
)

// A T4 retires pages where later boards remap rows: XID 63 records a
// retirement with no new error, and it is pending until the driver
// reloads (QA: only a counted error made it pending).
func TestAT4RetiresAPageForXID63(t *testing.T) {
	lib, f, _ := startLiveOn(t, "t4", 1)
	d := handle(t, lib, 0)
	pending, ret := d.GetRetiredPagesPendingStatus()
	check(t, "pending retirement, no fault", pending, ret, nvml.FEATURE_DISABLED)
	update(t, f, func(s *live.State, now int64) error { return s.XID(0, 63, now) })
	pending, ret = d.GetRetiredPagesPendingStatus()
	check(t, "pending retirement after XID 63", pending, ret, nvml.FEATURE_ENABLED)
	c, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	check(t, "uncorrected ECC after XID 63", c, ret, 0)
}

// A retired page's time is its error's, not the time of the query (QA:
// every call gave its own time): a double-bit error at t0 retires one
// page, two more five minutes later retire two.
func TestARetiredPageIsDatedByItsError(t *testing.T) {
	lib, f, _ := startLiveOn(t, "t4", 1)
	d := handle(t, lib, 0)
	update(t, f, func(s *live.State, now int64) error {
		return s.AddFault(0, live.FaultOf(live.FaultECC, 0, 1, 0, 0), now)
	})
	advance(t, f, 5*time.Minute)
	update(t, f, func(s *live.State, now int64) error {
		return s.AddFault(0, live.FaultOf(live.FaultECC, 0, 2, 0, 0), now)
	})
	advance(t, f, time.Minute)
	for range 2 { // the same answer each time
		addrs, times, ret := d.GetRetiredPages_v2(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
		first, later := uint64(t0.Unix()), uint64(t0.Add(5*time.Minute).Unix())
		if ret != nvml.SUCCESS || len(addrs) != 3 || !slices.Equal(times, []uint64{first, later, later}) {
			t.Errorf("retired pages: %v, %x at %v; want 3, at %d, %d and %d", ret, addrs, times, first, later, later)
		}
	}
}
