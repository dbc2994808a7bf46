//go:build integration

package gonvml

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/libnvml/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/profile"
	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// The library reads its environment at nvmlInit when it is not initialised,
// so each test sets the environment with t.Setenv and inits go-nvml after.
// go-nvml keeps one refcount per nvml.New instance over the single
// process-wide library; every test shuts its instances down before it ends.

// unsetenv removes key for the rest of the test (t.Setenv restores it).
func unsetenv(t testing.TB, key string) {
	t.Helper()
	t.Setenv(key, "")
	os.Unsetenv(key)
}

// cleanEnv points the library at snapshotPath (unset when empty) with an
// empty dev root, so the host's /dev cannot filter, and no
// NVIDIA_VISIBLE_DEVICES. It returns the dev root.
func cleanEnv(t testing.TB, snapshotPath string) string {
	t.Helper()
	if snapshotPath == "" {
		unsetenv(t, "NVMOCK_SNAPSHOT")
	} else {
		t.Setenv("NVMOCK_SNAPSHOT", snapshotPath)
	}
	root := t.TempDir()
	t.Setenv("NVMOCK_DEV_ROOT", root)
	unsetenv(t, "NVIDIA_VISIBLE_DEVICES")
	unsetenv(t, "NVMOCK_TRACE")
	return root
}

// newLib is a fresh go-nvml instance on the built mock.
func newLib(t testing.TB) nvml.Interface {
	t.Helper()
	return nvml.New(nvml.WithLibraryPath(testenv.Lib(t)))
}

// start inits lib and shuts it down when the test ends.
func start(t testing.TB, lib nvml.Interface) {
	t.Helper()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	t.Cleanup(func() {
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			t.Errorf("Shutdown: %v", ret)
		}
	})
}

// startSnapshot compiles the a100 profile with n GPUs (0: the profile's
// count), inits a fresh go-nvml on it, and returns the profile.
func startSnapshot(t testing.TB, n int) (nvml.Interface, *profile.Profile) {
	t.Helper()
	path, p := testenv.Snapshot(t, "a100", n)
	cleanEnv(t, path)
	lib := newLib(t)
	start(t, lib)
	return lib, p
}

