//go:build integration

package gonvml

import (
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/profile"
)

// MIG through go-nvml, on an a100 node with a live state (MIG layouts are
// node state), checked against the A100-SXM4-40GB's real profile table.

func startMIG(t testing.TB, n int) (nvml.Interface, *live.File) {
	t.Helper()
	path, _ := testenv.Snapshot(t, "a100", n)
	f := testenv.LiveState(t, path, n, t0)
	cleanEnv(t, path)
	lib := newLib(t)
	start(t, lib)
	return lib, f
}

// got takes a call's value and return code: got(f())(t, "what") fails the
// test unless f succeeded.
func got[T any](v T, ret nvml.Return) func(t *testing.T, what string) T {
	return func(t *testing.T, what string) T {
		t.Helper()
		if ret != nvml.SUCCESS {
			t.Fatalf("%s: %v", what, ret)
		}
		return v
	}
}

func wantRet(t *testing.T, what string, got, want nvml.Return) {
	t.Helper()
	if got != want {
		t.Errorf("%s: %v, want %v", what, got, want)
	}
}

func enableMIG(t *testing.T, dev nvml.Device) {
	t.Helper()
	act, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	if ret != nvml.SUCCESS || act != nvml.SUCCESS {
		t.Fatalf("SetMigMode(1): %v, activation %v", ret, act)
	}
}

func TestMIGModeAndProfiles(t *testing.T) {
	lib, _ := startMIG(t, 2)
	dev := got(lib.DeviceGetHandleByIndex(0))(t, "handle")

	cur, pend, ret := dev.GetMigMode()
	if ret != nvml.SUCCESS || cur != 0 || pend != 0 {
		t.Fatalf("GetMigMode: %d %d %v, want disabled", cur, pend, ret)
	}
	_, ret = dev.CreateGpuInstance(&nvml.GpuInstanceProfileInfo{Id: 19})
	wantRet(t, "create with MIG off", ret, nvml.ERROR_NOT_SUPPORTED)
	_, ret = dev.SetMigMode(2)
	wantRet(t, "SetMigMode(2)", ret, nvml.ERROR_INVALID_ARGUMENT)
	// nvml.h: "zero if MIG is not supported or enabled" (review: 7).
	if n := got(dev.GetMaxMigDeviceCount())(t, "max with MIG off"); n != 0 {
		t.Errorf("max MIG devices with MIG off: %d, want 0", n)
	}

	enableMIG(t, dev)
	if cur, pend, _ := dev.GetMigMode(); cur != 1 || pend != 1 {
		t.Fatalf("after enabling: current %d pending %d", cur, pend)
	}
	if cur, _, _ := must2(t, lib, 1); cur != 0 {
		t.Errorf("GPU 1 changed with GPU 0")
	}

	// The real A100-SXM4-40GB's -lgip table.
	want := map[int][11]uint64{ // enum: id, slices, instances, SMs, CE, DEC, ENC, JPEG, OFA, MiB, P2P
		nvml.GPU_INSTANCE_PROFILE_1_SLICE:      {19, 1, 7, 14, 1, 0, 0, 0, 0, 4864, 0},
		nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: {20, 1, 1, 14, 1, 1, 0, 1, 1, 4864, 0},
		nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: {15, 1, 4, 14, 1, 1, 0, 0, 0, 9984, 0},
		nvml.GPU_INSTANCE_PROFILE_2_SLICE:      {14, 2, 3, 28, 2, 1, 0, 0, 0, 9984, 0},
		nvml.GPU_INSTANCE_PROFILE_3_SLICE:      {9, 3, 2, 42, 3, 2, 0, 0, 0, 20096, 0},
		nvml.GPU_INSTANCE_PROFILE_4_SLICE:      {5, 4, 1, 56, 4, 2, 0, 0, 0, 20096, 0},
		nvml.GPU_INSTANCE_PROFILE_7_SLICE:      {0, 7, 1, 98, 7, 5, 0, 1, 1, 40320, 0},
	}
	for e := 0; e < nvml.GPU_INSTANCE_PROFILE_COUNT; e++ {
		info, ret := dev.GetGpuInstanceProfileInfo(e)
		w, ok := want[e]
		if !ok {
			wantRet(t, "profile enum "+strconv.Itoa(e), ret, nvml.ERROR_NOT_SUPPORTED)
			continue
		}
		got := [11]uint64{uint64(info.Id), uint64(info.SliceCount), uint64(info.InstanceCount), uint64(info.MultiprocessorCount),
			uint64(info.CopyEngineCount), uint64(info.DecoderCount), uint64(info.EncoderCount), uint64(info.JpegCount),
			uint64(info.OfaCount), info.MemorySizeMB, uint64(info.IsP2pSupported)}
		if ret != nvml.SUCCESS || got != w {
			t.Errorf("profile enum %d: %v %v, want %v", e, got, ret, w)
		}
		v2, ret := dev.GetGpuInstanceProfileInfoV(e).V2()
		v3, ret3 := dev.GetGpuInstanceProfileInfoV(e).V3()
		if ret != nvml.SUCCESS || ret3 != nvml.SUCCESS || v2.Id != info.Id || v3.MemorySizeMB != info.MemorySizeMB ||
			!strings.HasPrefix(cstr(v2.Name[:]), "MIG ") || cstr(v2.Name[:]) != cstr(v3.Name[:]) {
			t.Errorf("profile enum %d V2/V3: %+v %v / %+v %v", e, v2, ret, v3, ret3)
		}
	}
	_, ret = dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_COUNT)
	wantRet(t, "profile enum COUNT", ret, nvml.ERROR_INVALID_ARGUMENT)
	if v, _ := dev.GetGpuInstanceProfileInfoByIdV(9).V2(); cstr(v.Name[:]) != "MIG 3g.20gb" {
		t.Errorf("profile 9 by id: %q", cstr(v.Name[:]))
	}

	placements := map[uint32]string{19: "0 1 2 3 4 5 6 /1", 15: "0 2 4 6 /2", 14: "0 2 4 /2", 9: "0 4 /4", 5: "0 /4", 0: "0 /8"}
	for id, w := range placements {
		pl, ret := dev.GetGpuInstancePossiblePlacements(&nvml.GpuInstanceProfileInfo{Id: id})
		var b strings.Builder
		for _, p := range pl {
			b.WriteString(strconv.Itoa(int(p.Start)) + " ")
		}
		if len(pl) > 0 {
			b.WriteString("/" + strconv.Itoa(int(pl[0].Size)))
		}
		if ret != nvml.SUCCESS || b.String() != w {
			t.Errorf("placements of %d: %q %v, want %q", id, b.String(), ret, w)
		}
	}
}

