package profile

import (
	"fmt"
	"strings"
	"testing"
)

// treeText draws a tree one function per line, indented by depth, with
// roles and bridge bus ranges: the shape a test can compare whole.
func treeText(t *PCITree) string {
	var b strings.Builder
	var walk func(fs []*PCIFunction, depth int)
	walk = func(fs []*PCIFunction, depth int) {
		for _, f := range fs {
			fmt.Fprintf(&b, "%s%s %s %04x:%04x", strings.Repeat("  ", depth), f.Address, shortRoles[f.Role], f.Vendor, f.Device)
			if f.Role.IsBridge() {
				fmt.Fprintf(&b, " [%02x-%02x]", f.Secondary, f.Subordinate)
			}
			b.WriteString("\n")
			walk(f.Children, depth+1)
		}
	}
	for _, r := range t.Roots {
		fmt.Fprintf(&b, "pci%04x:%02x numa %d\n", r.Domain, r.Bus, r.NUMANode)
		walk(r.Functions, 1)
	}
	return b.String()
}

var shortRoles = map[PCIRole]string{RoleRootPort: "root-port", RoleSwitchUp: "switch-up", RoleSwitchDown: "switch-down",
	RoleGPU: "gpu", RoleNIC: "nic", RoleNVSwitch: "nvswitch"}