func cstr(b []int8) string {
	var s []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// check expects SUCCESS and want.
func check[T comparable](t *testing.T, what string, got T, ret nvml.Return, want T) {
	t.Helper()
	if ret != nvml.SUCCESS {
		t.Errorf("%s: %v, want %v", what, ret, want)
	} else if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// checkOpt expects want, or NOT_SUPPORTED where the profile says N/A (nil).
func checkOpt[T comparable](t *testing.T, what string, got T, ret nvml.Return, want *T) {
	t.Helper()
	if want == nil {
		checkRet(t, what, ret, nvml.ERROR_NOT_SUPPORTED)
		return
	}
	check(t, what, got, ret, *want)
}

func checkRet(t *testing.T, what string, got, want nvml.Return) {
	t.Helper()
	if got != want {
		t.Errorf("%s: returned %v (%d), want %v (%d)", what, got, int32(got), want, int32(want))
	}
}

// optStr is nil for a string the profile leaves out (N/A).
func optStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// milliwatts is how the snapshot compiler turns the profile's watts into NVML's mW.
func milliwatts(w *float64) *uint32 {
	if w == nil {
		return nil
	}
	v := uint32(math.Round(*w * 1000))
	return &v
}

func clockOf(c profile.ClockSet, ct nvml.ClockType) *uint32 {
	switch ct {
	case nvml.CLOCK_GRAPHICS:
		return c.Graphics
	case nvml.CLOCK_SM:
		return c.SM
	case nvml.CLOCK_MEM:
		return c.Memory
	case nvml.CLOCK_VIDEO:
		return c.Video
	}
	panic(fmt.Sprintf("clock type %d", ct))
}

// graphicsClocks lists the graphics clocks the profile allows at one memory
// clock: explicit, or a range expanded from max down to min by step.
func graphicsClocks(s profile.SupportedClocks) []uint32 {
	if len(s.Graphics) > 0 {
		return s.Graphics
	}
	var out []uint32
	for f := s.Max; f >= s.Min && f > 0; f -= s.Step {
		out = append(out, f)
		if f < s.Step {
			break
		}
	}
	return out
}

func enableState(b bool) nvml.EnableState {
	if b {
		return nvml.FEATURE_ENABLED
	}
	return nvml.FEATURE_DISABLED
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

var clockTypes = []nvml.ClockType{nvml.CLOCK_GRAPHICS, nvml.CLOCK_SM, nvml.CLOCK_MEM, nvml.CLOCK_VIDEO}

func TestGettersMatchProfile(t *testing.T) {
	lib, p := startSnapshot(t, 0)
	b := &p.Board
	topo := &p.Topology

	n, ret := lib.DeviceGetCount()
	check(t, "DeviceGetCount", n, ret, p.GPUs)

	t.Run("system", func(t *testing.T) {
		v, ret := lib.SystemGetDriverVersion()
		check(t, "SystemGetDriverVersion", v, ret, p.Driver.Version)
		v, ret = lib.SystemGetNVMLVersion()
		check(t, "SystemGetNVMLVersion", v, ret, p.Driver.NVMLVersion)
		cuda, err := profile.CUDAVersionNumber(p.Driver.CUDAVersion)
		if err != nil {
			t.Fatal(err)
		}
		c, ret := lib.SystemGetCudaDriverVersion()
		check(t, "SystemGetCudaDriverVersion", c, ret, int(cuda))
	})

	t.Run("error strings come from the library", func(t *testing.T) {
		codes := []nvml.Return{
			nvml.SUCCESS, nvml.ERROR_UNINITIALIZED, nvml.ERROR_INVALID_ARGUMENT, nvml.ERROR_NOT_SUPPORTED,
			nvml.ERROR_NO_PERMISSION, nvml.ERROR_ALREADY_INITIALIZED, nvml.ERROR_NOT_FOUND,
			nvml.ERROR_INSUFFICIENT_SIZE, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_TIMEOUT,
			nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_GPU_IS_LOST,
			nvml.ERROR_MEMORY, nvml.ERROR_NO_DATA, nvml.ERROR_ARGUMENT_VERSION_MISMATCH, nvml.ERROR_UNKNOWN,
		}
		seen := map[string]nvml.Return{}
		for _, r := range codes {
			s := lib.ErrorString(r)
			// go-nvml's own fallback (used when no library is loaded) spells the
			// constant's name; the library's strings are prose.
			if s == "" || strings.HasPrefix(s, "ERROR_") || s == "SUCCESS" || strings.HasPrefix(s, "unknown return value") {
				t.Errorf("ErrorString(%d) = %q, want the library's own text", int32(r), s)
			}
			if prev, dup := seen[s]; dup {
				t.Errorf("ErrorString(%d) = ErrorString(%d) = %q", int32(r), int32(prev), s)
			}
			seen[s] = r
		}
		if s := lib.ErrorString(nvml.Return(12345)); s == "" {
			t.Errorf("ErrorString(12345) is empty")
		}
	})

	devs := make([]nvml.Device, p.GPUs)
	for i := range devs {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Fatalf("DeviceGetHandleByIndex(%d): %v", i, ret)
		}
		devs[i] = d
	}
	if _, ret := lib.DeviceGetHandleByIndex(p.GPUs); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("DeviceGetHandleByIndex(%d) past the count: %v, want ERROR_INVALID_ARGUMENT", p.GPUs, ret)
	}

	for i, d := range devs {
		uuid := snapshot.UUID(p.Name, testenv.Seed, i)
		serial := snapshot.Serial(b.SerialPrefix, p.Name, testenv.Seed, i)
		busID := snapshot.BusID(p, i)
		t.Run(fmt.Sprintf("gpu %d", i), func(t *testing.T) {
			t.Run("handles", func(t *testing.T) {
				lookups := []struct {
					by string
					fn func() (nvml.Device, nvml.Return)
				}{
					{"UUID " + uuid, func() (nvml.Device, nvml.Return) { return lib.DeviceGetHandleByUUID(uuid) }},
					{"serial " + serial, func() (nvml.Device, nvml.Return) { return lib.DeviceGetHandleBySerial(serial) }},
					{"bus id " + busID, func() (nvml.Device, nvml.Return) { return lib.DeviceGetHandleByPciBusId(busID) }},
					// 0000:07:00.0, the 4-digit-domain spelling lspci and sysfs use.
					{"bus id " + busID[4:], func() (nvml.Device, nvml.Return) { return lib.DeviceGetHandleByPciBusId(busID[4:]) }},
					{"bus id " + strings.ToLower(busID), func() (nvml.Device, nvml.Return) {
						return lib.DeviceGetHandleByPciBusId(strings.ToLower(busID))
					}},
					{"bus id " + strings.ToLower(busID[4:]), func() (nvml.Device, nvml.Return) {
						return lib.DeviceGetHandleByPciBusId(strings.ToLower(busID[4:]))
					}},
				}
				for _, l := range lookups {
					h, ret := l.fn()
					if ret != nvml.SUCCESS {
						t.Errorf("handle by %s: %v", l.by, ret)
						continue
					}
					if h != d {
						idx, _ := h.GetIndex()
						t.Errorf("handle by %s is GPU %d, want %d", l.by, idx, i)
					}
				}
			})

			idx, ret := d.GetIndex()
			check(t, "GetIndex", idx, ret, i)
			minor, ret := d.GetMinorNumber()
			check(t, "GetMinorNumber", minor, ret, i) // compiled GPUs are /dev/nvidia<index>
			name, ret := d.GetName()
			check(t, "GetName", name, ret, b.ProductName)
			u, ret := d.GetUUID()
			check(t, "GetUUID", u, ret, uuid)
			s, ret := d.GetSerial()
			check(t, "GetSerial", s, ret, serial)
			brand, ret := d.GetBrand()
			check(t, "GetBrand", brand, ret, nvml.BrandType(profile.Brands[b.Brand]))
			arch, ret := d.GetArchitecture()
			check(t, "GetArchitecture", arch, ret, nvml.DeviceArchitecture(profile.Architectures[b.Architecture]))
			ccMajor, ccMinor, err := b.ComputeCapabilityParts()
			if err != nil {
				t.Fatal(err)
			}
			major, minorCC, ret := d.GetCudaComputeCapability()
			check(t, "GetCudaComputeCapability", [2]int{major, minorCC}, ret, [2]int{int(ccMajor), int(ccMinor)})

			pci, ret := d.GetPciInfo()
			nb := len(topo.BusIDs)
			check(t, "GetPciInfo.Domain", pci.Domain, ret, uint32(i/nb))
			check(t, "GetPciInfo.Bus", pci.Bus, ret, uint32(topo.BusIDs[i%nb]))
			check(t, "GetPciInfo.Device", pci.Device, ret, 0)
			check(t, "GetPciInfo.PciDeviceId", pci.PciDeviceId, ret, uint32(b.PCI.DeviceID))
			check(t, "GetPciInfo.PciSubSystemId", pci.PciSubSystemId, ret, uint32(b.PCI.SubsystemID))
			check(t, "GetPciInfo.BusId", cstr(pci.BusId[:]), ret, busID)
			check(t, "GetPciInfo.BusIdLegacy", cstr(pci.BusIdLegacy[:]), ret, busID[4:])

			mem, ret := d.GetMemoryInfo()
			total, reserved, used := uint64(b.Memory.Total), uint64(b.Memory.Reserved), uint64(b.Memory.Used)
			// v1 has no reserved field: reserved memory counts as used.
			check(t, "GetMemoryInfo", mem, ret, nvml.Memory{Total: total, Used: reserved + used, Free: total - reserved - used})
			mem2, ret := d.GetMemoryInfo_v2()
			mem2.Version = 0
			check(t, "GetMemoryInfo_v2", mem2, ret, nvml.Memory_v2{Total: total, Reserved: reserved, Used: used, Free: total - reserved - used})
			bar1, ret := d.GetBAR1MemoryInfo()
			check(t, "GetBAR1MemoryInfo", bar1, ret, nvml.BAR1Memory{
				Bar1Total: uint64(b.BAR1.Total), Bar1Used: uint64(b.BAR1.Used), Bar1Free: uint64(b.BAR1.Total - b.BAR1.Used),
			})

			th := &b.Thermal
			temp, ret := d.GetTemperature(nvml.TEMPERATURE_GPU)
			checkOpt(t, "GetTemperature(GPU)", temp, ret, th.GPU)
			for _, c := range []struct {
				kind nvml.TemperatureThresholds
				want *uint32
			}{
				{nvml.TEMPERATURE_THRESHOLD_SHUTDOWN, th.Shutdown},
				{nvml.TEMPERATURE_THRESHOLD_SLOWDOWN, th.Slowdown},
				{nvml.TEMPERATURE_THRESHOLD_GPU_MAX, th.GPUMax},
				{nvml.TEMPERATURE_THRESHOLD_MEM_MAX, th.MemoryMax},
				{nvml.TEMPERATURE_THRESHOLD_ACOUSTIC_MIN, nil}, // profiles have no acoustic limits
			} {
				v, ret := d.GetTemperatureThreshold(c.kind)
				checkOpt(t, fmt.Sprintf("GetTemperatureThreshold(%d)", c.kind), v, ret, c.want)
			}

			pw := &b.Power
			v, ret := d.GetPowerUsage()
			checkOpt(t, "GetPowerUsage", v, ret, milliwatts(pw.Draw))
			v, ret = d.GetPowerManagementLimit()
			checkOpt(t, "GetPowerManagementLimit", v, ret, milliwatts(pw.Limit))
			v, ret = d.GetEnforcedPowerLimit()
			checkOpt(t, "GetEnforcedPowerLimit", v, ret, milliwatts(pw.EnforcedLimit))
			v, ret = d.GetPowerManagementDefaultLimit()
			checkOpt(t, "GetPowerManagementDefaultLimit", v, ret, milliwatts(pw.DefaultLimit))
			lo, hi, ret := d.GetPowerManagementLimitConstraints()
			if pw.MinLimit == nil || pw.MaxLimit == nil {
				checkRet(t, "GetPowerManagementLimitConstraints", ret, nvml.ERROR_NOT_SUPPORTED)
			} else {
				check(t, "GetPowerManagementLimitConstraints", [2]uint32{lo, hi}, ret,
					[2]uint32{*milliwatts(pw.MinLimit), *milliwatts(pw.MaxLimit)})
			}

			cl := &b.Clocks
			for _, ct := range clockTypes {
				v, ret := d.GetClockInfo(ct)
				checkOpt(t, fmt.Sprintf("GetClockInfo(%d)", ct), v, ret, clockOf(cl.Current, ct))
				v, ret = d.GetMaxClockInfo(ct)
				checkOpt(t, fmt.Sprintf("GetMaxClockInfo(%d)", ct), v, ret, clockOf(cl.Max, ct))
				v, ret = d.GetApplicationsClock(ct)
				checkOpt(t, fmt.Sprintf("GetApplicationsClock(%d)", ct), v, ret, clockOf(cl.Applications, ct))
				v, ret = d.GetDefaultApplicationsClock(ct)
				checkOpt(t, fmt.Sprintf("GetDefaultApplicationsClock(%d)", ct), v, ret, clockOf(cl.DefaultApplications, ct))
				v, ret = d.GetMaxCustomerBoostClock(ct)
				checkOpt(t, fmt.Sprintf("GetMaxCustomerBoostClock(%d)", ct), v, ret, clockOf(cl.MaxBoost, ct))
			}
			// go-nvml's wrappers pass a count of 0, so a board with clocks
			// answers INSUFFICIENT_SIZE with the number it has: that is all a
			// go-nvml client can read.
			cnt, _, ret := d.GetSupportedMemoryClocks()
			if len(cl.Supported) == 0 {
				checkRet(t, "GetSupportedMemoryClocks", ret, nvml.ERROR_NOT_SUPPORTED)
			} else {
				checkRet(t, "GetSupportedMemoryClocks", ret, nvml.ERROR_INSUFFICIENT_SIZE)
				if cnt != len(cl.Supported) {
					t.Errorf("GetSupportedMemoryClocks count = %d, want %d", cnt, len(cl.Supported))
				}
			}
			notListed := uint32(1)
			for _, sc := range cl.Supported {
				cnt, _, ret := d.GetSupportedGraphicsClocks(int(sc.Memory))
				checkRet(t, fmt.Sprintf("GetSupportedGraphicsClocks(%d)", sc.Memory), ret, nvml.ERROR_INSUFFICIENT_SIZE)
				if want := len(graphicsClocks(sc)); cnt != want {
					t.Errorf("GetSupportedGraphicsClocks(%d) count = %d, want %d", sc.Memory, cnt, want)
				}
				notListed += sc.Memory
			}
			if len(cl.Supported) > 0 {
				_, _, ret = d.GetSupportedGraphicsClocks(int(notListed))
				checkRet(t, fmt.Sprintf("GetSupportedGraphicsClocks(%d), a memory clock not listed", notListed), ret, nvml.ERROR_NOT_FOUND)
			}

			m := &b.Modes
			var pstate int
			if _, err := fmt.Sscanf(m.PerformanceState, "P%d", &pstate); err != nil {
				t.Fatalf("profile performanceState %q: %v", m.PerformanceState, err)
			}
			ps, ret := d.GetPerformanceState()
			check(t, "GetPerformanceState", ps, ret, nvml.Pstates(pstate))
			pm, ret := d.GetPersistenceMode()
			check(t, "GetPersistenceMode", pm, ret, enableState(m.Persistence))
			cm, ret := d.GetComputeMode()
			check(t, "GetComputeMode", cm, ret, nvml.ComputeMode(profile.ComputeModes[m.ComputeMode]))
			eccCur, eccPend, ret := d.GetEccMode()
			if m.ECC == nil {
				checkRet(t, "GetEccMode", ret, nvml.ERROR_NOT_SUPPORTED)
			} else {
				check(t, "GetEccMode", [2]nvml.EnableState{eccCur, eccPend}, ret,
					[2]nvml.EnableState{enableState(m.ECC.Current), enableState(m.ECC.Pending)})
			}
			migCur, migPend, ret := d.GetMigMode()
			maxMig, retMax := d.GetMaxMigDeviceCount()
			if m.MIG == nil {
				checkRet(t, "GetMigMode", ret, nvml.ERROR_NOT_SUPPORTED)
				check(t, "GetMaxMigDeviceCount", maxMig, retMax, 0)
			} else {
				check(t, "GetMigMode", [2]int{migCur, migPend}, ret, [2]int{boolInt(m.MIG.Current), boolInt(m.MIG.Pending)})
				check(t, "GetMaxMigDeviceCount", maxMig, retMax, int(m.MIG.MaxDevices))
			}
			isMig, ret := d.IsMigDeviceHandle()
			check(t, "IsMigDeviceHandle", isMig, ret, false)
			vm, ret := d.GetVirtualizationMode()
			check(t, "GetVirtualizationMode", vm, ret, nvml.GpuVirtualizationMode(profile.VirtualizationModes[m.Virtualization]))
			util, ret := d.GetUtilizationRates()
			if b.Utilization.GPU == nil {
				checkRet(t, "GetUtilizationRates", ret, nvml.ERROR_NOT_SUPPORTED)
			} else {
				want := nvml.Utilization{Gpu: *b.Utilization.GPU}
				if b.Utilization.Memory != nil {
					want.Memory = *b.Utilization.Memory
				}
				check(t, "GetUtilizationRates", util, ret, want)
			}

			g, ret := d.GetCurrPcieLinkGeneration()
			check(t, "GetCurrPcieLinkGeneration", g, ret, int(b.PCI.LinkGen))
			g, ret = d.GetCurrPcieLinkWidth()
			check(t, "GetCurrPcieLinkWidth", g, ret, int(b.PCI.LinkWidth))
			g, ret = d.GetMaxPcieLinkGeneration()
			check(t, "GetMaxPcieLinkGeneration", g, ret, int(b.PCI.MaxLinkGen))
			g, ret = d.GetMaxPcieLinkWidth()
			check(t, "GetMaxPcieLinkWidth", g, ret, int(b.PCI.MaxLinkWidth))

			str, ret := d.GetVbiosVersion()
			checkOpt(t, "GetVbiosVersion", str, ret, optStr(b.VBIOSVersion))
			str, ret = d.GetBoardPartNumber()
			checkOpt(t, "GetBoardPartNumber", str, ret, optStr(b.BoardPartNumber))
			str, ret = d.GetInforomImageVersion()
			checkOpt(t, "GetInforomImageVersion", str, ret, optStr(b.Inforom.Image))
			str, ret = d.GetInforomVersion(nvml.INFOROM_OEM)
			checkOpt(t, "GetInforomVersion(OEM)", str, ret, optStr(b.Inforom.OEM))
			str, ret = d.GetInforomVersion(nvml.INFOROM_ECC)
			checkOpt(t, "GetInforomVersion(ECC)", str, ret, optStr(b.Inforom.ECC))
			str, ret = d.GetInforomVersion(nvml.INFOROM_POWER)
			checkOpt(t, "GetInforomVersion(POWER)", str, ret, optStr(b.Inforom.Power))

			var mask [profile.MaxCPUs / 64]uint64
			cpuList := "none"
			if len(topo.CPUAffinity) > 0 {
				cpuList = topo.CPUAffinity[i%len(topo.CPUAffinity)]
				mask, err = profile.ParseCPUList(cpuList)
				if err != nil {
					t.Fatal(err)
				}
			}
			// go-nvml sizes the set in bytes, not bits, so it asks for more
			// words than the library has; the rest must come back empty.
			cpus, ret := d.GetCpuAffinity(profile.MaxCPUs)
			if ret != nvml.SUCCESS {
				t.Errorf("GetCpuAffinity: %v", ret)
			}
			for k, w := range cpus {
				var want uint64
				if k < len(mask) {
					want = mask[k]
				}
				if uint64(w) != want {
					t.Errorf("GetCpuAffinity word %d = %#x, want %#x (cpuAffinity %q)", k, w, want, cpuList)
				}
			}
			// go-nvml sizes the set in bytes, not bits: 64 nodes ask for 8 words.
			nodes, ret := d.GetMemoryAffinity(64, nvml.AFFINITY_SCOPE_NODE)
			if len(topo.NUMANodes) == 0 {
				checkRet(t, "GetMemoryAffinity", ret, nvml.ERROR_NOT_SUPPORTED)
			} else {
				want := make([]uint, len(nodes))
				numa := topo.NUMANodes[i%len(topo.NUMANodes)]
				want[numa/64] = 1 << (numa % 64)
				check(t, "GetMemoryAffinity", fmt.Sprint(nodes), ret, fmt.Sprint(want))
			}
			for j, o := range devs {
				want := nvml.TOPOLOGY_SYSTEM
				switch {
				case j == i:
					want = nvml.TOPOLOGY_INTERNAL
				case len(topo.NUMANodes) > 0 && topo.NUMANodes[i%len(topo.NUMANodes)] == topo.NUMANodes[j%len(topo.NUMANodes)]:
					want = nvml.TOPOLOGY_NODE // GPUs on one NUMA node meet at its host bridge
				}
				lvl, ret := d.GetTopologyCommonAncestor(o)
				check(t, fmt.Sprintf("GetTopologyCommonAncestor(GPU %d)", j), lvl, ret, want)
			}

			nvlink(t, p, i, d)
			fieldValues(t, p, d)

			procs, ret := d.GetComputeRunningProcesses()
			check(t, "GetComputeRunningProcesses count", len(procs), ret, 0)
		})
	}

	t.Run("events", func(t *testing.T) {
		set, ret := lib.EventSetCreate()
		if ret != nvml.SUCCESS {
			t.Fatalf("EventSetCreate: %v", ret)
		}
		for i, d := range devs {
			if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
				t.Errorf("GPU %d RegisterEvents(Xid): %v", i, ret)
			}
		}
		const timeout = 10 * time.Millisecond
		begin := time.Now()
		_, ret = lib.EventSetWait(set, uint32(timeout/time.Millisecond))
		took := time.Since(begin)
		checkRet(t, "EventSetWait(10 ms)", ret, nvml.ERROR_TIMEOUT)
		if took < timeout {
			t.Errorf("EventSetWait(10 ms) returned after %v; a quiet GPU waits the whole timeout", took)
		}
		checkRet(t, "EventSetFree", lib.EventSetFree(set), nvml.SUCCESS)
	})
}