// With MIG off, a 550+ driver answers the profiles and their placements
// (NVML's change log) and the remaining capacity of an empty GPU (a real
// R580 H100 with MIG off lists every profile all free), which NVIDIA's DRA
// driver reads to publish a GPU's MIG devices before it turns MIG on;
// creating still needs MIG on. Older drivers answer none of them.
func TestMIGProfilesWithMIGOff(t *testing.T) {
	for _, c := range []struct {
		driver string
		want   nvml.Return
	}{
		{"", nvml.SUCCESS}, // the profile's 570
		{"550.163.01", nvml.SUCCESS},
		{"535.261.03", nvml.ERROR_NOT_SUPPORTED},
	} {
		t.Run("driver "+c.driver, func(t *testing.T) {
			dev := startOneGPU(t, "a100", c.driver)
			info, ret := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
			wantRet(t, "profile info", ret, c.want)
			if ret == nvml.SUCCESS && (info.Id != 9 || info.MemorySizeMB != 20096 || info.MultiprocessorCount != 42) {
				t.Errorf("3g profile with MIG off: %+v, want the 3g.20gb row", info)
			}
			v2, ret := dev.GetGpuInstanceProfileInfoV(nvml.GPU_INSTANCE_PROFILE_3_SLICE).V2()
			wantRet(t, "versioned profile info", ret, c.want)
			if ret == nvml.SUCCESS && cstr(v2.Name[:]) != "MIG 3g.20gb" {
				t.Errorf("versioned 3g profile with MIG off: %q", cstr(v2.Name[:]))
			}
			_, ret = dev.GetGpuInstanceProfileInfoByIdV(9).V2()
			wantRet(t, "profile info by id", ret, c.want)
			pl, ret := dev.GetGpuInstancePossiblePlacements(&nvml.GpuInstanceProfileInfo{Id: 9})
			wantRet(t, "placements", ret, c.want)
			if ret == nvml.SUCCESS && len(pl) != 2 {
				t.Errorf("3g placements with MIG off: %v, want 0 and 4", pl)
			}
			for id, want := range map[uint32]int{19: 7, 20: 1, 15: 4, 14: 3, 9: 2, 5: 1, 0: 1} {
				n, ret := dev.GetGpuInstanceRemainingCapacity(&nvml.GpuInstanceProfileInfo{Id: id})
				wantRet(t, "remaining capacity", ret, c.want)
				if ret == nvml.SUCCESS && n != want {
					t.Errorf("remaining capacity of profile %d with MIG off: %d, want all %d free", id, n, want)
				}
			}
			_, ret = dev.GetGpuInstances(&nvml.GpuInstanceProfileInfo{Id: 9, InstanceCount: 2})
			wantRet(t, "instances", ret, nvml.ERROR_NOT_SUPPORTED)
			_, ret = dev.CreateGpuInstance(&nvml.GpuInstanceProfileInfo{Id: 9})
			wantRet(t, "create", ret, nvml.ERROR_NOT_SUPPORTED)
		})
	}
}

