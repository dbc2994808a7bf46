//go:build integration

package gonvml

import (
	"testing"

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