// nvlink checks the links the profile gives GPU i, and that the first link
// past them is not supported (nvidia-smi walks all of them).
func nvlink(t *testing.T, p *profile.Profile, i int, d nvml.Device) {
	t.Helper()
	l := p.Board.NVLink
	links := 0
	if l != nil {
		links = int(l.Links)
	}
	gpuBuses := map[uint32]bool{}
	for _, b := range p.Topology.BusIDs {
		gpuBuses[uint32(b)] = true
	}
	var link0 uint32
	for link := 0; link < links; link++ {
		st, ret := d.GetNvLinkState(link)
		check(t, fmt.Sprintf("GetNvLinkState(%d)", link), st, ret, nvml.FEATURE_ENABLED)
		ver, ret := d.GetNvLinkVersion(link)
		if ret != nvml.SUCCESS {
			t.Errorf("GetNvLinkVersion(%d): %v", link, ret)
		} else if link == 0 {
			// nvml.h documents the version as an nvmlNvlinkVersion_t
			// (NVLINK_VERSION_3_1 = 5); the profile names it as "3.1".
			if want := nvlinkVersions[l.Version]; nvml.NvlinkVersion(ver) != want {
				t.Errorf("GetNvLinkVersion(0) = %d, want %d (NVLink %s)", ver, want, l.Version)
			}
			link0 = ver
		} else if ver != link0 {
			t.Errorf("GetNvLinkVersion(%d) = %d, link 0 has %d", link, ver, link0)
		}
		pci, ret := d.GetNvLinkRemotePciInfo(link)
		if ret != nvml.SUCCESS {
			t.Errorf("GetNvLinkRemotePciInfo(%d): %v", link, ret)
			continue
		}
		if got := cstr(pci.BusId[:]); got != fmt.Sprintf("%08X:%02X:%02X.0", pci.Domain, pci.Bus, pci.Device) {
			t.Errorf("GetNvLinkRemotePciInfo(%d).BusId %q disagrees with domain %d bus %#x device %d", link, got, pci.Domain, pci.Bus, pci.Device)
		}
		switch l.Remote {
		case "switch":
			if pci.PciDeviceId != uint32(l.RemoteDeviceID) {
				t.Errorf("GetNvLinkRemotePciInfo(%d).PciDeviceId = %#x, want the switch %#x", link, pci.PciDeviceId, uint32(l.RemoteDeviceID))
			}
			if want := uint32(i / len(p.Topology.BusIDs)); pci.Domain != want || gpuBuses[pci.Bus] {
				t.Errorf("GetNvLinkRemotePciInfo(%d) = %s, want a switch in domain %d off the GPUs' buses", link, cstr(pci.BusId[:]), want)
			}
		case "gpu":
			if !gpuBuses[pci.Bus] || pci.PciDeviceId != uint32(p.Board.PCI.DeviceID) {
				t.Errorf("GetNvLinkRemotePciInfo(%d) = %s (%#x), want another GPU", link, cstr(pci.BusId[:]), pci.PciDeviceId)
			}
		}
	}
	_, ret := d.GetNvLinkState(links)
	checkRet(t, fmt.Sprintf("GetNvLinkState(%d), past the board's links", links), ret, nvml.ERROR_NOT_SUPPORTED)
	_, ret = d.GetNvLinkVersion(links)
	checkRet(t, fmt.Sprintf("GetNvLinkVersion(%d), past the board's links", links), ret, nvml.ERROR_NOT_SUPPORTED)
	_, ret = d.GetNvLinkRemotePciInfo(links)
	checkRet(t, fmt.Sprintf("GetNvLinkRemotePciInfo(%d), past the board's links", links), ret, nvml.ERROR_NOT_SUPPORTED)
	_, ret = d.GetNvLinkState(nvml.NVLINK_MAX_LINKS)
	checkRet(t, "GetNvLinkState(NVLINK_MAX_LINKS)", ret, nvml.ERROR_INVALID_ARGUMENT)
}

