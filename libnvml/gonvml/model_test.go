//go:build integration

package gonvml

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/profile"
)

// startProfile compiles a profile written as YAML and inits go-nvml on it;
// it returns the dev root, where a test may put device nodes before Init.
func startProfile(t *testing.T, yaml string, nodes ...string) (nvml.Interface, *profile.Profile) {
	t.Helper()
	p, err := profile.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	root := cleanEnv(t, testenv.SnapshotOf(t, p))
	for _, n := range nodes {
		touch(t, filepath.Join(root, n))
	}
	lib := newLib(t)
	start(t, lib)
	return lib, p
}

func deviceAt(t *testing.T, lib nvml.Interface, i int) nvml.Device {
	t.Helper()
	d, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetHandleByIndex(%d): %v", i, ret)
	}
	return d
}

// The energy counter is what the board has drawn since the node booted: it
// grows with power over time, at each GPU's own power.
func TestEnergyGrowsWithPowerOverTime(t *testing.T) {
	lib, p := startProfile(t, "name: e\nbase: a100\ngpus: 2\ndevices:\n  - index: 1\n    board: {power: {draw: 397.44}}\n")
	d0, d1 := deviceAt(t, lib, 0), deviceAt(t, lib, 1)
	read := func() (uint64, uint64) {
		e0, r0 := d0.GetTotalEnergyConsumption()
		e1, r1 := d1.GetTotalEnergyConsumption()
		if r0 != nvml.SUCCESS || r1 != nvml.SUCCESS {
			t.Fatalf("GetTotalEnergyConsumption: %v, %v", r0, r1)
		}
		return e0, e1
	}
	// Each read is bracketed by the clock, so the energy between two reads
	// lies between what the board draws in the time between the brackets
	// and in the time across them (review: a tolerance on one interval
	// could fail on a loaded machine), give or take the model's
	// millisecond steps.
	beforeA := time.Now()
	a0, a1 := read()
	afterA := time.Now()
	time.Sleep(300 * time.Millisecond)
	beforeB := time.Now()
	b0, b1 := read()
	afterB := time.Now()
	if b0 <= a0 || b1 <= a1 {
		t.Fatalf("energy did not grow: GPU 0 %d -> %d mJ, GPU 1 %d -> %d mJ", a0, b0, a1, b1)
	}
	// mJ = W x ms.
	draw := *p.Board.Power.Draw
	lo := draw * float64(beforeB.Sub(afterA).Milliseconds()-2)
	hi := draw * float64(afterB.Sub(beforeA).Milliseconds()+2)
	if got := float64(b0 - a0); got < lo || got > hi {
		t.Errorf("GPU 0 drew %.0f mJ between two reads at %.2f W, want %.0f to %.0f (%v to %v apart)", got, draw, lo, hi, beforeB.Sub(afterA), afterB.Sub(beforeA))
	}
	if r := float64(b1-a1) / float64(b0-a0); r < 7.2 || r > 8.8 {
		t.Errorf("GPU 1 at 397.44 W grew %.2f times as fast as GPU 0 at %.2f W, want 8", r, *p.Board.Power.Draw)
	}
	// The field value reads the same counter.
	v := []nvml.FieldValue{{FieldId: nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION}}
	checkRet(t, "GetFieldValues", d0.GetFieldValues(v), nvml.SUCCESS)
	c0, _ := read()
	if got := binary.LittleEndian.Uint64(v[0].Value[:]); nvml.Return(v[0].NvmlReturn) != nvml.SUCCESS || got < b0 || got > c0 {
		t.Errorf("FI_DEV_TOTAL_ENERGY_CONSUMPTION = %d (%v), want between %d and %d", got, nvml.Return(v[0].NvmlReturn), b0, c0)
	}
}

