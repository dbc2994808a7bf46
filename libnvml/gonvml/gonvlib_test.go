//go:build integration

package gonvml

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// TestGoNvlibWalksDevicesAsNvidiaToolsDo drives the mock through go-nvlib,
// the library nvidia-ctk, the device plugin and feature discovery use to
// enumerate GPUs, including their walk over MIG slots.
func TestGoNvlibWalksDevicesAsNvidiaToolsDo(t *testing.T) {
	snap, p := testenv.Snapshot(t, "a100", 0)
	t.Setenv("NVMOCK_SNAPSHOT", snap)
	t.Setenv("NVMOCK_DEV_ROOT", t.TempDir())
	t.Setenv("NVMOCK_VISIBLE_DEVICES", "")
	lib := nvml.New(nvml.WithLibraryPath(testenv.Lib(t)))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	defer lib.Shutdown()

	devlib := device.New(lib)
	devs, err := devlib.GetDevices()
	if err != nil {
		t.Fatalf("GetDevices: %v", err)
	}
	if len(devs) != p.GPUs {
		t.Fatalf("%d devices, want %d", len(devs), p.GPUs)
	}
	ids := snapshot.Identities(p, testenv.Seed)
	for i, d := range devs {
		arch, err := d.GetArchitectureAsString()
		if err != nil || arch != p.Board.Architecture {
			t.Errorf("gpu %d architecture %q, %v", i, arch, err)
		}
		// go-nvlib spells NVML_BRAND_NVIDIA "Nvidia".
		brand, err := d.GetBrandAsString()
		if err != nil || !strings.EqualFold(brand, p.Board.Brand) {
			t.Errorf("gpu %d brand %q, %v", i, brand, err)
		}
		cc, err := d.GetCudaComputeCapabilityAsString()
		if err != nil || cc != p.Board.ComputeCapability {
			t.Errorf("gpu %d compute capability %q, %v", i, cc, err)
		}
		// go-nvlib lower-cases the bus id and drops the leading 0000.
		want := strings.ToLower(ids[i].BusID[4:])
		if bus, err := d.GetPCIBusID(); err != nil || bus != want {
			t.Errorf("gpu %d bus id %q, %v; want %q", i, bus, err, want)
		}
		if capable, err := d.IsMigCapable(); err != nil || capable != (p.Board.Modes.MIG != nil) {
			t.Errorf("gpu %d MIG capable %v, %v", i, capable, err)
		}
		if enabled, err := d.IsMigEnabled(); err != nil || enabled {
			t.Errorf("gpu %d MIG enabled %v, %v", i, enabled, err)
		}
		if fabric, err := d.IsFabricAttached(); err != nil || fabric {
			t.Errorf("gpu %d fabric attached %v, %v", i, fabric, err)
		}
		if _, err := d.IsCoherent(); err != nil {
			t.Errorf("gpu %d IsCoherent: %v", i, err)
		}
		// nvidia-ctk's CDI generation walks every MIG slot; an error here
		// fails `nvidia-ctk cdi generate`.
		if migs, err := d.GetMigDevices(); err != nil || len(migs) != 0 {
			t.Errorf("gpu %d MIG devices %d, %v", i, len(migs), err)
		}
	}
	if err := devlib.VisitMigDevices(func(int, device.Device, int, device.MigDevice) error { return nil }); err != nil {
		t.Errorf("VisitMigDevices: %v", err)
	}
}