// startOneGPU starts the library on one GPU of a built-in board with a
// live state, on the given driver (empty: the profile's); it returns the GPU.
func startOneGPU(t *testing.T, board, driver string) nvml.Device {
	t.Helper()
	p, err := profile.Builtin(board)
	if err != nil {
		t.Fatal(err)
	}
	p.GPUs = 1
	if driver != "" {
		if err := p.SetDriver(driver); err != nil {
			t.Fatal(err)
		}
	}
	path := testenv.SnapshotOf(t, p)
	testenv.LiveState(t, path, 1, t0)
	cleanEnv(t, path)
	lib := newLib(t)
	start(t, lib)
	return got(lib.DeviceGetHandleByIndex(0))(t, "handle")
}

// A MIG device's BAR1 is its share of the GPU's less 1 MiB through R570
// (an H100's 16383 MiB a memory slice), and what R580 shows from 580 on
// (6185 MiB for a 1g.10gb, 24740 for a 3g.40gb).
func TestMIGDeviceBAR1FollowsTheDriver(t *testing.T) {
	for _, c := range []struct {
		driver    string
		one, four uint64 // MiB
	}{
		{"", 6185, 24740}, // the profile's 580
		{"570.148.08", 16383, 65535},
	} {
		t.Run("driver "+c.driver, func(t *testing.T) {
			dev := startOneGPU(t, "h100", c.driver)
			enableMIG(t, dev)
			for _, e := range []int{nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE} {
				p := got(dev.GetGpuInstanceProfileInfo(e))(t, "profile")
				gi := got(dev.CreateGpuInstance(&p))(t, "create GPU instance")
				cp := got(gi.GetComputeInstanceProfileInfo(int(p.SliceCount)-1, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED))(t, "compute profile")
				got(gi.CreateComputeInstance(&cp))(t, "create compute instance")
			}
			for i, want := range []uint64{c.four, c.one} { // GPU-instance order: the 3g (id 2), then the 1g
				m := got(dev.GetMigDeviceHandleByIndex(i))(t, "MIG device")
				if b := got(m.GetBAR1MemoryInfo())(t, "BAR1"); b.Bar1Total != want<<20 || b.Bar1Free != b.Bar1Total {
					t.Errorf("MIG device %d BAR1: %+v, want %d MiB free", i, b, want)
				}
			}
		})
	}
}

// A real R580 A100-SXM4-40GB, made into a 4g.20gb, a 2g.10gb holding two
// 1c compute instances and a 1g.5gb (research/mig.md 9), shows BAR1
// totals of 12211, 6105 (each 1c) and 3052 MiB, at placements 0:4, 4:2
// and 6:1. So does a mock a100 on that driver; on the profile's 570 the
// share less 1 MiB stays. (Its GPU-instance ids, 2, 3 and 9, are not the
// placement's, as the mock's are: docs/mig.md.)
func TestMIGDeviceBAR1OfAnA100OnR580(t *testing.T) {
	for _, c := range []struct {
		driver string
		want   []uint64 // MiB, by MIG device
	}{
		{"580.126.09", []uint64{12211, 6105, 6105, 3052}},
		{"", []uint64{32767, 16383, 16383, 8191}},
	} {
		t.Run("driver "+c.driver, func(t *testing.T) {
			dev := startOneGPU(t, "a100", c.driver)
			enableMIG(t, dev)
			var starts []uint32
			for _, g := range []struct{ profile, ci, cis int }{
				{nvml.GPU_INSTANCE_PROFILE_4_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, 1},
				{nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 2},
				{nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 1},
			} {
				p := got(dev.GetGpuInstanceProfileInfo(g.profile))(t, "profile")
				gi := got(dev.CreateGpuInstance(&p))(t, "create GPU instance")
				starts = append(starts, got(gi.GetInfo())(t, "GPU instance info").Placement.Start)
				cp := got(gi.GetComputeInstanceProfileInfo(g.ci, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED))(t, "compute profile")
				for k := 0; k < g.cis; k++ {
					got(gi.CreateComputeInstance(&cp))(t, "create compute instance")
				}
			}
			if fmt.Sprint(starts) != "[0 4 6]" {
				t.Errorf("GPU instances at %v, want the real one's [0 4 6]", starts)
			}
			for i, want := range c.want {
				m := got(dev.GetMigDeviceHandleByIndex(i))(t, "MIG device")
				if b := got(m.GetBAR1MemoryInfo())(t, "BAR1"); b.Bar1Total != want<<20 {
					t.Errorf("MIG device %d BAR1 total %d MiB, want %d", i, b.Bar1Total>>20, want)
				}
			}
		})
	}
}

