//go:build integration

package gonvml

import (
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/live"
)

// A 7g GPU instance holds a 1c, a 2c and a 3c made in that order (NVIDIA's
// MIG guide lists such a GPU) and a 4c beside a 3c (a published valid
// configuration): a 3c starts at 0 or 4. QA: at multiples of 3 neither fit.
// nvmock's own writer (layouts, ctl) places them as the library does.
func TestA7gHoldsComputeInstancesOfEverySize(t *testing.T) {
	lib, f := startMIG(t, 2)
	devs := snapshotDevices(t)
	dev := got(lib.DeviceGetHandleByIndex(0))(t, "GPU 0")
	enableMIG(t, dev)
	p7 := got(dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_7_SLICE))(t, "7g info")
	for _, order := range [][]int{{1, 2, 3}, {4, 3}, {3, 2, 1}} {
		gi := got(dev.CreateGpuInstance(&p7))(t, "create 7g")
		if order[0] == 1 {
			c3 := got(gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 0))(t, "3c info")
			pl := got(gi.GetComputeInstancePossiblePlacements(&c3))(t, "3c placements")
			if len(pl) != 2 || pl[0].Start != 0 || pl[1].Start != 4 || pl[0].Size != 3 {
				t.Errorf("3c placements in a 7g: %+v, want {0,4}:3", pl)
			}
		}
		var starts []uint32
		for _, c := range order {
			e := map[int]int{1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
				3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE}[c]
			info := got(gi.GetComputeInstanceProfileInfo(e, 0))(t, "ci profile")
			ci := got(gi.CreateComputeInstance(&info))(t, "create ci")
			starts = append(starts, got(ci.GetInfo())(t, "ci info").Placement.Start)
		}
		if err := f.Update(func(s *live.State, _ int64) error {
			if err := s.ClearMIG(1, true); err != nil {
				return err
			}
			g, err := s.CreateGPUInstance(1, &devs[1], slices.Index(live.MIGNames(&devs[1]), "7g.40gb"))
			if err != nil {
				return err
			}
			for _, c := range order {
				if _, err := s.CreateComputeInstance(1, g, &devs[1], uint32(c)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Errorf("%v by nvmock's writer: %v", order, err)
		}
		s := f.Read()
		if !slices.Equal(s.GPUs[0].CIStart[:8], s.GPUs[1].CIStart[:8]) {
			t.Errorf("%v: the library placed them at %v, nvmock's writer at %v", order, s.GPUs[0].CIStart[:8], s.GPUs[1].CIStart[:8])
		}
		if order[0] == 1 && !slices.Equal(starts, []uint32{0, 2, 4}) {
			t.Errorf("1c, 2c, 3c at %v, want 0, 2, 4", starts)
		}
		update(t, f, func(s *live.State, _ int64) error { return s.ClearMIG(0, true) })
	}
}

// A board whose MIG tables are not known (gb200) keeps its captured MIG
// mode, Disabled, and answers every profile and instance call Not
// Supported, as a100 with MIG off answers a create (QA: Invalid Argument
// for a create, Invalid Argument for placements).
func TestMIGOnABoardWithoutTables(t *testing.T) {
	lib, _, _ := startLiveOn(t, "gb200", 1)
	dev := got(lib.DeviceGetHandleByIndex(0))(t, "handle")
	if cur, _, ret := dev.GetMigMode(); ret != nvml.SUCCESS || cur != nvml.DEVICE_MIG_DISABLE {
		t.Errorf("GetMigMode: %d, %v; want Disabled as captured", cur, ret)
	}
	_, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	wantRet(t, "SetMigMode", ret, nvml.ERROR_NOT_SUPPORTED)
	_, ret = dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	wantRet(t, "profile info", ret, nvml.ERROR_NOT_SUPPORTED)
	_, ret = dev.GetGpuInstancePossiblePlacements(&nvml.GpuInstanceProfileInfo{Id: 19})
	wantRet(t, "placements", ret, nvml.ERROR_NOT_SUPPORTED)
	_, ret = dev.CreateGpuInstance(&nvml.GpuInstanceProfileInfo{Id: 19})
	wantRet(t, "create", ret, nvml.ERROR_NOT_SUPPORTED)
}

// A GPU's getter on a MIG device answers Not Supported, and on a MIG device
// whose compute instance is gone Invalid Argument, as the MIG getters do
// (QA: Not Supported; nvml.h gives Invalid Argument for an invalid device).
func TestAGoneMIGDeviceIsAnInvalidHandle(t *testing.T) {
	lib, _ := startMIG(t, 1)
	dev := got(lib.DeviceGetHandleByIndex(0))(t, "GPU 0")
	enableMIG(t, dev)
	p7 := got(dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_7_SLICE))(t, "7g info")
	gi := got(dev.CreateGpuInstance(&p7))(t, "create 7g")
	c7 := got(gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, 0))(t, "7c info")
	ci := got(gi.CreateComputeInstance(&c7))(t, "create 7c")
	m := got(dev.GetMigDeviceHandleByIndex(0))(t, "MIG 0")
	_, ret := m.GetTemperature(nvml.TEMPERATURE_GPU)
	wantRet(t, "a GPU's getter on a MIG device", ret, nvml.ERROR_NOT_SUPPORTED)
	wantRet(t, "destroy the compute instance", ci.Destroy(), nvml.SUCCESS)
	_, ret = m.GetTemperature(nvml.TEMPERATURE_GPU)
	wantRet(t, "a GPU's getter on a gone MIG device", ret, nvml.ERROR_INVALID_ARGUMENT)
	_, ret = m.GetName()
	wantRet(t, "a MIG getter on a gone MIG device", ret, nvml.ERROR_INVALID_ARGUMENT)
}

// A GPU in MIG mode has no encoder, decoder, JPEG or OFA utilization, as
// it has no GPU utilization (nvidia-smi dmon -h: not supported there),
// whatever load its engines carry. QA: the decoder's load showed.
func TestAGPUInMIGModeHasNoMediaUtilization(t *testing.T) {
	lib, f := startMIG(t, 1)
	boards, err := live.Boards(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	update(t, f, func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 50, Encoder: 20, Decoder: 30}, now)
		return nil
	})
	dev := got(lib.DeviceGetHandleByIndex(0))(t, "GPU 0")
	if u, _, ret := dev.GetDecoderUtilization(); ret != nvml.SUCCESS || u != 30 {
		t.Errorf("decoder utilization with MIG off: %d, %v, want the load's 30", u, ret)
	}
	enableMIG(t, dev)
	for name, call := range map[string]func() (uint32, uint32, nvml.Return){
		"encoder": dev.GetEncoderUtilization, "decoder": dev.GetDecoderUtilization,
		"JPEG": dev.GetJpgUtilization, "OFA": dev.GetOfaUtilization,
	} {
		if _, _, ret := call(); ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s utilization in MIG mode: %v, want Not Supported", name, ret)
		}
	}
	for _, typ := range []nvml.SamplingType{nvml.ENC_UTILIZATION_SAMPLES, nvml.DEC_UTILIZATION_SAMPLES, nvml.JPG_UTILIZATION_SAMPLES, nvml.OFA_UTILIZATION_SAMPLES} {
		if _, _, ret := dev.GetSamples(typ, 0); ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("samples of type %d in MIG mode: %v, want Not Supported", typ, ret)
		}
	}
}
