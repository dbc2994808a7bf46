//go:build integration

package gonvml

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/live"
)

// What a reset (nvidia-smi -r, which writes the reset's time into the
// state as here) ends, read through go-nvml as a health checker reads it:
// XID 154's recovery action, GPU reset, goes back to none; the volatile
// ECC counts start again and the aggregate ones keep every error; and the
// same XIDs after it count again (review: they were added to the faults
// from before the reset, which it had ended).
func TestAResetEndsTheRecoveryActionAndTheVolatileCounts(t *testing.T) {
	lib, f, _ := startLive(t, 1)
	d := handle(t, lib, 0)
	recovery := func() (uint32, nvml.Return) {
		fv := []nvml.FieldValue{{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}}
		if ret := d.GetFieldValues(fv); ret != nvml.SUCCESS {
			return 0, ret
		}
		return binary.LittleEndian.Uint32(fv[0].Value[:4]), nvml.Return(fv[0].NvmlReturn)
	}
	counts := func(what string, vol, agg uint64) {
		t.Helper()
		v, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
		check(t, what+": volatile uncorrected", v, ret, vol)
		a, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC)
		check(t, what+": aggregate uncorrected", a, ret, agg)
	}
	a, ret := recovery()
	check(t, "recovery action of a quiet GPU", a, ret, uint32(nvml.GPU_RECOVERY_ACTION_NONE))
	update(t, f, xids154And48)
	a, ret = recovery()
	check(t, "recovery action after XID 154", a, ret, uint32(nvml.GPU_RECOVERY_ACTION_GPU_RESET))
	counts("after XID 48", 1, 1)

	advance(t, f, time.Minute)
	update(t, f, func(s *live.State, now int64) error { s.GPUs[0].ResetNS = uint64(now); return nil })
	a, ret = recovery()
	check(t, "recovery action after a reset", a, ret, uint32(nvml.GPU_RECOVERY_ACTION_NONE))
	counts("after a reset", 0, 1)
	pending, ret := d.GetRetiredPagesPendingStatus()
	if ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("an A100 retires no pages: %v, %v", pending, ret)
	}
	_, _, isPending, _, ret := d.GetRemappedRows()
	check(t, "remap pending after a reset", isPending, ret, false)

	advance(t, f, time.Minute)
	update(t, f, xids154And48)
	a, ret = recovery()
	check(t, "recovery action after XID 154 again", a, ret, uint32(nvml.GPU_RECOVERY_ACTION_GPU_RESET))
	counts("after XID 48 again", 1, 2)
	_, _, isPending, _, ret = d.GetRemappedRows()
	check(t, "remap pending after XID 48 again", isPending, ret, true)
}

// xids154And48 reports a recovery action of GPU reset and a double-bit
// ECC error on GPU 0.
func xids154And48(s *live.State, now int64) error {
	if err := s.XID(0, 154, now); err != nil {
		return err
	}
	return s.XID(0, 48, now)
}