func node(t *testing.T, name, src string) *Node {
	t.Helper()
	p, err := Parse(name+".yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	n, err := p.Node()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A tree as firmware would number it: a bridge's children sit on its
// secondary bus, everything below it within its range, and no bus is used
// by two bridges or two roots. The kernel refuses trees that break this,
// and lspci draws them wrong.
func TestEveryBuiltinTreeIsNumberedAsFirmwareWould(t *testing.T) {
	for _, name := range Builtins() {
		t.Run(name, func(t *testing.T) {
			b, err := Builtin(name)
			if err != nil {
				t.Fatal(err)
			}
			for _, gpus := range []int{1, 8, 64} {
				if most := len(b.Topology.GPUNUMANodes); most > 0 && gpus > most {
					gpus = most // a coherent board's GPUs each own a NUMA node
				}
				n := node(t, name, fmt.Sprintf("base: %s\nname: x\ngpus: %d\n", name, gpus))
				seen := map[PCIAddress]bool{}
				owner := map[[2]uint32]string{} // domain, bus -> who has it
				claim := func(dom, bus uint32, who string) {
					if prev, ok := owner[[2]uint32{dom, bus}]; ok && prev != who {
						t.Errorf("%d GPUs: bus %04x:%02x is both %s's and %s's", gpus, dom, bus, prev, who)
					}
					owner[[2]uint32{dom, bus}] = who
				}
				var walk func(fs []*PCIFunction, bus uint32, lo, hi uint32)
				walk = func(fs []*PCIFunction, bus, lo, hi uint32) {
					for _, f := range fs {
						if seen[f.Address] {
							t.Errorf("%d GPUs: %s twice", gpus, f.Address)
						}
						seen[f.Address] = true
						if f.Address.Bus != bus {
							t.Errorf("%d GPUs: %s is on bus %02x, its parent leads to %02x", gpus, f.Address, f.Address.Bus, bus)
						}
						if !f.Role.IsBridge() {
							continue
						}
						if f.Secondary <= bus || f.Subordinate < f.Secondary || f.Secondary < lo || f.Subordinate > hi {
							t.Errorf("%d GPUs: %s has buses [%02x-%02x], outside its parent's [%02x-%02x]", gpus, f.Address, f.Secondary, f.Subordinate, lo, hi)
						}
						claim(f.Address.Domain, f.Secondary, f.Address.String())
						walk(f.Children, f.Secondary, f.Secondary, f.Subordinate)
					}
				}
				for _, r := range n.PCIe.Roots {
					claim(r.Domain, r.Bus, fmt.Sprintf("pci%04x:%02x", r.Domain, r.Bus))
					walk(r.Functions, r.Bus, r.Bus, 0xff)
				}
				for _, g := range n.GPUs {
					if g.Function == nil || g.Function.Address != g.Address || g.Function.Role != RoleGPU {
						t.Errorf("%d GPUs: GPU %d at %s has no function of its own in the tree", gpus, g.Index, g.Address)
					}
				}
			}
		})
	}
}

// The layouts of the real systems, as their vendors document them.
func TestBuiltinTreesAreTheRealSystems(t *testing.T) {
	type rel struct {
		a, b string // PCI addresses
		want string // deepest thing they share
	}
	for _, c := range []struct {
		board string
		rels  []rel
	}{
		// DGX A100: 4 switch complexes, each with 2 GPUs and 2 ConnectX-6,
		// each on a NUMA node of its own (NPS4).
		{"a100", []rel{{"0000:07:00.0", "0000:0f:00.0", "top switch"}, {"0000:07:00.0", "0000:0c:00.0", "top switch"},
			{"0000:07:00.0", "0000:12:00.0", "top switch"}, {"0000:07:00.0", "0000:47:00.0", "nothing"}, {"0000:07:00.0", "0000:87:00.0", "nothing"}}},
		// HGX H100: per GPU a host bridge, its ConnectX-7 beside it under one switch.
		{"h100", []rel{{"0000:53:00.0", "0000:50:00.0", "top switch"}, {"0000:53:00.0", "0000:64:00.0", "numa"}}},
		// HGX B200: two GPUs per leaf switch, two ConnectX-7 beside them.
		{"b200", []rel{{"0000:8f:00.0", "0000:90:00.0", "leaf switch"}, {"0000:8f:00.0", "0000:8b:00.0", "top switch"}}},
	} {
		t.Run(c.board, func(t *testing.T) {
			n := node(t, c.board, "base: "+c.board+"\nname: x\n")
			fns := map[string]*PCIFunction{}
			var walk func(fs []*PCIFunction)
			walk = func(fs []*PCIFunction) {
				for _, f := range fs {
					fns[f.Address.String()] = f
					walk(f.Children)
				}
			}
			for _, r := range n.PCIe.Roots {
				walk(r.Functions)
			}
			for _, r := range c.rels {
				a, b := fns[r.a], fns[r.b]
				if a == nil || b == nil {
					t.Fatalf("%s or %s is not in the tree:\n%s", r.a, r.b, treeText(n.PCIe))
				}
				if got := shared(a, b); got != r.want {
					t.Errorf("%s and %s share %s, want %s", r.a, r.b, got, r.want)
				}
			}
		})
	}
}

// A GB300 tray's GPU domain as an NVIDIA engineer posted it to the Linux
// iommu list (2025-04-25): the Grace root port at 00.0, and the
// ConnectX-8's switch reaching the GPU through its downstream port 03.0.
func TestGB300DomainIsThePostedHierarchy(t *testing.T) {
	n := node(t, "gb300", "base: gb300\nname: x\ngpus: 1\n")
	want := `pci0008:00 numa 0
  0008:00:00.0 root-port 10de:22b1 [01-06]
    0008:01:00.0 switch-up 15b3:197c [02-06]
      0008:02:00.0 switch-down 15b3:197c [03-03]
        0008:03:00.0 nic 15b3:1023
      0008:02:03.0 switch-down 15b3:197c [04-06]
        0008:04:00.0 switch-up 15b3:197c [05-06]
          0008:05:00.0 switch-down 15b3:197c [06-06]
            0008:06:00.0 gpu 10de:31c2
`
	if got, _, _ := strings.Cut(treeText(n.PCIe), "pci0009"); got != want {
		t.Errorf("got\n%swant\n%s", got, want)
	}
}

// shared names the deepest thing two endpoints have in common, from their
// parent chains, not from Placement, so that it checks Placement's input.
func shared(a, b *PCIFunction) string {
	up := func(f *PCIFunction) []*PCIFunction {
		var s []*PCIFunction
		for p := f.Parent; p != nil; p = p.Parent {
			if p.Role == RoleSwitchUp {
				s = append(s, p)
			}
		}
		return s
	}
	sa, sb := up(a), up(b)
	if len(sa) > 0 && len(sb) > 0 && sa[0] == sb[0] {
		return "leaf switch"
	}
	for _, x := range sa {
		for _, y := range sb {
			if x == y {
				return "top switch"
			}
		}
	}
	switch {
	case a.Root == b.Root:
		return "root"
	case a.Root.NUMANode == b.Root.NUMANode && a.Root.NUMANode >= 0:
		return "numa"
	}
	return "nothing"
}

func TestWithoutAPCIeBlockEachGPUHasARootBusOfItsOwn(t *testing.T) {
	n := node(t, "x", "base: h100\nname: x\ngpus: 2\ntopology:\n  busIds: [\"0000:1b:00.0\", \"0000:43:00.0\"]\n  numaNodes: [0, 1]\n")
	want := "pci0000:1b numa 0\n  0000:1b:00.0 gpu 10de:2330\npci0000:43 numa 1\n  0000:43:00.0 gpu 10de:2330\n"
	if got := treeText(n.PCIe); got != want {
		t.Errorf("got\n%swant\n%s", got, want)
	}
}

// Sixteen GPUs of an eight-GPU board: the tree repeats one PCI domain up,
// as a second baseboard behind its own host bridges would.
func TestRepeatedGPUsGetTheTreeAgainInTheNextDomain(t *testing.T) {
	n := node(t, "x", "base: b200\nname: x\ngpus: 16\n")
	if got, want := n.GPUs[8].Address.String(), "10000:8f:00.0"; got != want {
		t.Errorf("GPU 8 at %s, want %s", got, want)
	}
	if r := n.GPUs[8].Function.Root; r.Domain != 0x10000 || r.Bus != 0x88 {
		t.Errorf("GPU 8 under pci%04x:%02x, want pci10000:88", r.Domain, r.Bus)
	}
	if len(n.PCIe.Roots)%2 != 0 {
		t.Errorf("%d roots for two copies of one tree", len(n.PCIe.Roots))
	}
}

// A derived profile with fewer GPUs than its base's busIds places only
// the GPUs it has; the base's other bus ids are not GPUs of the node.
func TestATreeNeedsOnlyTheNodesGPUs(t *testing.T) {
	src := "base: h100\nname: x\ngpus: 1\npcie:\n  rootPort: {vendor: \"0x8086\", device: \"0x352a\"}\n  nics: []\n" +
		"  rootComplexes:\n    - bus: \"0000:4d\"\n      cpus: \"0-55,112-167\"\n      ports:\n        - device: \"0000:53:00.0\"\n"
	n := node(t, "x", src)
	if got, want := treeText(n.PCIe), "pci0000:4d numa 0\n  0000:4d:01.0 root-port 8086:352a [53-53]\n    0000:53:00.0 gpu 10de:2330\n"; got != want {
		t.Errorf("got\n%swant\n%s", got, want)
	}
}

func TestBadPCIeTreesAreNamedWithFileLineAndField(t *testing.T) {
	const head = "base: h100\nname: x\ngpus: 1\ntopology:\n  busIds: [\"0000:53:00.0\"]\n  numaNodes: [0]\npcie:\n"
	const ids = "  rootPort: {vendor: \"0x8086\", device: \"0x352a\"}\n  switch: {vendor: \"0x1000\", device: \"0xc030\"}\n  nics: []\n"
	const two = "base: h100\nname: x\ngpus: 2\ntopology:\n  busIds: [\"0000:53:00.0\", \"0000:58:00.0\"]\n  numaNodes: [0, 0]\npcie:\n"
	for _, c := range []struct{ name, src, want string }{
		{"a device that is not in the GPU list", head + ids + "  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - device: \"0000:54:00.0\"\n        - device: \"0000:53:00.0\"\n",
			"profile x.yaml:14: pcie.rootComplexes[0].ports[0].device: 0000:54:00.0 is not a GPU (topology.busIds), NIC (pcie.nics) or NVSwitch (topology.nvswitches) of the profile"},
		{"a GPU under two root complexes", head + ids + "  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - device: \"0000:53:00.0\"\n    - bus: \"0000:40\"\n      ports:\n        - device: \"0000:53:00.0\"\n",
			"profile x.yaml:17: pcie.rootComplexes[1].ports[0].device: 0000:53:00.0 is already placed at pcie.rootComplexes[0].ports[0].device"},
		{"a GPU nowhere in the tree", "base: h100\nname: x\ngpus: 2\ntopology:\n  busIds: [\"0000:53:00.0\", \"0000:64:00.0\"]\n  numaNodes: [0, 0]\npcie:\n" + ids + "  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - device: \"0000:53:00.0\"\n",
			"profile x.yaml:5: topology.busIds[1]: GPU 0000:64:00.0 is nowhere in the pcie tree"},
		{"a root bus in the wrong form", head + ids + "  rootComplexes:\n    - bus: \"4d\"\n      ports:\n        - device: \"0000:53:00.0\"\n",
			`profile x.yaml:12: pcie.rootComplexes[0].bus: "4d" is not a root bus such as "0000:40" (domain:bus)`},
		{"a switch without its ids", head + "  rootPort: {vendor: \"0x8086\", device: \"0x352a\"}\n  switch: null\n  nics: []\n  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - switch:\n            - device: \"0000:53:00.0\"\n",
			"profile x.yaml:14: pcie.rootComplexes[0].ports[0].switch: needs pcie.switch (the switch's PCI ids)"},
		{"a vendor id that is not hex", head + "  rootPort: {vendor: \"intel\", device: \"0x352a\"}\n  nics: []\n  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - device: \"0000:53:00.0\"\n",
			`profile x.yaml:8: pcie.rootPort.vendor: "intel" is not a 16-bit hex id such as "0x10de"`},
		{"a GPU in another domain than its root", head + ids + "  rootComplexes:\n    - bus: \"0001:4d\"\n      ports:\n        - device: \"0000:53:00.0\"\n",
			"profile x.yaml:14: pcie.rootComplexes[0].ports[0].device: 0000:53:00.0 is in PCI domain 0000, its root complex 0001:4d in 0001"},
		{"a GPU below its root bus", head + ids + "  rootComplexes:\n    - bus: \"0000:60\"\n      ports:\n        - device: \"0000:53:00.0\"\n",
			"profile x.yaml:12: pcie.rootComplexes[0]: ports[0]: 0000:53:00.0: bus 53 is taken; firmware numbers depth first, so this endpoint needs a bus above 60"},
		{"a switch without ports", head + ids + "  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - device: \"0000:53:00.0\"\n        - switch: []\n",
			"profile x.yaml:15: pcie.rootComplexes[0].ports[1]: leads nowhere: give a device, or a switch with its downstream ports"},
		{"a root complex whose CPUs are not its GPU's", head + ids + "  rootComplexes:\n    - bus: \"0000:4d\"\n      cpus: \"0-55\"\n      ports:\n        - device: \"0000:53:00.0\"\n",
			"profile x.yaml:12: pcie.rootComplexes[0]: GPU 0000:53:00.0 has CPUs 0-55,112-167 (topology.cpuAffinity), its root complex 0-55"},
		// Review: these passed validation.
		{"a root complex inside another's buses", two + ids + "  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - device: \"0000:58:00.0\"\n    - bus: \"0000:50\"\n      ports:\n        - device: \"0000:53:00.0\"\n",
			"profile x.yaml:15: pcie.rootComplexes[1].bus: 0000:50 lies within pcie.rootComplexes[0]'s buses 4d-58; each host bridge has a bus range of its own"},
		{"a root-bus device where a root port goes", "base: h100\nname: x\ngpus: 2\ntopology:\n  busIds: [\"0000:4d:01.0\", \"0000:53:00.0\"]\n  numaNodes: [0, 0]\npcie:\n" + ids +
			"  rootComplexes:\n    - bus: \"0000:4d\"\n      devices: [\"0000:4d:01.0\"]\n      ports:\n        - device: \"0000:53:00.0\"\n",
			"profile x.yaml:13: pcie.rootComplexes[0].devices[0]: 0000:4d:01.0 is root port ports[0]'s place on the root bus (01.0; without a slot, root ports are 01.0, 02.0 and on in order)"},
		{"a root-bus device at a root port's slot", "base: h100\nname: x\ngpus: 2\ntopology:\n  busIds: [\"0000:4d:00.0\", \"0000:53:00.0\"]\n  numaNodes: [0, 0]\npcie:\n" + ids +
			"  rootComplexes:\n    - bus: \"0000:4d\"\n      devices: [\"0000:4d:00.0\"]\n      ports:\n        - {slot: \"00.0\", device: \"0000:53:00.0\"}\n",
			"profile x.yaml:13: pcie.rootComplexes[0].devices[0]: 0000:4d:00.0 is root port ports[0]'s place on the root bus (00.0; without a slot, root ports are 01.0, 02.0 and on in order)"},
		{"a slot that is no slot", head + ids + "  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - {slot: \"1.1\", device: \"0000:53:00.0\"}\n",
			`profile x.yaml:14: pcie.rootComplexes[0].ports[0].slot: "1.1" is not a slot: device.function in hex as lspci prints them, 00.0 to 1f.7 (e.g. 01.1)`},
		{"a function past 7", head + ids + "  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - {slot: \"01.8\", device: \"0000:53:00.0\"}\n",
			`profile x.yaml:14: pcie.rootComplexes[0].ports[0].slot: "01.8" is not a slot: device.function in hex as lspci prints them, 00.0 to 1f.7 (e.g. 01.1)`},
		{"two root ports at one slot", two + ids + "  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - device: \"0000:53:00.0\"\n        - {slot: \"01.0\", device: \"0000:58:00.0\"}\n",
			"profile x.yaml:15: pcie.rootComplexes[0].ports[1]: is at 01.0, as [0] is; give one of them another slot"},
		{"two downstream ports at one slot", two + ids + "  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - switch:\n            - {slot: \"03.0\", device: \"0000:53:00.0\"}\n            - {slot: \"03.0\", device: \"0000:58:00.0\"}\n",
			"profile x.yaml:16: pcie.rootComplexes[0].ports[0].switch[1]: is at 03.0, as [0] is; give one of them another slot"},
		{"a NIC class that is not hex", head + "  rootPort: {vendor: \"0x8086\", device: \"0x352a\"}\n  nics:\n    - {bdf: \"0000:50:00.0\", vendor: \"0x15b3\", device: \"0x1021\", class: \"ib\"}\n  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - device: \"0000:53:00.0\"\n        - device: \"0000:50:00.0\"\n",
			`profile x.yaml:10: pcie.nics[0].class: "ib" is not a 24-bit hex id such as "0x020700"`},
		{"a root port that is no bridge", head + "  rootPort: {vendor: \"0x8086\", device: \"0x352a\", class: \"0x030200\"}\n  nics: []\n  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - device: \"0000:53:00.0\"\n",
			"profile x.yaml:8: pcie.rootPort.class: 0x030200: a root or switch port is a PCI-to-PCI bridge (0x0604xx)"},
		{"an NVSwitch function with a bridge's class", head + ids + "  nvswitchDevice: {vendor: \"0x10de\", device: \"0x22a3\", class: \"0x060400\"}\n  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - device: \"0000:53:00.0\"\n",
			"profile x.yaml:11: pcie.nvswitchDevice.class: 0x060400: an NVSwitch is no PCI-to-PCI bridge (such as 0x068000)"},
		{"a root complex's NUMA node out of range", head + ids + "  rootComplexes:\n    - bus: \"0000:4d\"\n      numaNode: 4000000000\n      ports:\n        - device: \"0000:53:00.0\"\n",
			"profile x.yaml:13: pcie.rootComplexes[0].numaNode: NUMA node 4000000000: NUMA nodes go up to 63"},
		{"a root complex with another node's CPUs", head + "  rootPort: {vendor: \"0x8086\", device: \"0x352a\"}\n  nics:\n    - {bdf: \"0000:55:00.0\", vendor: \"0x15b3\", device: \"0x1021\", class: \"0x020700\"}\n" +
			"  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - device: \"0000:53:00.0\"\n    - bus: \"0000:54\"\n      numaNode: 0\n      cpus: \"56-60\"\n      ports:\n        - device: \"0000:55:00.0\"\n",
			"profile x.yaml:15: pcie.rootComplexes[1]: cpus 56-60 are not those of NUMA node 0, 0-55,112-167 (its GPUs' topology.cpuAffinity)"},
		{"a tree of its own that keeps the base's NICs", "base: h100\nname: x\ngpus: 1\npcie:\n  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - device: \"0000:53:00.0\"\n",
			"profile x.yaml:4: pcie.nics: NICs 0000:50:00.0, 0000:55:00.0, 0000:61:00.0, 0000:72:00.0, 0000:83:00.0, 0000:94:00.0, 0000:99:00.0, 0000:a5:00.0, 0000:b6:00.0, 0000:c7:00.0 are nowhere in the pcie tree; a profile keeps its base h100's pcie.nics unless it gives its own (nics: [] for none)"},
		{"one NIC nowhere", head + "  rootPort: {vendor: \"0x8086\", device: \"0x352a\"}\n  nics:\n    - {bdf: \"0000:50:00.0\", vendor: \"0x15b3\", device: \"0x1021\", class: \"0x020700\"}\n  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - device: \"0000:53:00.0\"\n",
			"profile x.yaml:10: pcie.nics[0].bdf: NIC 0000:50:00.0 is nowhere in the pcie tree"},
		{"a NIC function without function 0", head + "  rootPort: {vendor: \"0x8086\", device: \"0x352a\"}\n  nics:\n    - {bdf: \"0000:50:00.1\", vendor: \"0x15b3\", device: \"0x1021\", class: \"0x020700\"}\n  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n        - device: \"0000:53:00.0\"\n",
			"profile x.yaml:10: pcie.nics[0].bdf: NIC function 0000:50:00.1 needs function 0 of its device among pcie.nics"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(c.src))
			if err == nil {
				t.Fatal("accepted")
			}
			if got := err.Error(); got != c.want {
				t.Errorf("got\n  %s\nwant\n  %s", got, c.want)
			}
		})
	}
}