// P2P follows the modelled topology: NVLink peers do everything; PCIe peers
// read and write within a socket but have no atomics, and the inter-socket
// link carries no peer traffic.
func TestP2PFollowsTheTopology(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		a, b       int
		want       map[nvml.GpuP2PCapsIndex]nvml.GpuP2PStatus
	}{
		{"A100 pairs across sockets over NVSwitch", "name: x\nbase: a100\n", 0, 7, map[nvml.GpuP2PCapsIndex]nvml.GpuP2PStatus{
			nvml.P2P_CAPS_INDEX_READ: nvml.P2P_STATUS_OK, nvml.P2P_CAPS_INDEX_WRITE: nvml.P2P_STATUS_OK,
			nvml.P2P_CAPS_INDEX_NVLINK: nvml.P2P_STATUS_OK, nvml.P2P_CAPS_INDEX_ATOMICS: nvml.P2P_STATUS_OK,
			nvml.P2P_CAPS_INDEX_PCI: nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED,
		}},
		{"L40S pairs on one socket over PCIe", l40sFour, 0, 1, map[nvml.GpuP2PCapsIndex]nvml.GpuP2PStatus{
			nvml.P2P_CAPS_INDEX_READ: nvml.P2P_STATUS_OK, nvml.P2P_CAPS_INDEX_WRITE: nvml.P2P_STATUS_OK,
			nvml.P2P_CAPS_INDEX_NVLINK: nvml.P2P_STATUS_NOT_SUPPORTED, nvml.P2P_CAPS_INDEX_ATOMICS: nvml.P2P_STATUS_NOT_SUPPORTED,
			nvml.P2P_CAPS_INDEX_PCI: nvml.P2P_STATUS_OK,
		}},
		{"L40S pairs across sockets", l40sFour, 1, 2, map[nvml.GpuP2PCapsIndex]nvml.GpuP2PStatus{
			nvml.P2P_CAPS_INDEX_READ: nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED, nvml.P2P_CAPS_INDEX_WRITE: nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED,
			nvml.P2P_CAPS_INDEX_NVLINK: nvml.P2P_STATUS_NOT_SUPPORTED, nvml.P2P_CAPS_INDEX_ATOMICS: nvml.P2P_STATUS_NOT_SUPPORTED,
			nvml.P2P_CAPS_INDEX_PCI: nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			lib, _ := startProfile(t, c.yaml)
			a, b := deviceAt(t, lib, c.a), deviceAt(t, lib, c.b)
			for idx, want := range c.want {
				for _, pair := range [][2]nvml.Device{{a, b}, {b, a}} {
					got, ret := lib.DeviceGetP2PStatus(pair[0], pair[1], idx)
					check(t, fmt.Sprintf("GetP2PStatus(caps index %d)", idx), got, ret, want)
				}
			}
		})
	}
}

// Four L40S in a two-socket server: GPUs 0-1 on socket 0, 2-3 on socket 1.
const l40sFour = `name: l40s-4
base: l40s
gpus: 4
topology:
  busIds: ["0000:30:00.0", "0000:31:00.0", "0000:B0:00.0", "0000:B1:00.0"]
  numaNodes: [0, 0, 1, 1]
  cpuAffinity: ["0-31,64-95", "0-31,64-95", "32-63,96-127", "32-63,96-127"]
`

