//go:build integration

package gonvml

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/profile"
)

func TestGettersMatchProfile(t *testing.T) {
	lib, p := startSnapshot(t, 0)
	b := &p.Board
	topo := &p.Topology
	node, err := p.Node()
	if err != nil {
		t.Fatal(err)
	}

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
					// domain:bus:device, which nvml.h lists beside the others.
					{"bus id " + strings.TrimSuffix(busID, ".0"), func() (nvml.Device, nvml.Return) {
						return lib.DeviceGetHandleByPciBusId(strings.TrimSuffix(busID, ".0"))
					}},
				}
				// nvmlDeviceGetHandleByUUIDV: the text, or the 16 bytes.
				var text, bin nvml.UUID
				text.Version, text.Type = nvml.STRUCT_VERSION(text, 1), uint32(nvml.UUID_TYPE_ASCII)
				copy(text.Value[:], uuid)
				bin.Version, bin.Type = nvml.STRUCT_VERSION(bin, 1), uint32(nvml.UUID_TYPE_BINARY)
				raw, err := hex.DecodeString(strings.ReplaceAll(strings.TrimPrefix(uuid, "GPU-"), "-", ""))
				if err != nil {
					t.Fatal(err)
				}
				copy(bin.Value[:], raw)
				lookups = append(lookups,
					struct {
						by string
						fn func() (nvml.Device, nvml.Return)
					}{"UUIDV text", func() (nvml.Device, nvml.Return) { return lib.DeviceGetHandleByUUIDV(&text) }},
					struct {
						by string
						fn func() (nvml.Device, nvml.Return)
					}{"UUIDV bytes", func() (nvml.Device, nvml.Return) { return lib.DeviceGetHandleByUUIDV(&bin) }})
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
			addr := snapshot.PCIAddress(p, i)
			check(t, "GetPciInfo.Domain", pci.Domain, ret, addr.Domain)
			check(t, "GetPciInfo.Bus", pci.Bus, ret, addr.Bus)
			check(t, "GetPciInfo.Device", pci.Device, ret, addr.Device)
			check(t, "GetPciInfo.PciDeviceId", pci.PciDeviceId, ret, uint32(b.PCI.DeviceID))
			check(t, "GetPciInfo.PciSubSystemId", pci.PciSubSystemId, ret, uint32(b.PCI.SubsystemID))
			check(t, "GetPciInfo.BusId", cstr(pci.BusId[:]), ret, busID)
			check(t, "GetPciInfo.BusIdLegacy", cstr(pci.BusIdLegacy[:]), ret, busID[4:])
			boardID, ret := d.GetBoardId()
			check(t, "GetBoardId", boardID, ret, addr.Domain<<16|addr.Bus<<8|addr.Device)
			multi, ret := d.GetMultiGpuBoard()
			check(t, "GetMultiGpuBoard", multi, ret, boolInt(b.MultiGPUBoard))

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
			pss, ret := d.GetSupportedPerformanceStates()
			check(t, "GetSupportedPerformanceStates", fmt.Sprint(pss), ret, fmt.Sprint([]nvml.Pstates{nvml.Pstates(pstate)}))
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
				want := 0 // nvml.h: zero unless MIG is enabled
				if m.MIG.Current {
					want = int(m.MIG.MaxDevices)
				}
				check(t, "GetMaxMigDeviceCount", maxMig, retMax, want)
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
				want := treeLevel(node.GPUs[i].Function, node.GPUs[j].Function)
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
// treeLevel is NVML's level between two GPUs, read off the PCIe tree: where
// their paths up meet. They meet inside a switch (an upstream port): one
// switch if neither path passes another on the way down (PIX), else a
// hierarchy of them (PXB); at a host bridge (PHB); else at the CPUs.
func treeLevel(a, b *profile.PCIFunction) nvml.GpuTopologyLevel {
	if a == b {
		return nvml.TOPOLOGY_INTERNAL
	}
	up := func(f *profile.PCIFunction) []*profile.PCIFunction {
		var path []*profile.PCIFunction
		for ; f != nil; f = f.Parent {
			path = append(path, f)
		}
		return path
	}
	pa, pb := up(a), up(b)
	for ia, x := range pa {
		ib := slices.Index(pb, x)
		if ib < 0 {
			continue
		}
		switches := 0
		for _, f := range append(slices.Clone(pa[:ia]), pb[:ib]...) {
			if f.Role == profile.RoleSwitchUp {
				switches++
			}
		}
		if switches == 0 {
			return nvml.TOPOLOGY_SINGLE
		}
		return nvml.TOPOLOGY_MULTIPLE
	}
	switch {
	case a.Root == b.Root:
		return nvml.TOPOLOGY_HOSTBRIDGE
	case a.NUMANode >= 0 && a.NUMANode == b.NUMANode:
		return nvml.TOPOLOGY_NODE
	}
	return nvml.TOPOLOGY_SYSTEM
}

func nvlink(t *testing.T, p *profile.Profile, i int, d nvml.Device) {
	t.Helper()
	l := p.Board.NVLink
	links := 0
	if l != nil {
		links = int(l.Links)
	}
	gpuBuses := map[uint32]bool{}
	for k := range p.GPUs {
		gpuBuses[snapshot.PCIAddress(p, k).Bus] = true
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
		switches := p.Topology.LinkSwitches(uint32(links))
		if l.Remote == "switch" && switches == nil {
			// The switches are outside the node (an NVL72 tray): no PCI device of it.
			checkRet(t, fmt.Sprintf("GetNvLinkRemotePciInfo(%d) with no switch on the node", link), ret, nvml.ERROR_NOT_SUPPORTED)
			continue
		}
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
			want, _ := profile.ParsePCIAddress(p.Topology.NVSwitches[switches[link]])
			if pci.Domain != want.Domain || pci.Bus != want.Bus || pci.Device != want.Device || gpuBuses[pci.Bus] {
				t.Errorf("GetNvLinkRemotePciInfo(%d) = %s, want switch %d of the topology, %s", link, cstr(pci.BusId[:]), switches[link], p.Topology.NVSwitches[switches[link]])
			}
		case "gpu":
			if !gpuBuses[pci.Bus] || pci.PciDeviceId != uint32(p.Board.PCI.DeviceID) {
				t.Errorf("GetNvLinkRemotePciInfo(%d) = %s (%#x), want another GPU", link, cstr(pci.BusId[:]), pci.PciDeviceId)
			}
		}
	}
	// A B200 and a GB200 refuse the state past their links as invalid and
	// answer the capability (NVIDIA/TensorRT-LLM #17060, #19210).
	_, ret := d.GetNvLinkState(links)
	checkRet(t, fmt.Sprintf("GetNvLinkState(%d), past the board's links", links), ret, nvml.ERROR_INVALID_ARGUMENT)
	c, ret := d.GetNvLinkCapability(links, nvml.NVLINK_CAP_P2P_SUPPORTED)
	check(t, fmt.Sprintf("GetNvLinkCapability(%d, P2P_SUPPORTED), past the board's links", links), c, ret, uint32(1))
	fv := []nvml.FieldValue{{FieldId: nvml.FI_DEV_NVLINK_GET_STATE, ScopeId: uint32(links)}}
	if ret := d.GetFieldValues(fv); ret != nvml.SUCCESS || nvml.Return(fv[0].NvmlReturn) != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("field NVLINK_GET_STATE of link %d: %v, %v; want the state's Invalid Argument", links, ret, nvml.Return(fv[0].NvmlReturn))
	}
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