// nvlinkVersions are the nvmlNvlinkVersion_t values of the versions a
// profile names.
var nvlinkVersions = map[string]nvml.NvlinkVersion{
	"1.0": nvml.NVLINK_VERSION_1_0, "2.0": nvml.NVLINK_VERSION_2_0, "2.2": nvml.NVLINK_VERSION_2_2,
	"3.0": nvml.NVLINK_VERSION_3_0, "3.1": nvml.NVLINK_VERSION_3_1, "4.0": nvml.NVLINK_VERSION_4_0,
	"5.0": nvml.NVLINK_VERSION_5_0, "6.0": nvml.NVLINK_VERSION_6_0,
}

// fieldValues asks for the NVLink link count and the GPU-scope power fields
// in one call, as nvidia-smi does.
func fieldValues(t *testing.T, p *profile.Profile, d nvml.Device) {
	t.Helper()
	pw := &p.Board.Power
	var links *uint32
	if p.Board.NVLink != nil {
		links = &p.Board.NVLink.Links
	}
	want := []struct {
		name string
		id   uint32
		want *uint32
	}{
		{"NVLINK_LINK_COUNT", nvml.FI_DEV_NVLINK_LINK_COUNT, links},
		{"POWER_INSTANT", nvml.FI_DEV_POWER_INSTANT, milliwatts(pw.Draw)},
		{"POWER_MIN_LIMIT", nvml.FI_DEV_POWER_MIN_LIMIT, milliwatts(pw.MinLimit)},
		{"POWER_MAX_LIMIT", nvml.FI_DEV_POWER_MAX_LIMIT, milliwatts(pw.MaxLimit)},
		{"POWER_DEFAULT_LIMIT", nvml.FI_DEV_POWER_DEFAULT_LIMIT, milliwatts(pw.DefaultLimit)},
		{"POWER_CURRENT_LIMIT", nvml.FI_DEV_POWER_CURRENT_LIMIT, milliwatts(pw.EnforcedLimit)},
		{"POWER_REQUESTED_LIMIT", nvml.FI_DEV_POWER_REQUESTED_LIMIT, milliwatts(pw.Limit)},
	}
	vals := make([]nvml.FieldValue, len(want))
	for k, w := range want {
		vals[k] = nvml.FieldValue{FieldId: w.id, ScopeId: nvml.POWER_SCOPE_GPU}
	}
	checkRet(t, "GetFieldValues", d.GetFieldValues(vals), nvml.SUCCESS)
	for k, w := range want {
		v := vals[k]
		what := "GetFieldValues(FI_DEV_" + w.name + ")"
		if w.want == nil {
			checkRet(t, what, nvml.Return(v.NvmlReturn), nvml.ERROR_NOT_SUPPORTED)
			continue
		}
		if nvml.ValueType(v.ValueType) != nvml.VALUE_TYPE_UNSIGNED_INT {
			t.Errorf("%s value type = %d, want unsigned int", what, v.ValueType)
		}
		check(t, what, binary.LittleEndian.Uint32(v.Value[:4]), nvml.Return(v.NvmlReturn), *w.want)
	}
}

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
type visibleGPU struct {
	UUID, Serial, BusID string
	Minor               int
}