// A MIG device's name and its compute instance's profile name drop
// "+me", as a real R580 H100 lists its 1g.10gb+me in nvidia-smi -L and
// -lci; the GPU-instance profile keeps it.
func TestMIGDeviceNamesDropPlusMe(t *testing.T) {
	lib, _ := startMIG(t, 1)
	dev := got(lib.DeviceGetHandleByIndex(0))(t, "handle")
	enableMIG(t, dev)
	pme := got(dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1))(t, "1g+me info")
	if v := got(dev.GetGpuInstanceProfileInfoByIdV(int(pme.Id)).V2())(t, "1g+me by id"); cstr(v.Name[:]) != "MIG 1g.5gb+me" {
		t.Errorf("profile name %q, want MIG 1g.5gb+me", cstr(v.Name[:]))
	}
	gi := got(dev.CreateGpuInstance(&pme))(t, "create 1g+me")
	cp := got(gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED))(t, "ci info")
	if v := got(gi.GetComputeInstanceProfileInfoV(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 0).V2())(t, "ci info V2"); cstr(v.Name[:]) != "MIG 1g.5gb" {
		t.Errorf("compute profile name %q, want MIG 1g.5gb", cstr(v.Name[:]))
	}
	got(gi.CreateComputeInstance(&cp))(t, "create ci")
	m := got(dev.GetMigDeviceHandleByIndex(0))(t, "MIG 0")
	if n := got(m.GetName())(t, "name"); n != "NVIDIA A100-SXM4-40GB MIG 1g.5gb" {
		t.Errorf("MIG device name %q, want NVIDIA A100-SXM4-40GB MIG 1g.5gb", n)
	}
}

func must2(t *testing.T, lib nvml.Interface, i int) (int, int, nvml.Return) {
	t.Helper()
	dev := got(lib.DeviceGetHandleByIndex(i))(t, "handle")
	return dev.GetMigMode()
}