// GPUs on one root bus (a VM's, on bus 0) share its host bridge: one root
// with both, as sysfs has it, not two roots of one name (QA: pcisim could
// not write them, and NVML called them NODE, not PHB).
func TestWithoutAPCIeBlockGPUsOnOneRootBusShareIt(t *testing.T) {
	n := node(t, "x", "base: t4\nname: x\ngpus: 2\ntopology:\n  busIds: [\"0000:00:1d.0\", \"0000:00:1e.0\"]\n")
	want := "pci0000:00 numa 0\n  0000:00:1d.0 gpu 10de:1eb8\n  0000:00:1e.0 gpu 10de:1eb8\n"
	if got := treeText(n.PCIe); got != want {
		t.Errorf("got\n%swant\n%s", got, want)
	}
	_, err := Parse("x.yaml", []byte("base: t4\nname: x\ngpus: 2\ntopology:\n  busIds: [\"0000:00:1d.0\", \"0000:00:1e.0\"]\n  numaNodes: [0, 1]\n"))
	if want := "share root bus 0000:00"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("GPUs of one root bus on two NUMA nodes: %v, want %q", err, want)
	}
}

// The GPUs of a repeated tree reach the NVSwitches of their own copy, which
// lspci shows there (QA: GPU 8 of 9 A100s named the first copy's).
func TestRepeatedGPUsReachTheirCopysNVSwitches(t *testing.T) {
	n := node(t, "x", "base: a100\nname: x\ngpus: 9\n")
	if got := n.GPUs[8].NVLinkSwitches[0].String(); got != "10000:c4:00.0" {
		t.Errorf("GPU 8's first NVLink reaches %s, want 10000:c4:00.0", got)
	}
	found := false
	n.PCIe.Walk(func(f *PCIFunction) {
		found = found || f.Role == RoleNVSwitch && f.Address.String() == "10000:c4:00.0"
	})
	if !found {
		t.Error("no NVSwitch 10000:c4:00.0 in the tree")
	}
}