func (g visibleGPU) String() string {
	return fmt.Sprintf("{minor %d %s serial %s bus %s}", g.Minor, g.UUID, g.Serial, g.BusID)
}

// nodeGPU is what node GPU i of p must report wherever it is visible.
func nodeGPU(p *profile.Profile, seed string, i int) visibleGPU {
	return visibleGPU{
		UUID:   snapshot.UUID(p.Name, seed, i),
		Serial: snapshot.Serial(p.Board.SerialPrefix, p.Name, seed, i),
		BusID:  snapshot.BusID(p, i),
		Minor:  i,
	}
}

// visible lists what an initialised library shows, in index order.
func visible(t *testing.T, lib nvml.Interface) []visibleGPU {
	t.Helper()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetCount: %v", ret)
	}
	gpus := make([]visibleGPU, n)
	for i := range gpus {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Fatalf("DeviceGetHandleByIndex(%d): %v", i, ret)
		}
		idx, ret := d.GetIndex()
		check(t, fmt.Sprintf("GPU %d GetIndex", i), idx, ret, i)
		var r [4]nvml.Return
		g := &gpus[i]
		g.UUID, r[0] = d.GetUUID()
		g.Serial, r[1] = d.GetSerial()
		g.Minor, r[2] = d.GetMinorNumber()
		var pci nvml.PciInfo
		pci, r[3] = d.GetPciInfo()
		g.BusID = cstr(pci.BusId[:])
		for _, ret := range r {
			if ret != nvml.SUCCESS {
				t.Fatalf("GPU %d identity: %v", i, ret)
			}
		}
	}
	return gpus
}