func TestMIGInstancesAndDevices(t *testing.T) {
	lib, _ := startMIG(t, 1)
	dev := got(lib.DeviceGetHandleByIndex(0))(t, "handle")
	enableMIG(t, dev)
	p3 := got(dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE))(t, "3g info")
	p1 := got(dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE))(t, "1g info")
	p7 := got(dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_7_SLICE))(t, "7g info")

	// The driver fills from the top: the first 3g takes slices 4-7, id 2.
	gi3 := got(dev.CreateGpuInstance(&p3))(t, "create 3g")
	info := got(gi3.GetInfo())(t, "3g info")
	if info.Id != 2 || info.ProfileId != 9 || info.Placement.Start != 4 || info.Placement.Size != 4 {
		t.Errorf("3g instance: %+v", info)
	}
	_, ret := dev.CreateGpuInstance(&p7)
	wantRet(t, "7g over a 3g", ret, nvml.ERROR_INSUFFICIENT_RESOURCES)
	_, ret = dev.CreateGpuInstanceWithPlacement(&p1, &nvml.GpuInstancePlacement{Start: 5, Size: 1})
	wantRet(t, "1g placed inside the 3g", ret, nvml.ERROR_INSUFFICIENT_RESOURCES)
	_, ret = dev.CreateGpuInstanceWithPlacement(&p1, &nvml.GpuInstancePlacement{Start: 7, Size: 1})
	wantRet(t, "1g at slice 7", ret, nvml.ERROR_INVALID_ARGUMENT)
	gi1 := got(dev.CreateGpuInstanceWithPlacement(&p1, &nvml.GpuInstancePlacement{Start: 2, Size: 1}))(t, "1g at 2")
	if i := got(gi1.GetInfo())(t, "1g info"); i.Id != 9 {
		t.Errorf("1g at slice 2 is GPU instance %d, want 9", i.Id)
	}
	if n := got(dev.GetGpuInstanceRemainingCapacity(&p1))(t, "capacity 1g"); n != 3 {
		t.Errorf("1g capacity: %d, want 3 (slices 0, 1, 3)", n)
	}
	if n := got(dev.GetGpuInstanceRemainingCapacity(&p3))(t, "capacity 3g"); n != 0 {
		t.Errorf("3g capacity: %d, want 0", n)
	}
	if gis := got(dev.GetGpuInstances(&p1))(t, "list 1g"); len(gis) != 1 {
		t.Errorf("1g instances: %d", len(gis))
	}

	// Compute instances: a 1c and a 2c in the 3g.
	c1 := got(gi3.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED))(t, "1c info")
	c2 := got(gi3.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED))(t, "2c info")
	if c1.MultiprocessorCount != 14 || c1.InstanceCount != 3 || c1.SharedCopyEngineCount != 3 || c2.MultiprocessorCount != 28 {
		t.Errorf("3g's compute profiles: %+v %+v", c1, c2)
	}
	_, ret = gi3.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	wantRet(t, "4c in a 3g", ret, nvml.ERROR_NOT_SUPPORTED)
	// A profile the GPU instance cannot hold is not supported there (nvml.h),
	// in every call that takes one.
	_, ret = gi1.CreateComputeInstance(&c2)
	wantRet(t, "2c in a 1g", ret, nvml.ERROR_NOT_SUPPORTED)
	_, ret = gi1.GetComputeInstanceRemainingCapacity(&c2)
	wantRet(t, "capacity of 2c in a 1g", ret, nvml.ERROR_NOT_SUPPORTED)
	_, ret = gi1.GetComputeInstancePossiblePlacements(&c2)
	wantRet(t, "placements of 2c in a 1g", ret, nvml.ERROR_NOT_SUPPORTED)
	if v := got(gi3.GetComputeInstanceProfileInfoV(0, 0).V2())(t, "1c V2"); cstr(v.Name[:]) != "MIG 1c.3g.20gb" {
		t.Errorf("1c name %q", cstr(v.Name[:]))
	}
	ci2 := got(gi3.CreateComputeInstance(&c2))(t, "create 2c")
	ci1 := got(gi3.CreateComputeInstance(&c1))(t, "create 1c")
	_, ret = gi3.CreateComputeInstance(&c1)
	wantRet(t, "a second 1c in a full 3g", ret, nvml.ERROR_INSUFFICIENT_RESOURCES)
	if i := got(ci1.GetInfo())(t, "1c info"); i.Id != 1 || i.Placement.Start != 2 || i.Placement.Size != 1 || i.ProfileId != 0 {
		t.Errorf("1c: %+v", i)
	}
	wantRet(t, "destroy a GPU instance in use", gi3.Destroy(), nvml.ERROR_IN_USE)
	_, ret = dev.SetMigMode(nvml.DEVICE_MIG_DISABLE)
	wantRet(t, "disable with instances", ret, nvml.ERROR_IN_USE)

	// MIG devices, in GPU-instance then compute-instance order.
	if n := got(dev.GetMaxMigDeviceCount())(t, "max"); n != 7 {
		t.Errorf("max MIG devices %d", n)
	}
	m0 := got(dev.GetMigDeviceHandleByIndex(0))(t, "MIG 0")
	m1 := got(dev.GetMigDeviceHandleByIndex(1))(t, "MIG 1")
	_, ret = dev.GetMigDeviceHandleByIndex(2)
	wantRet(t, "MIG 2 (the 1g has no compute instance)", ret, nvml.ERROR_NOT_FOUND)
	if is := got(m0.IsMigDeviceHandle())(t, "is MIG"); !is {
		t.Error("MIG handle is not one")
	}
	if is := got(dev.IsMigDeviceHandle())(t, "is MIG"); is {
		t.Error("GPU handle is a MIG handle")
	}
	if n := got(m0.GetName())(t, "name"); n != "NVIDIA A100-SXM4-40GB MIG 2c.3g.20gb" {
		t.Errorf("MIG 0 name %q", n)
	}
	if n := got(m1.GetName())(t, "name"); n != "NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb" {
		t.Errorf("MIG 1 name %q", n)
	}
	gi, _ := m1.GetGpuInstanceId()
	ci, _ := m1.GetComputeInstanceId()
	if gi != 2 || ci != 1 {
		t.Errorf("MIG 1 ids %d/%d, want 2/1", gi, ci)
	}
	_, ret = dev.GetGpuInstanceId()
	wantRet(t, "GPU instance id of a GPU", ret, nvml.ERROR_NOT_SUPPORTED)
	if p := got(m1.GetDeviceHandleFromMigDeviceHandle())(t, "parent"); p != dev {
		t.Error("parent is not GPU 0")
	}
	uuid := got(m1.GetUUID())(t, "uuid")
	if !regexp.MustCompile(`^MIG-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(uuid) {
		t.Errorf("MIG UUID %q", uuid)
	}
	if h := got(lib.DeviceGetHandleByUUID(uuid))(t, "by uuid"); h != m1 {
		t.Error("by UUID is another handle")
	}
	// The form of drivers before R470, which NVML still takes.
	if h := got(lib.DeviceGetHandleByUUID("MIG-"+got(dev.GetUUID())(t, "GPU uuid")+"/2/1"))(t, "by MIG-GPU- uuid"); h != m1 {
		t.Error("by MIG-GPU-<uuid>/2/1 is another handle")
	}
	var bin nvml.UUID
	bin.Version, bin.Type = nvml.STRUCT_VERSION(bin, 1), uint32(nvml.UUID_TYPE_BINARY)
	raw, _ := hex.DecodeString(strings.ReplaceAll(strings.TrimPrefix(uuid, "MIG-"), "-", ""))
	copy(bin.Value[:], raw)
	if h := got(lib.DeviceGetHandleByUUIDV(&bin))(t, "by the MIG UUID's bytes"); h != m1 {
		t.Error("by the MIG UUID's bytes is another handle")
	}
	_, ret = lib.DeviceGetHandleByUUID("MIG-" + got(dev.GetUUID())(t, "GPU uuid") + "/2/7")
	wantRet(t, "MIG-GPU-<uuid>/2/7, no such compute instance", ret, nvml.ERROR_NOT_FOUND)
	// QA: an id past 32 bits wrapped to 2 and found GPU instance 2.
	_, ret = lib.DeviceGetHandleByUUID("MIG-" + got(dev.GetUUID())(t, "GPU uuid") + "/4294967298/1")
	wantRet(t, "MIG-GPU-<uuid>/4294967298/1, an id past 32 bits", ret, nvml.ERROR_NOT_FOUND)
	// A MIG device counts uncorrectable volatile errors outside DRAM only.
	if n := got(m1.GetMemoryErrorCounter(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC, nvml.MEMORY_LOCATION_SRAM))(t, "SRAM errors"); n != 0 {
		t.Errorf("MIG SRAM uncorrectable volatile errors %d, want 0", n)
	}
	_, ret = m1.GetMemoryErrorCounter(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.AGGREGATE_ECC, nvml.MEMORY_LOCATION_SRAM)
	wantRet(t, "MIG corrected aggregate errors", ret, nvml.ERROR_NOT_SUPPORTED)
	_, ret = m1.GetMemoryErrorCounter(99, nvml.VOLATILE_ECC, nvml.MEMORY_LOCATION_SRAM)
	wantRet(t, "MIG errors of an unknown type", ret, nvml.ERROR_INVALID_ARGUMENT)
	// nvmock's tools (the NRI plugin) name MIG devices as the library does.
	gpuUUID := got(dev.GetUUID())(t, "GPU uuid")
	if w := live.MIGUUID(gpuUUID, 2, 1); w != uuid {
		t.Errorf("live.MIGUUID(GPU 0, 2, 1) = %s, the library says %s", w, uuid)
	}
	a := got(m1.GetAttributes())(t, "attributes")
	if a.MultiprocessorCount != 14 || a.GpuInstanceSliceCount != 3 || a.ComputeInstanceSliceCount != 1 || a.MemorySizeMB != 20096 || a.SharedDecoderCount != 2 {
		t.Errorf("attributes %+v", a)
	}
	if mem := got(m1.GetMemoryInfo())(t, "memory"); mem.Total != 20096<<20 {
		t.Errorf("MIG memory %+v", mem)
	}
	_, ret = m1.GetTemperature(nvml.TEMPERATURE_GPU)
	wantRet(t, "temperature of a MIG device", ret, nvml.ERROR_NOT_SUPPORTED)

	// Node state: another process sees the layout.
	cmd := exec.Command(testenv.NvidiaSMI(t), "-L")
	cmd.Env = testenv.Env(t, os.Getenv("NVMOCK_SNAPSHOT"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "MIG 1c.3g.20gb  Device  1: (UUID: "+uuid+")") {
		t.Errorf("nvidia-smi -L in another process (%v):\n%s", err, out)
	}
	wantRet(t, "destroy 2c", ci2.Destroy(), nvml.SUCCESS)
	wantRet(t, "destroy 1c", ci1.Destroy(), nvml.SUCCESS)
	_, ret = ci1.GetInfo()
	wantRet(t, "a destroyed compute instance", ret, nvml.ERROR_INVALID_ARGUMENT)
	_, ret = m1.GetName()
	wantRet(t, "a destroyed MIG device", ret, nvml.ERROR_INVALID_ARGUMENT)
	wantRet(t, "destroy 3g", gi3.Destroy(), nvml.SUCCESS)
	wantRet(t, "destroy 1g", gi1.Destroy(), nvml.SUCCESS)
	act, ret := dev.SetMigMode(nvml.DEVICE_MIG_DISABLE)
	if ret != nvml.SUCCESS || act != nvml.SUCCESS {
		t.Errorf("disable: %v %v", ret, act)
	}
}

// With a process on the GPU the change stays pending, as when the driver
// cannot reset a busy GPU.
func TestMIGModeStaysPendingOnABusyGPU(t *testing.T) {
	lib, f := startMIG(t, 1)
	err := f.Update(func(s *live.State, now int64) error {
		return s.AddProcess(live.Process{PID: uint32(os.Getpid()), GPU: 0, Type: 1, Name: "python3", PIDNS: live.PIDNamespace()}, now)
	})
	if err != nil {
		t.Fatal(err)
	}
	dev := got(lib.DeviceGetHandleByIndex(0))(t, "handle")
	act, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	if ret != nvml.SUCCESS || act != nvml.ERROR_IN_USE {
		t.Fatalf("SetMigMode: %v, activation %v; want SUCCESS, IN_USE", ret, act)
	}
	if cur, pend, _ := dev.GetMigMode(); cur != 0 || pend != 1 {
		t.Errorf("busy GPU: current %d pending %d, want 0 1", cur, pend)
	}
}

// Without a writable state MIG changes are refused, as for a non-root
// user on a real node; boards without MIG say NOT_SUPPORTED.
func TestMIGRefusals(t *testing.T) {
	path, _ := testenv.Snapshot(t, "a100", 1)
	cleanEnv(t, path)
	lib := newLib(t)
	start(t, lib)
	dev := got(lib.DeviceGetHandleByIndex(0))(t, "handle")
	_, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	wantRet(t, "SetMigMode without a state file", ret, nvml.ERROR_NO_PERMISSION)
}

func TestMIGOnABoardWithoutIt(t *testing.T) {
	path, _ := testenv.Snapshot(t, "l40s", 1)
	testenv.LiveState(t, path, 1, t0)
	cleanEnv(t, path)
	lib := newLib(t)
	start(t, lib)
	dev := got(lib.DeviceGetHandleByIndex(0))(t, "handle")
	_, _, ret := dev.GetMigMode()
	wantRet(t, "GetMigMode", ret, nvml.ERROR_NOT_SUPPORTED)
	_, ret = dev.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	wantRet(t, "SetMigMode", ret, nvml.ERROR_NOT_SUPPORTED)
	_, ret = dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	wantRet(t, "profile info", ret, nvml.ERROR_NOT_SUPPORTED)
	_, ret = dev.GetMigDeviceHandleByIndex(0)
	wantRet(t, "MIG handle", ret, nvml.ERROR_NOT_SUPPORTED)
	if n := got(dev.GetMaxMigDeviceCount())(t, "max"); n != 0 {
		t.Errorf("max MIG devices %d, want 0", n)
	}
}

// nvmock's own tools (live.ApplyMIGLayout, for install layouts) place
// instances where the library does: the same layout made both ways gives
// the same instances.
func TestMIGLayoutsFromToolsMatchTheLibrary(t *testing.T) {
	lib, f := startMIG(t, 2)
	p := testenv.Profile(t, "a100", 2)
	devs := snapshotDevices(t)
	for _, spec := range []string{"all-balanced", "all-1g.5gb", "4g.20gb,1g.5gb*3", "1g.10gb*2,2g.10gb,1g.5gb", "7g.40gb"} {
		l, err := profile.ParseMIGLayout("1="+spec, p.Board.Modes.MIG, 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Update(func(s *live.State, _ int64) error {
			for i := range 2 {
				if err := s.ClearMIG(i, false); err != nil {
					return err
				}
			}
			return s.ApplyMIGLayout(devs, l)
		}); err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		dev := got(lib.DeviceGetHandleByIndex(0))(t, "GPU 0")
		enableMIG(t, dev)
		names := live.MIGNames(&devs[0])
		for _, name := range l.GPUs[1].Instances {
			e := map[string]int{"1g.5gb": 0, "1g.10gb": 9, "2g.10gb": 1, "3g.20gb": 2, "4g.20gb": 3, "7g.40gb": 4}[name]
			info := got(dev.GetGpuInstanceProfileInfo(e))(t, name)
			gi := got(dev.CreateGpuInstance(&info))(t, "create "+name)
			whole := map[uint32]int{1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[info.SliceCount] // COMPUTE_INSTANCE_PROFILE_<n>_SLICE
			ci := got(gi.GetComputeInstanceProfileInfo(whole, 0))(t, "ci profile")
			got(gi.CreateComputeInstance(&ci))(t, "create ci")
		}
		s := f.Read()
		if a, b := s.GPUs[0].GIProfile, s.GPUs[1].GIProfile; a != b || s.GPUs[0].GIStart != s.GPUs[1].GIStart ||
			s.GPUs[0].CISlices != s.GPUs[1].CISlices || s.GPUs[0].CIStart != s.GPUs[1].CIStart {
			t.Errorf("%s: library %v at %v, tools %v at %v (rows of %v)", spec, a, s.GPUs[0].GIStart, b, s.GPUs[1].GIStart, names)
		}
	}
}

func snapshotDevices(t *testing.T) []snapshot.Device {
	t.Helper()
	data, err := os.ReadFile(os.Getenv("NVMOCK_SNAPSHOT"))
	if err != nil {
		t.Fatal(err)
	}
	_, devs, err := snapshot.Read(data)
	if err != nil {
		t.Fatal(err)
	}
	return devs
}

// balancedA100 is the snapshot of a 2-GPU a100 node whose GPUs are
// partitioned all-balanced in its live state: four MIG devices each.
func balancedA100(t *testing.T) string {
	t.Helper()
	path, _ := testenv.Snapshot(t, "a100", 2)
	f := testenv.LiveState(t, path, 2, t0)
	p := testenv.Profile(t, "a100", 2)
	l, err := profile.ParseMIGLayout("all-balanced", p.Board.Modes.MIG, 2)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, devs, _ := snapshot.Read(data)
	if err := f.Update(func(s *live.State, _ int64) error { return s.ApplyMIGLayout(devs, l) }); err != nil {
		t.Fatal(err)
	}
	return path
}

// devNodes makes empty files standing for device nodes under root.
func devNodes(t *testing.T, root string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, n)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, n), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
}

// A process sees the MIG devices whose capability nodes it has, as a
// container given one MIG device does (the runtime gives it the GPU's node
// and the two capability nodes): that one, as MIG device 0 of its GPU.
func TestMIGDevicesAreThoseWhoseCapabilityNodesTheProcessHas(t *testing.T) {
	root := cleanEnv(t, balancedA100(t))
	// GPU 1's 2g.10gb: GPU instance 3 (slices 0-1), compute instance 0.
	devNodes(t, root, "nvidiactl", "nvidia1", "nvidia-caps/nvidia-cap"+strconv.Itoa(hostprep.MIGCapMinor(1, 3, -1)),
		"nvidia-caps/nvidia-cap"+strconv.Itoa(hostprep.MIGCapMinor(1, 3, 0)))
	lib := newLib(t)
	start(t, lib)
	if n := got(lib.DeviceGetCount())(t, "count"); n != 1 {
		t.Fatalf("%d GPUs, want GPU 1 alone", n)
	}
	dev := got(lib.DeviceGetHandleByIndex(0))(t, "GPU")
	m := got(dev.GetMigDeviceHandleByIndex(0))(t, "MIG device 0")
	if n := got(m.GetName())(t, "name"); n != "NVIDIA A100-SXM4-40GB MIG 2g.10gb" {
		t.Errorf("the one MIG device is %q, want the 2g.10gb", n)
	}
	if i := got(m.GetIndex())(t, "index"); i != 0 {
		t.Errorf("its index is %d, want 0", i)
	}
	_, ret := dev.GetMigDeviceHandleByIndex(1)
	wantRet(t, "MIG device 1", ret, nvml.ERROR_NOT_FOUND)
}

// A container given a GPU in MIG mode whole (its node, no capability
// node) sees the GPU without MIG devices, as with NVIDIA's runtime; one
// with the MIG monitor capability (nvidia-cap2: a MIG-capable host, or
// NVIDIA_MIG_MONITOR_DEVICES=all) sees every MIG device.
func TestMIGDevicesWithoutCapabilityNodesOrWithTheMonitor(t *testing.T) {
	for _, c := range []struct {
		name  string
		nodes []string
		want  int
	}{
		{"the GPU alone", []string{"nvidiactl", "nvidia1"}, 0},
		{"the GPU and the monitor capability", []string{"nvidiactl", "nvidia1", "nvidia-caps/nvidia-cap2"}, 4},
		{"the GPU and the config capability alone", []string{"nvidiactl", "nvidia1", "nvidia-caps/nvidia-cap1"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := cleanEnv(t, balancedA100(t))
			devNodes(t, root, c.nodes...)
			lib := newLib(t)
			start(t, lib)
			dev := got(lib.DeviceGetHandleByIndex(0))(t, "GPU")
			n := 0
			for i := 0; i < 7; i++ {
				if _, ret := dev.GetMigDeviceHandleByIndex(i); ret == nvml.SUCCESS {
					n++
				} else {
					wantRet(t, fmt.Sprintf("MIG device %d", i), ret, nvml.ERROR_NOT_FOUND)
				}
			}
			if n != c.want {
				t.Errorf("%d MIG devices, want %d", n, c.want)
			}
		})
	}
}