// Direct GPU NVLinks pair the node's GPUs: both ends of a link name each
// other, on the same link number, and no GPU links to itself (QA: a ring
// whose far ends never pointed back made topo -m lopsided, and 2 GPUs
// linked to themselves). A process that sees only some GPUs finds each
// link's far end where it is on the node.
func TestDirectNVLinksPairTheGPUs(t *testing.T) {
	yaml := "name: ring\nbase: a100\ntopology: {nvswitches: []}\nboard:\n  nvlink: {version: \"3.1\", links: 12, speedMBps: 25000, remote: gpu}\n"
	farEnds := map[[2]int]string{} // of the 8 GPUs, all seen
	for _, gpus := range []int{2, 3, 8} {
		t.Run(fmt.Sprint(gpus, " GPUs"), func(t *testing.T) {
			lib, p := startProfile(t, fmt.Sprintf("%sgpus: %d\n", yaml, gpus))
			index := map[string]int{}
			for i := 0; i < gpus; i++ {
				index[snapshot.BusID(p, i)] = i
			}
			far := func(i, link int) int {
				pci, ret := deviceAt(t, lib, i).GetNvLinkRemotePciInfo(link)
				if ret == nvml.ERROR_NOT_SUPPORTED {
					return -1 // no partner on this link
				}
				j, ok := index[cstr(pci.BusId[:])]
				if gpus == 8 {
					farEnds[[2]int{i, link}] = cstr(pci.BusId[:])
				}
				if ret != nvml.SUCCESS || !ok {
					t.Fatalf("GPU %d link %d: %v, %q is no GPU of the node", i, link, ret, cstr(pci.BusId[:]))
				}
				return j
			}
			pairs := map[[2]int]int{} // links between i and j, i < j
			for i := 0; i < gpus; i++ {
				for link := 0; link < 12; link++ {
					j := far(i, link)
					if j > i {
						pairs[[2]int{i, j}]++
					}
					state, _ := deviceAt(t, lib, i).GetNvLinkState(link)
					switch {
					case j < 0 && state != nvml.FEATURE_DISABLED:
						t.Errorf("GPU %d link %d reaches no GPU but is active", i, link)
					case j == i:
						t.Errorf("GPU %d link %d reaches itself", i, link)
					case j >= 0 && far(j, link) != i:
						t.Errorf("GPU %d link %d reaches GPU %d, whose link %d reaches GPU %d", i, link, j, link, far(j, link))
					}
				}
			}
			// Spread evenly: every pair linked, by counts one apart at most.
			lo, hi := 12, 0
			for i := 0; i < gpus; i++ {
				for j := i + 1; j < gpus; j++ {
					lo, hi = min(lo, pairs[[2]int{i, j}]), max(hi, pairs[[2]int{i, j}])
				}
			}
			if lo == 0 || hi-lo > 1 {
				t.Errorf("links per pair of GPUs from %d to %d, want all pairs linked, evenly", lo, hi)
			}
		})
	}
	t.Run("P2P over NVLink only where a link joins the pair", func(t *testing.T) {
		lib, _ := startProfile(t, strings.Replace(yaml, "links: 12", "links: 2", 1)+"gpus: 8\n")
		linked := map[int]bool{}
		for link := 0; link < 2; link++ {
			pci, _ := deviceAt(t, lib, 0).GetNvLinkRemotePciInfo(link)
			for j := 1; j < 8; j++ {
				if p, _ := deviceAt(t, lib, j).GetPciInfo(); p.BusId == pci.BusId {
					linked[j] = true
				}
			}
		}
		for j := 1; j < 8; j++ {
			st, ret := lib.DeviceGetP2PStatus(deviceAt(t, lib, 0), deviceAt(t, lib, j), nvml.P2P_CAPS_INDEX_NVLINK)
			want := map[bool]nvml.GpuP2PStatus{true: nvml.P2P_STATUS_OK, false: nvml.P2P_STATUS_NOT_SUPPORTED}[linked[j]]
			check(t, fmt.Sprintf("NVLink P2P of GPUs 0 and %d (linked %v)", j, linked[j]), st, ret, want)
		}
	})
	t.Run("GPUs 2 and 5 seen", func(t *testing.T) {
		lib, _ := startProfile(t, yaml+"gpus: 8\n", "nvidiactl", "nvidia2", "nvidia5")
		for vis, node := range []int{2, 5} {
			for link := 0; link < 12; link++ {
				pci, _ := deviceAt(t, lib, vis).GetNvLinkRemotePciInfo(link)
				if got, want := cstr(pci.BusId[:]), farEnds[[2]int{node, link}]; got != want {
					t.Errorf("GPU %d link %d's far end %q, want %q as with all GPUs seen", node, link, got, want)
				}
			}
		}
	})
}

// What the chip is and what it answers comes from the board, per board.
func TestChipFactsComeFromTheBoard(t *testing.T) {
	for _, name := range profile.Builtins() {
		t.Run(name, func(t *testing.T) {
			path, p := testenv.Snapshot(t, name, 1)
			cleanEnv(t, path)
			lib := newLib(t)
			start(t, lib)
			d := deviceAt(t, lib, 0)
			b := &p.Board
			w, ret := d.GetMemoryBusWidth()
			checkOpt(t, "GetMemoryBusWidth", uint32(w), ret, b.MemoryBusWidth)
			cores, ret := d.GetNumGpuCores()
			checkOpt(t, "GetNumGpuCores", uint32(cores), ret, b.CUDACores)
			bus, ret := d.GetBusType()
			check(t, "GetBusType", bus, ret, nvml.BusType(profile.BusTypes[b.BusType]))
			src, ret := d.GetPowerSource()
			check(t, "GetPowerSource", src, ret, nvml.PowerSource(profile.PowerSources[b.PowerSource]))
			caps, ret := d.GetCapabilities()
			check(t, "GetCapabilities.CapMask", caps.CapMask, ret, 0) // EGM disabled, as captured
			def, ret := d.GetDefaultEccMode()
			check(t, "GetDefaultEccMode", def, ret, enableState(b.Modes.ECC.Default))
			reasons, ret := d.GetSupportedClocksEventReasons()
			check(t, "GetSupportedClocksEventReasons", reasons, ret, uint64(b.ClockEventReasonMask()))
			margin, ret := d.GetMarginTemperature()
			if b.Thermal.TLimit == nil {
				checkRet(t, "GetMarginTemperature without a T.Limit sensor", ret, nvml.ERROR_NOT_SUPPORTED)
			} else {
				check(t, "GetMarginTemperature", margin.MarginTemperature, ret, int32(*b.Thermal.TLimit))
			}
			numa, ret := d.GetNumaNodeId()
			if g := p.Topology.GPUNUMANodes; len(g) > 0 {
				check(t, "GetNumaNodeId", numa, ret, int(g[0]))
			} else {
				checkRet(t, "GetNumaNodeId on a node whose GPU memory is no NUMA node", ret, nvml.ERROR_NOT_SUPPORTED)
			}
			viol, ret := d.GetViolationStatus(nvml.PERF_POLICY_POWER)
			now := uint64(time.Now().UnixMicro())
			if ret != nvml.SUCCESS || viol.ViolationTime != 0 || viol.ReferenceTime+5e6 < now || viol.ReferenceTime > now {
				t.Errorf("GetViolationStatus(POWER) = %+v (%v), want no violation measured up to now (%d us)", viol, ret, now)
			}
			ps, ret := d.GetDynamicPstatesInfo()
			if ret != nvml.SUCCESS || ps.Utilization[0].BIsPresent != 1 || ps.Utilization[0].Percentage != *b.Utilization.GPU {
				t.Errorf("GetDynamicPstatesInfo = %+v (%v), want GPU utilization %d present", ps.Utilization[0], ret, *b.Utilization.GPU)
			}
			// Accounting is supported and off on every captured board: an empty list.
			pids, ret := d.GetAccountingPids()
			if ret != nvml.SUCCESS || len(pids) != 0 {
				t.Errorf("GetAccountingPids = %v (%v), want none", pids, ret)
			}
			// The captures print 0 MiB of protected memory on every board, T4 included.
			cc, ret := d.GetConfComputeProtectedMemoryUsage()
			check(t, "GetConfComputeProtectedMemoryUsage", cc, ret, nvml.Memory{})
		})
	}
}