func TestVisibility(t *testing.T) {
	path, p := testenv.Snapshot(t, "a100", 0)
	all := make([]int, p.GPUs)
	node := make([]visibleGPU, p.GPUs)
	for i := range all {
		all[i] = i
		node[i] = nodeGPU(p, testenv.Seed, i)
	}
	uuid := func(i int) string { return node[i].UUID }

	// The shortest prefix of GPU 4's UUID, from 8 hex digits on, that no other GPU shares.
	unique := ""
	for n := len("GPU-") + 8; n <= len(uuid(4)) && unique == ""; n++ {
		unique = uuid(4)[:n]
		for i := range node {
			if i != 4 && strings.HasPrefix(uuid(i), unique) {
				unique = ""
				break
			}
		}
	}
	if unique == "" {
		t.Fatalf("no prefix of %s is unique among %d GPUs", uuid(4), p.GPUs)
	}
	// The longest prefix two GPUs share, if any is longer than "GPU-".
	shared := ""
	for i := range node {
		for j := i + 1; j < len(node); j++ {
			k := len("GPU-")
			for k < len(uuid(i)) && uuid(i)[k] == uuid(j)[k] {
				k++
			}
			if k > len(shared) && k > len("GPU-") {
				shared = uuid(i)[:k]
			}
		}
	}
	const unknownUUID = "GPU-ffffffff-dead"
	for i := range node {
		if strings.HasPrefix(strings.ToLower(uuid(i)), strings.ToLower(unknownUUID)) {
			t.Fatalf("GPU %d's UUID %s starts with the entry meant to name no GPU", i, uuid(i))
		}
	}
	unset := "<unset>"

	cases := []struct {
		name     string
		ctl      bool   // $NVMOCK_DEV_ROOT/nvidiactl exists
		nodes    []int  // $NVMOCK_DEV_ROOT/nvidia<minor> that exist
		visible  string // NVIDIA_VISIBLE_DEVICES
		want     []int  // node GPUs seen, in index order
		wantInit nvml.Return
	}{
		{name: "a process without any device nodes sees every GPU", visible: unset, want: all},
		{name: "a dev root with nvidiactl, nvidia1 and nvidia3 sees exactly GPUs 1 and 3", ctl: true, nodes: []int{1, 3}, visible: unset, want: []int{1, 3}},
		{name: "a dev root with only nvidiactl sees no GPU", ctl: true, visible: unset, want: []int{}},
		{name: "a dev root with every node sees every GPU", ctl: true, nodes: all, visible: unset, want: all},
		{name: "device nodes without nvidiactl do not filter", nodes: []int{1, 3}, visible: unset, want: all},
		{name: "NVIDIA_VISIBLE_DEVICES=2,5 sees GPUs 2 and 5", visible: "2,5", want: []int{2, 5}},
		{name: "NVIDIA_VISIBLE_DEVICES in another order keeps the node's order", visible: "5,2", want: []int{2, 5}},
		{name: "a full UUID selects its GPU", visible: uuid(6), want: []int{6}},
		{name: "a unique UUID prefix selects its GPU", visible: unique, want: []int{4}},
		{name: "an index and a UUID mix in one list", visible: "0," + uuid(7), want: []int{0, 7}},
		{name: "dev nodes 1 and 3 with NVIDIA_VISIBLE_DEVICES=3 see only GPU 3", ctl: true, nodes: []int{1, 3}, visible: "3", want: []int{3}},
		{name: "NVIDIA_VISIBLE_DEVICES=all does not filter", visible: "all", want: all},
		{name: "NVIDIA_VISIBLE_DEVICES=void does not filter", visible: "void", want: all},
		{name: "NVIDIA_VISIBLE_DEVICES=none does not filter", visible: "none", want: all},
		{name: "an empty NVIDIA_VISIBLE_DEVICES does not filter", visible: "", want: all},
		{name: "an index past the node's GPUs fails Init", visible: "17", wantInit: nvml.ERROR_UNKNOWN},
		{name: "a UUID of no GPU on the node fails Init", visible: unknownUUID, wantInit: nvml.ERROR_UNKNOWN},
		{name: "one bad entry among good ones fails Init", visible: "2,17", wantInit: nvml.ERROR_UNKNOWN},
		{name: "the bare prefix GPU- fails Init", visible: "GPU-", wantInit: nvml.ERROR_UNKNOWN},
	}
	if shared != "" {
		cases = append(cases, struct {
			name     string
			ctl      bool
			nodes    []int
			visible  string
			want     []int
			wantInit nvml.Return
		}{name: "a prefix two GPUs share (" + shared + ") fails Init", visible: shared, wantInit: nvml.ERROR_UNKNOWN})
	} else {
		t.Logf("no two of the %d UUIDs share a hex digit after GPU-; only the bare prefix tests ambiguity", p.GPUs)
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := cleanEnv(t, path)
			if c.ctl {
				touch(t, filepath.Join(root, "nvidiactl"))
			}
			for _, m := range c.nodes {
				touch(t, filepath.Join(root, fmt.Sprintf("nvidia%d", m)))
			}
			if c.visible != unset {
				t.Setenv("NVIDIA_VISIBLE_DEVICES", c.visible)
			}
			lib := newLib(t)
			if c.wantInit != nvml.SUCCESS {
				// A failed Init leaves go-nvml's instance loaded; that is go-nvml's count, not the library's.
				checkRet(t, "Init", lib.Init(), c.wantInit)
				return
			}
			start(t, lib)
			got := visible(t, lib)
			want := make([]visibleGPU, len(c.want))
			for k, i := range c.want {
				want[k] = node[i]
			}
			if len(got) != len(want) {
				t.Errorf("visible GPUs:\n got %v\nwant %v", got, want)
			} else {
				for i := range got {
					if got[i] != want[i] {
						t.Errorf("visible GPU %d = %v, want %v", i, got[i], want[i])
					}
				}
			}
			seen := map[int]bool{}
			for _, i := range c.want {
				seen[i] = true
			}
			for i := range node {
				if seen[i] {
					continue
				}
				if _, ret := lib.DeviceGetHandleByUUID(uuid(i)); ret != nvml.ERROR_NOT_FOUND {
					t.Errorf("DeviceGetHandleByUUID of hidden GPU %d: %v, want ERROR_NOT_FOUND", i, ret)
				}
				if _, ret := lib.DeviceGetHandleByPciBusId(node[i].BusID); ret != nvml.ERROR_NOT_FOUND {
					t.Errorf("DeviceGetHandleByPciBusId of hidden GPU %d: %v, want ERROR_NOT_FOUND", i, ret)
				}
			}
		})
	}
}