// A profile that moves its GPUs gets the default tree, which has no
// NVSwitches: the base's go with the base's tree, and NVLinks name no
// switch (N/A), rather than one lspci lacks.
func TestMovedGPUsDropTheBasesNVSwitchesWithItsTree(t *testing.T) {
	n := node(t, "x", "base: a100\nname: x\ngpus: 2\ntopology:\n  busIds: [\"0000:1b:00.0\", \"0000:43:00.0\"]\n  numaNodes: [0, 0]\n  cpuAffinity: [\"0-63\", \"0-63\"]\n")
	if s := n.GPUs[0].NVLinkSwitches; s != nil {
		t.Errorf("GPU 0's NVLinks reach %v, want no switch of the node", s)
	}
}

// A device number has 5 bits: 31 root ports at most (devices 1-31), 32
// downstream ports of a switch (review: 0000:00:20.0 was rendered).
func TestPortsPastTheDeviceNumbersAreRefused(t *testing.T) {
	ports := func(indent string, n int) string {
		return strings.Repeat(indent+"- device: \"0000:53:00.0\"\n", n)
	}
	const head = "base: h100\nname: x\ngpus: 1\ntopology:\n  busIds: [\"0000:53:00.0\"]\n  numaNodes: [0]\npcie:\n" +
		"  rootPort: {vendor: \"0x8086\", device: \"0x352a\"}\n  switch: {vendor: \"0x1000\", device: \"0xc030\"}\n  nics: []\n  rootComplexes:\n    - bus: \"0000:4d\"\n      ports:\n"
	for _, c := range []struct{ src, want string }{
		{head + ports("        ", 32), "pcie.rootComplexes[0].ports: 32 root ports; a root bus has devices 1 to 31 for them"},
		{head + "        - switch:\n" + ports("            ", 33), "pcie.rootComplexes[0].ports[0].switch: 33 downstream ports; a switch's internal bus has devices 0 to 31 for them"},
	} {
		_, err := Parse("x.yaml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v\nwant an error with %q", err, c.want)
		}
	}
	for _, ok := range []string{head + ports("        ", 31), head + "        - switch:\n" + ports("            ", 32)} {
		if _, err := Parse("x.yaml", []byte(ok)); err != nil && strings.Contains(err.Error(), "for them") {
			t.Errorf("the last device number refused: %v", err)
		}
	}
}
