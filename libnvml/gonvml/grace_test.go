//go:build integration

package gonvml

import (
	"encoding/binary"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
)

// A Grace board answers what only Grace boards have: the C2C link to the
// CPU, module power and an NVLink fabric clique.
func TestGraceBoardReportsC2CFabricAndModulePower(t *testing.T) {
	path, p := testenv.Snapshot(t, "gb200", 0)
	cleanEnv(t, path)
	lib := newLib(t)
	start(t, lib)
	d, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	c2c, ret := d.GetC2cModeInfoV().V1()
	check(t, "GetC2cModeInfoV", c2c.IsC2cEnabled, ret, uint32(boolInt(p.Board.C2C == "Enabled")))
	info, ret := d.GetGpuFabricInfo()
	check(t, "GetGpuFabricInfo.CliqueId", info.CliqueId, ret, p.Board.Fabric.CliqueID)
	check(t, "GetGpuFabricInfo.State", info.State, ret, nvml.GPU_FABRIC_STATE_COMPLETED)
	values := []nvml.FieldValue{{FieldId: nvml.FI_DEV_POWER_CURRENT_LIMIT, ScopeId: uint32(nvml.POWER_SCOPE_MODULE)}}
	ret = d.GetFieldValues(values)
	got := binary.LittleEndian.Uint32(values[0].Value[:4])
	check(t, "module power limit (mW)", got, nvml.Return(values[0].NvmlReturn), *milliwatts(p.Board.ModulePower.Limit))
	if ret != nvml.SUCCESS {
		t.Errorf("GetFieldValues: %v", ret)
	}
}