// TestVisibilityErrorsNameTheEntry runs failing NVIDIA_VISIBLE_DEVICES
// settings in a process of their own to read the library's one stderr line.
func TestVisibilityErrorsNameTheEntry(t *testing.T) {
	path, _ := testenv.Snapshot(t, "a100", 0)
	for _, c := range []struct {
		name, visible, entry, problem string
	}{
		{"an index past the node's GPUs is named as no GPU", "2,17", `"17"`, "names no gpu"},
		{"an unknown UUID is named as no GPU", "GPU-ffffffff-dead", `"GPU-ffffffff-dead"`, "names no gpu"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runHelper(t, path, "NVIDIA_VISIBLE_DEVICES="+c.visible)
			checkRet(t, "Init", r.init, nvml.ERROR_UNKNOWN)
			line, rest, _ := strings.Cut(r.stderr, "\n")
			if rest != "" || !strings.HasSuffix(r.stderr, "\n") {
				t.Errorf("stderr is not exactly one line:\n%s", r.stderr)
			}
			if !strings.Contains(line, "NVIDIA_VISIBLE_DEVICES") || !strings.Contains(line, c.entry) ||
				!strings.Contains(strings.ToLower(line), c.problem) {
				t.Errorf("stderr line %q does not name NVIDIA_VISIBLE_DEVICES, the entry %s and the problem (%q)", line, c.entry, c.problem)
			}
		})
	}
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// helperEnv marks the re-executed test binary that runs TestHelperInit.
const helperEnv = "NVMOCK_GONVML_HELPER"

// TestHelperInit is not a test: other tests re-execute the test binary to
// run it in a process of its own, where the library's stderr can be read.
// It prints "init=<code>" and, on success, "uuid=<uuid>" per GPU.
func TestHelperInit(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper process for other tests")
	}
	lib := newLib(t)
	ret := lib.Init()
	fmt.Printf("init=%d\n", int32(ret))
	if ret != nvml.SUCCESS {
		return
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetCount: %v", ret)
	}
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Fatalf("DeviceGetHandleByIndex(%d): %v", i, ret)
		}
		u, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			t.Fatalf("GetUUID(%d): %v", i, ret)
		}
		fmt.Printf("uuid=%s\n", u)
	}
}

type helperResult struct {
	init   nvml.Return
	uuids  []string
	stderr string
}

