//go:build integration

package gonvml

import (
	"fmt"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
)

func TestInitRefcounting(t *testing.T) {
	path, p := testenv.Snapshot(t, "a100", 0)
	cleanEnv(t, path)

	// go-nvml binds the C symbols only once the library is loaded, and loads
	// it only in Init. Load it here first, as a process that links
	// libnvidia-ml directly would have it, so calls before Init reach it.
	h := dl.New(testenv.Lib(t), dl.RTLD_LAZY|dl.RTLD_GLOBAL)
	if err := h.Open(); err != nil {
		t.Fatalf("dlopen %s: %v", testenv.Lib(t), err)
	}
	t.Cleanup(func() { h.Close() })

	lib := newLib(t)
	uninitialized := func(when string) {
		t.Helper()
		_, ret := lib.DeviceGetCount()
		checkRet(t, "DeviceGetCount "+when, ret, nvml.ERROR_UNINITIALIZED)
		_, ret = lib.DeviceGetHandleByIndex(0)
		checkRet(t, "DeviceGetHandleByIndex(0) "+when, ret, nvml.ERROR_UNINITIALIZED)
		_, ret = lib.SystemGetDriverVersion()
		checkRet(t, "SystemGetDriverVersion "+when, ret, nvml.ERROR_UNINITIALIZED)
		_, ret = lib.EventSetCreate()
		checkRet(t, "EventSetCreate "+when, ret, nvml.ERROR_UNINITIALIZED)
	}
	works := func(when string) nvml.Device {
		t.Helper()
		n, ret := lib.DeviceGetCount()
		check(t, "DeviceGetCount "+when, n, ret, p.GPUs)
		d, ret := lib.DeviceGetHandleByIndex(0)
		if ret != nvml.SUCCESS {
			t.Fatalf("DeviceGetHandleByIndex(0) %s: %v", when, ret)
		}
		u, ret := d.GetUUID()
		check(t, "GetUUID "+when, u, ret, snapshot.UUID(p.Name, testenv.Seed, 0))
		return d
	}

	uninitialized("before Init")
	checkRet(t, "first Init", lib.Init(), nvml.SUCCESS)
	d := works("after Init")
	checkRet(t, "nested Init", lib.Init(), nvml.SUCCESS)
	works("after the nested Init")
	checkRet(t, "Shutdown of the nested Init", lib.Shutdown(), nvml.SUCCESS)
	works("after one Shutdown of two Inits")
	u, ret := d.GetUUID()
	check(t, "GetUUID of a handle taken before the inner Shutdown", u, ret, snapshot.UUID(p.Name, testenv.Seed, 0))
	checkRet(t, "final Shutdown", lib.Shutdown(), nvml.SUCCESS)
	uninitialized("after the final Shutdown")
	_, ret = d.GetUUID()
	checkRet(t, "GetUUID of a handle after the final Shutdown", ret, nvml.ERROR_UNINITIALIZED)
	// go-nvml answers this one itself: its own count is 0.
	checkRet(t, "extra Shutdown", lib.Shutdown(), nvml.ERROR_UNINITIALIZED)

	t.Run("an extra Shutdown reaching the library is UNINITIALIZED", func(t *testing.T) {
		// go-nvml counts a load even when nvmlInit fails, so after a failed
		// Init its Shutdown calls the library's nvmlShutdown with the
		// library's count at 0. (The instance keeps one load; that is go-nvml's.)
		t.Setenv("NVMOCK_SNAPSHOT", filepath.Join(t.TempDir(), "absent"))
		failed := newLib(t)
		checkRet(t, "Init on a missing snapshot", failed.Init(), nvml.ERROR_UNKNOWN)
		checkRet(t, "nvmlShutdown with nothing initialised", failed.Shutdown(), nvml.ERROR_UNINITIALIZED)
	})

	t.Run("Init works again after a full Shutdown", func(t *testing.T) {
		again := newLib(t)
		start(t, again)
		n, ret := again.DeviceGetCount()
		check(t, "DeviceGetCount", n, ret, p.GPUs)
	})
}

var uuidRE = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestDeviceCountHasNoCap(t *testing.T) {
	for _, n := range []int{1, 8, 64} {
		t.Run(fmt.Sprintf("%d GPUs", n), func(t *testing.T) {
			lib, p := startSnapshot(t, n)
			count, ret := lib.DeviceGetCount()
			check(t, "DeviceGetCount", count, ret, n)
			uuids, buses := map[string]int{}, map[string]int{}
			for i := 0; i < count; i++ {
				d, ret := lib.DeviceGetHandleByIndex(i)
				if ret != nvml.SUCCESS {
					t.Fatalf("DeviceGetHandleByIndex(%d): %v", i, ret)
				}
				u, ret := d.GetUUID()
				check(t, fmt.Sprintf("GPU %d GetUUID", i), u, ret, snapshot.UUID(p.Name, testenv.Seed, i))
				if !uuidRE.MatchString(u) {
					t.Errorf("GPU %d UUID %q does not match %s", i, u, uuidRE)
				}
				if j, dup := uuids[u]; dup {
					t.Errorf("GPUs %d and %d share UUID %s", j, i, u)
				}
				uuids[u] = i
				pci, ret := d.GetPciInfo()
				bus := cstr(pci.BusId[:])
				check(t, fmt.Sprintf("GPU %d bus id", i), bus, ret, snapshot.BusID(p, i))
				if j, dup := buses[bus]; dup {
					t.Errorf("GPUs %d and %d share bus id %s", j, i, bus)
				}
				buses[bus] = i
			}
			last := snapshot.BusID(p, n-1)
			d, ret := lib.DeviceGetHandleByPciBusId(last)
			if ret != nvml.SUCCESS {
				t.Fatalf("DeviceGetHandleByPciBusId(%s): %v", last, ret)
			}
			idx, ret := d.GetIndex()
			check(t, "index of the handle by bus id "+last, idx, ret, n-1)
		})
	}
}

// visibleGPU is what one visible GPU reports.