// The GPU reset status fields are deprecated from driver 570 on (the A100
// capture's 570 prints so); an older driver answers no reset needed.
func TestResetStatusFollowsTheDriver(t *testing.T) {
	for _, c := range []struct {
		driver string
		ret    nvml.Return
	}{{"570.148.08", nvml.ERROR_DEPRECATED}, {"535.261.03", nvml.SUCCESS}} {
		t.Run(c.driver, func(t *testing.T) {
			lib, _ := startProfile(t, "name: r\nbase: a100\ngpus: 1\ndriver: {version: "+c.driver+"}\n")
			v := []nvml.FieldValue{{FieldId: nvml.FI_DEV_RESET_STATUS}, {FieldId: nvml.FI_DEV_DRAIN_AND_RESET_STATUS}}
			checkRet(t, "GetFieldValues", deviceAt(t, lib, 0).GetFieldValues(v), nvml.SUCCESS)
			for _, f := range v {
				checkRet(t, fmt.Sprintf("field %d", f.FieldId), nvml.Return(f.NvmlReturn), c.ret)
			}
		})
	}
}

// The fabric health is the board's as captured: full bandwidth and healthy
// routes on an NVL72 tray, nothing reported on an H100 baseboard.
func TestFabricHealthIsTheBoards(t *testing.T) {
	for _, c := range []struct {
		board   string
		mask    uint32
		summary uint8
	}{{"gb200", 0xAA, nvml.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY}, {"gb300", 0x1AA, nvml.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY},
		{"b200", 0x80, nvml.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY}, {"h100", 0, nvml.GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED}} {
		t.Run(c.board, func(t *testing.T) {
			path, _ := testenv.Snapshot(t, c.board, 1)
			cleanEnv(t, path)
			lib := newLib(t)
			start(t, lib)
			info, ret := deviceAt(t, lib, 0).GetGpuFabricInfoV().V3()
			check(t, "fabric health mask", info.HealthMask, ret, c.mask)
			check(t, "fabric health summary", info.HealthSummary, ret, c.summary)
		})
	}
}

// GPUs of a repeated tree (past the board's bus ids) reach the NVSwitches
// of their own copy, as lspci shows them (QA: GPU 8 of 9 A100s named the
// first copy's).
func TestRepeatedGPUsNameTheirCopysNVSwitches(t *testing.T) {
	lib, _ := startProfile(t, "name: a100x9\nbase: a100\ngpus: 9\n")
	for i, want := range map[int]string{0: "00000000:C4:00.0", 8: "00010000:C4:00.0"} {
		pci, ret := deviceAt(t, lib, i).GetNvLinkRemotePciInfo(0)
		check(t, fmt.Sprintf("GPU %d link 0's switch", i), cstr(pci.BusId[:]), ret, want)
	}
}