// runHelper runs TestHelperInit in a new process on snapshotPath, with a
// clean environment (testenv.Env) plus extra.
func runHelper(t *testing.T, snapshotPath string, extra ...string) helperResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperInit$", "-test.count=1")
	cmd.Env = testenv.Env(t, snapshotPath, append([]string{helperEnv + "=1"}, extra...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("helper process failed (%v), so the library crashed or the helper broke:\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	} else if err != nil {
		t.Fatal(err)
	}
	r := helperResult{init: -1, stderr: stderr.String()}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "init="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("helper printed %q", line)
			}
			r.init = nvml.Return(n)
		} else if v, ok := strings.CutPrefix(line, "uuid="); ok {
			r.uuids = append(r.uuids, v)
		}
	}
	if r.init == -1 {
		t.Fatalf("helper printed no init= line:\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	return r
}

func TestIdentityDiffersBetweenNodes(t *testing.T) {
	p, err := profile.Builtin("a100")
	if err != nil {
		t.Fatal(err)
	}
	seeds := []string{"node-a", "node-b"}
	paths := make([]string, len(seeds))
	for k, seed := range seeds {
		data, err := snapshot.Compile(p, snapshot.Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		paths[k] = filepath.Join(t.TempDir(), seed+".snapshot")
		if err := os.WriteFile(paths[k], data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	inProcess := make([][]visibleGPU, len(seeds))
	for k, seed := range seeds {
		t.Run("seed "+seed+" gives its derived identities", func(t *testing.T) {
			cleanEnv(t, paths[k])
			lib := newLib(t)
			start(t, lib)
			inProcess[k] = visible(t, lib)
			for i, g := range inProcess[k] {
				if want := nodeGPU(p, seed, i); g != want {
					t.Errorf("GPU %d = %+v, want %+v", i, g, want)
				}
			}
		})
	}

	t.Run("two seeds give disjoint UUIDs and serials", func(t *testing.T) {
		owner := map[string]string{}
		for k, gpus := range inProcess {
			for i, g := range gpus {
				for _, id := range []string{g.UUID, g.Serial} {
					if prev, dup := owner[id]; dup {
						t.Errorf("%s of seed %s GPU %d is also %s", id, seeds[k], i, prev)
					}
					owner[id] = fmt.Sprintf("seed %s GPU %d", seeds[k], i)
				}
			}
		}
	})

	t.Run("one seed gives the same UUIDs in two processes", func(t *testing.T) {
		first := runHelper(t, paths[0])
		second := runHelper(t, paths[0])
		for _, r := range []helperResult{first, second} {
			checkRet(t, "helper Init", r.init, nvml.SUCCESS)
		}
		var want []string
		for _, g := range inProcess[0] {
			want = append(want, g.UUID)
		}
		if fmt.Sprint(first.uuids) != fmt.Sprint(second.uuids) || fmt.Sprint(first.uuids) != fmt.Sprint(want) {
			t.Errorf("UUIDs differ between processes:\n first  %v\n second %v\n in-process %v", first.uuids, second.uuids, want)
		}
	})
}

func TestBuiltinDefaultDerivesIdentityAtInit(t *testing.T) {
	libDir := testenv.LibDir(t)
	// <driver root>/usr/lib64 -> <driver root>/etc/nvmock/snapshot would replace the default.
	installed := filepath.Join(filepath.Dir(filepath.Dir(libDir)), "etc", "nvmock", "snapshot")
	if _, err := os.Stat(installed); err == nil {
		t.Skipf("%s exists, so the library loads it instead of its built-in default; remove it to run this test", installed)
	}
	p, err := profile.Builtin("a100")
	if err != nil {
		t.Fatal(err)
	}

	initDefault := func(t *testing.T, seed string) []visibleGPU {
		t.Helper()
		cleanEnv(t, "")
		if seed == "" {
			unsetenv(t, "NODE_NAME")
		} else {
			t.Setenv("NODE_NAME", seed)
		}
		lib := newLib(t)
		start(t, lib)
		v, ret := lib.SystemGetDriverVersion()
		check(t, "SystemGetDriverVersion", v, ret, p.Driver.Version)
		gpus := visible(t, lib)
		if len(gpus) != p.GPUs {
			t.Fatalf("the default shows %d GPUs, want %d", len(gpus), p.GPUs)
		}
		for i := range gpus {
			d, _ := lib.DeviceGetHandleByIndex(i)
			name, ret := d.GetName()
			check(t, fmt.Sprintf("GPU %d GetName", i), name, ret, p.Board.ProductName)
		}
		return gpus
	}

	byNode := map[string][]visibleGPU{}
	for _, seed := range []string{"node-a", "node-b"} {
		t.Run("NODE_NAME="+seed+" derives its identities", func(t *testing.T) {
			gpus := initDefault(t, seed)
			for i, g := range gpus {
				if want := nodeGPU(p, seed, i); g != want {
					t.Errorf("GPU %d = %+v, want %+v", i, g, want)
				}
			}
			byNode[seed] = gpus
		})
	}
	t.Run("node-a and node-b share no UUID", func(t *testing.T) {
		a := map[string]bool{}
		for _, g := range byNode["node-a"] {
			a[g.UUID] = true
		}
		for i, g := range byNode["node-b"] {
			if a[g.UUID] {
				t.Errorf("node-b GPU %d has node-a's UUID %s", i, g.UUID)
			}
		}
	})
	t.Run("without NODE_NAME the seed is the machine id", func(t *testing.T) {
		unsetenv(t, "NODE_NAME")
		seed, err := snapshot.NodeSeed()
		if err != nil {
			t.Skipf("no machine id here: %v", err)
		}
		for i, g := range initDefault(t, "") {
			if want := nodeGPU(p, seed, i); g != want {
				t.Errorf("GPU %d = %+v, want %+v", i, g, want)
			}
		}
	})
}

func TestCorruptSnapshotFailsInit(t *testing.T) {
	goodPath, _ := testenv.Snapshot(t, "a100", 0)
	good, err := os.ReadFile(goodPath)
	if err != nil {
		t.Fatal(err)
	}
	versionOff := -1
	for _, f := range snapshot.HeaderLayout {
		if f.Go == "Version" {
			versionOff = int(f.Offset)
		}
	}
	if versionOff < 0 {
		t.Fatal("snapshot.HeaderLayout has no Version field")
	}
	patched := func(edit func([]byte) []byte) func(t *testing.T, dir string) string {
		return func(t *testing.T, dir string) string {
			path := filepath.Join(dir, "snapshot")
			if err := os.WriteFile(path, edit(bytes.Clone(good)), 0o644); err != nil {
				t.Fatal(err)
			}
			return path
		}
	}

	cases := []struct {
		name    string
		make    func(t *testing.T, dir string) string
		problem string // in the stderr line
	}{
		{"a path that does not exist", func(t *testing.T, dir string) string { return filepath.Join(dir, "absent") }, "no such file"},
		{"an empty file", patched(func([]byte) []byte { return nil }), "empty"},
		{"a file with bad magic", patched(func(b []byte) []byte { copy(b, "NOTASNAP"); return b }), "magic"},
		{"a snapshot of another layout version", patched(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[versionOff:], snapshot.Version+1)
			return b
		}), "version"},
		{"a file truncated mid-device", patched(func(b []byte) []byte { return b[:snapshot.HeaderSize+snapshot.DeviceSize/2] }), "truncated"},
		{"a file cut inside the header", patched(func(b []byte) []byte { return b[:snapshot.HeaderSize/2] }), "truncated"},
		{"a file with bytes after its end", patched(func(b []byte) []byte { return append(b, 0) }), "padded"},
		{"a directory", func(t *testing.T, dir string) string { return dir }, "not a regular"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.make(t, t.TempDir())
			r := runHelper(t, path)
			checkRet(t, "Init", r.init, nvml.ERROR_UNKNOWN)
			if len(r.uuids) > 0 {
				t.Errorf("Init fell back to a snapshot with %d GPUs", len(r.uuids))
			}
			line, rest, _ := strings.Cut(r.stderr, "\n")
			if rest != "" || !strings.HasSuffix(r.stderr, "\n") {
				t.Errorf("stderr is not exactly one line:\n%s", r.stderr)
			}
			if !strings.Contains(line, path) || !strings.Contains(strings.ToLower(line), c.problem) {
				t.Errorf("stderr line %q does not name the file %s and the problem (%q)", line, path, c.problem)
			}
		})
	}
}
