//go:build integration

package gonvml

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/live"
)

// Per-process accounting (nvidia-smi -am 1) is node state: once on, the
// GPU's processes registered since are accounted, running, with their
// start and memory and no run time yet (nvml.h); one registered before
// is not; turning it off clears them. A GPU in MIG mode has it off and
// takes no change (nvml.h). QA: -am 1 answered Not Supported.
func TestAccountingCountsTheProcessesSinceItWentOn(t *testing.T) {
	lib, f, _ := startLive(t, 2)
	d := handle(t, lib, 0)
	mode, ret := d.GetAccountingMode()
	check(t, "accounting mode at first", mode, ret, nvml.FEATURE_DISABLED)
	add := func(pid uint32, mib uint64) {
		update(t, f, func(s *live.State, now int64) error {
			return s.AddProcess(live.Process{PID: pid, GPU: 0, Type: 1, UsedBytes: mib << 20, Name: "train"}, now)
		})
	}
	add(4001, 100)
	advance(t, f, time.Minute)
	checkRet(t, "accounting on", d.SetAccountingMode(nvml.FEATURE_ENABLED), nvml.SUCCESS)
	mode, ret = d.GetAccountingMode()
	check(t, "accounting mode", mode, ret, nvml.FEATURE_ENABLED)
	add(4002, 2048)
	advance(t, f, time.Minute)
	pids, ret := d.GetAccountingPids()
	if ret != nvml.SUCCESS || len(pids) != 1 || pids[0] != 4002 {
		t.Errorf("accounted pids: %v, %v; want 4002 alone (4001 ran before accounting)", pids, ret)
	}
	st, ret := d.GetAccountingStats(4002)
	u := got(d.GetUtilizationRates())(t, "utilization") // the model keeps no history per process
	want := nvml.AccountingStats{GpuUtilization: u.Gpu, MemoryUtilization: u.Memory, MaxMemoryUsage: 2048 << 20,
		StartTime: uint64(t0.Add(time.Minute).UnixMicro()), IsRunning: 1}
	check(t, "stats of 4002", st, ret, want)
	_, ret = d.GetAccountingStats(4001)
	checkRet(t, "stats of 4001", ret, nvml.ERROR_NOT_FOUND)

	checkRet(t, "accounting off", d.SetAccountingMode(nvml.FEATURE_DISABLED), nvml.SUCCESS)
	pids, ret = d.GetAccountingPids()
	if ret != nvml.SUCCESS || len(pids) != 0 {
		t.Errorf("accounted pids with accounting off: %v, %v; want none", pids, ret)
	}
	_, ret = d.GetAccountingStats(4002)
	checkRet(t, "stats with accounting off", ret, nvml.ERROR_NOT_SUPPORTED)

	d1 := handle(t, lib, 1)
	enableMIG(t, d1)
	checkRet(t, "accounting on a GPU in MIG mode", d1.SetAccountingMode(nvml.FEATURE_ENABLED), nvml.ERROR_NOT_SUPPORTED)
	mode, ret = d1.GetAccountingMode()
	check(t, "accounting mode in MIG mode", mode, ret, nvml.FEATURE_DISABLED)
}
