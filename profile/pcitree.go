package profile

import (
	"fmt"
	"slices"
	"strings"
)

// PCITree is the node's PCI hierarchy, resolved: every function with its
// ids, links and bus numbers, as the kernel would enumerate it.
type PCITree struct {
	Roots []*PCIRoot
}

// PCIRoot is a host bridge and its root bus.
type PCIRoot struct {
	Domain, Bus uint32
	NUMANode    int // -1: none
	CPUs        CPUSet
	Functions   []*PCIFunction // on the root bus: root ports, integrated endpoints
}

// PCIRole is what a function is in the tree.
type PCIRole int

const (
	RoleRootPort PCIRole = iota
	RoleSwitchUp
	RoleSwitchDown
	RoleGPU
	RoleNIC
	RoleNVSwitch
)

// TrainedLink is the link an endpoint trains to: its own, or its maximum
// where none is given, capped by its parent port's maximum. lspci's LnkSta
// and NVML's current link both read it, so they cannot disagree.
func (f *PCIFunction) TrainedLink() (gen, width uint32) {
	gen, width = f.LinkGen, f.LinkWidth
	if gen == 0 {
		gen = f.MaxLinkGen
	}
	if width == 0 {
		width = f.MaxLinkWidth
	}
	if p := f.Parent; p != nil {
		gen, width = min(gen, p.MaxLinkGen), min(width, p.MaxLinkWidth)
	}
	return gen, width
}

// IsBridge says whether the role is a PCI-to-PCI bridge.
func (r PCIRole) IsBridge() bool { return r <= RoleSwitchDown }

// PCIFunction is one PCI function.
type PCIFunction struct {
	Address                    PCIAddress
	Role                       PCIRole
	Vendor, Device             uint16
	SubsystemVendor, SubDevice uint16
	Class                      uint32
	Revision                   uint8
	MaxLinkGen, MaxLinkWidth   uint32
	LinkGen, LinkWidth         uint32 // as trained
	Secondary, Subordinate     uint32 // bridges: the buses behind
	Index                      int    // GPU, NIC or NVSwitch index
	Name                       string // a NIC's RDMA device name
	// Unbound is a function no driver took: a NIC of a repeated tree,
	// which has no RDMA device (InfiniBand covers pcie.nics once).
	Unbound               bool
	Root                  *PCIRoot
	Parent                *PCIFunction // nil on the root bus
	Children              []*PCIFunction
	NUMANode              int
	topSwitch, leafSwitch *PCIFunction
}

// Placement is where a GPU or NIC sits, for NVML's topology levels: its
// root complex, the top-most and the nearest switch above it (nil: none).
func (f *PCIFunction) Placement() (root *PCIRoot, top, leaf *PCIFunction) {
	return f.Root, f.topSwitch, f.leafSwitch
}

// endpoint is a GPU, NIC or NVSwitch waiting for its place in the tree.
type endpoint struct {
	addr PCIAddress
	fn   *PCIFunction
}

// buildTree resolves the profile's pcie block (or the default: each GPU
// alone on a root bus of its own) for the node's GPUs. A profile's tree
// repeats, one PCI domain up (+0x10000), for each repeat of its bus ids.
func buildTree(p *Profile, gpus []GPU) (*PCITree, error) {
	t := &PCITree{}
	repeats := (len(gpus) + len(p.Topology.BusIDs) - 1) / len(p.Topology.BusIDs)
	x := p.PCIe
	if x == nil {
		// Each GPU on its root bus; GPUs that share one (a VM's on bus 0)
		// share its host bridge, and so its NUMA node and CPUs.
		roots := map[[2]uint32]*PCIRoot{}
		first := map[*PCIRoot]*GPU{}
		for i := range gpus {
			g := &gpus[i]
			key := [2]uint32{g.Address.Domain, g.Address.Bus}
			r := roots[key]
			if r == nil {
				r = &PCIRoot{Domain: g.Address.Domain, Bus: g.Address.Bus, NUMANode: g.NUMANode}
				if g.CPUs != nil {
					r.CPUs = *g.CPUs
				}
				roots[key], first[r] = r, g
				t.Roots = append(t.Roots, r)
			} else if f := first[r]; f.NUMANode != g.NUMANode || (f.CPUs == nil) != (g.CPUs == nil) || (f.CPUs != nil && *f.CPUs != *g.CPUs) {
				return nil, fmt.Errorf("topology: GPUs %s and %s share root bus %04x:%02x, so its NUMA node and CPUs, but are given different ones; give them the same topology.numaNodes and topology.cpuAffinity entries, or a pcie: tree", f.Address, g.Address, r.Domain, r.Bus)
			}
			r.Functions = append(r.Functions, gpuFunction(g, r, nil))
		}
		return t, nil
	}
	for rep := 0; rep < repeats; rep++ {
		shift := uint32(rep) << 16
		eps := map[PCIAddress]*endpoint{}
		for i := rep * len(p.Topology.BusIDs); i < len(gpus) && i < (rep+1)*len(p.Topology.BusIDs); i++ {
			eps[gpus[i].Address] = &endpoint{addr: gpus[i].Address, fn: gpuFunction(&gpus[i], nil, nil)}
		}
		var nicFns []*PCIFunction
		for i, nic := range x.NICs {
			a, _ := ParsePCIAddress(nic.BDF) // validated
			a.Domain += shift
			f := modelFunction(&nic.PCIModel, a, RoleNIC, ClassIB)
			f.Index, f.Name = rep*len(x.NICs)+i, nic.Name
			if rep > 0 && strings.HasPrefix(nic.Name, "mlx5_") {
				// The kernel names mlx5 devices in probe order.
				f.Name = fmt.Sprintf("mlx5_%d", f.Index)
			}
			f.Unbound = rep > 0
			if a.Function == 0 {
				eps[a] = &endpoint{addr: a, fn: f}
			}
			nicFns = append(nicFns, f)
		}
		for i, s := range p.Topology.NVSwitches {
			a, _ := ParsePCIAddress(s) // validated
			a.Domain += shift
			if x.NVSwitchDevice != nil {
				f := modelFunction(x.NVSwitchDevice, a, RoleNVSwitch, ClassNVSwitch)
				f.Index = i
				eps[a] = &endpoint{addr: a, fn: f}
			}
		}
		for i, rc := range x.RootComplexes {
			r, err := buildRoot(p, gpus, &rc, shift, eps, x)
			if err != nil {
				return nil, fmt.Errorf("pcie.rootComplexes[%d]: %w", i, err)
			}
			t.Roots = append(t.Roots, r)
		}
		// Other functions of multi-function NICs join their function 0.
		for _, f := range nicFns {
			if f.Address.Function == 0 {
				continue
			}
			f0 := f.Address
			f0.Function = 0
			if e := eps[f0]; e != nil && e.fn.Root != nil {
				e.fn.attachSibling(f)
			}
		}
	}
	return t, nil
}

// buildRoot places one root complex's functions and numbers its buses.
func buildRoot(p *Profile, gpus []GPU, rc *RootComplex, shift uint32, eps map[PCIAddress]*endpoint, x *PCIe) (*PCIRoot, error) {
	dom, bus, _ := parseRootBus(rc.Bus) // validated
	r := &PCIRoot{Domain: dom + shift, Bus: bus, NUMANode: -1}
	if rc.NUMANode != nil {
		r.NUMANode = int(*rc.NUMANode)
	}
	place := func(s string) *PCIFunction {
		a, _ := ParsePCIAddress(s) // validated
		a.Domain += shift
		if e := eps[a]; e != nil {
			return e.fn
		}
		return nil // a GPU beyond the node's count
	}
	for _, s := range rc.Devices {
		f := place(s)
		if f == nil {
			continue
		}
		if f.Address.Bus != bus {
			return nil, fmt.Errorf("devices: %s is not on the root bus %02x", s, bus)
		}
		f.Root = r
		r.Functions = append(r.Functions, f)
	}
	b := &busNumbers{next: bus + 1, root: bus}
	for k, pt := range rc.Ports {
		d, fn, _ := pt.slotOf(k, 1) // validated
		rp := modelFunction(x.RootPort, PCIAddress{Domain: r.Domain, Bus: bus, Device: d, Function: fn}, RoleRootPort, ClassBridgePCI)
		used, err := b.port(rp, pt, place, x)
		if err != nil {
			return nil, fmt.Errorf("ports[%d]: %w", k, err)
		}
		if used {
			r.Functions = append(r.Functions, rp)
		}
	}
	markSwitches(r.Functions, nil, nil)
	// NUMA and CPUs: the root's own, else its GPUs'; they must agree.
	var cpus *CPUSet
	var walk func(fs []*PCIFunction) error
	walk = func(fs []*PCIFunction) error {
		for _, f := range fs {
			f.Root = r
			if f.Role == RoleGPU {
				g := &gpus[f.Index]
				switch {
				case r.NUMANode == -1 && rc.NUMANode == nil:
					r.NUMANode = g.NUMANode
				case g.NUMANode != r.NUMANode:
					return fmt.Errorf("GPU %s is on NUMA node %d (topology.numaNodes), its root complex on %d", g.Address, g.NUMANode, r.NUMANode)
				}
				if cpus == nil {
					cpus = g.CPUs
				}
			}
			if err := walk(f.Children); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(r.Functions); err != nil {
		return nil, err
	}
	switch {
	case rc.CPUs != "":
		m, _ := ParseCPUList(rc.CPUs) // validated
		r.CPUs = m
	case cpus != nil:
		r.CPUs = *cpus
	default:
		r.CPUs = nodeCPUs(gpus, r.NUMANode, true)
	}
	// sysfs gives every device of the root its CPUs; NVML each GPU's own.
	if err := sameCPUs(r, gpus); err != nil {
		return nil, err
	}
	// The kernel gives a device its node's CPUs (review: a root without
	// GPUs could have another node's).
	if own := nodeCPUs(gpus, r.NUMANode, false); rc.CPUs != "" && own != (CPUSet{}) && r.CPUs != own {
		return nil, fmt.Errorf("cpus %s are not those of NUMA node %d, %s (its GPUs' topology.cpuAffinity)", r.CPUs.List(), r.NUMANode, own.List())
	}
	var numa func(fs []*PCIFunction)
	numa = func(fs []*PCIFunction) {
		for _, f := range fs {
			f.NUMANode = r.NUMANode
			numa(f.Children)
		}
	}
	numa(r.Functions)
	return r, nil
}

// nodeCPUs are the CPUs of a NUMA node's GPUs, else, with orAll, of all
// GPUs.
func nodeCPUs(gpus []GPU, node int, orAll bool) CPUSet {
	var own, all CPUSet
	for i := range gpus {
		if gpus[i].CPUs == nil {
			continue
		}
		for w, v := range gpus[i].CPUs {
			all[w] |= v
			if gpus[i].NUMANode == node {
				own[w] |= v
			}
		}
	}
	if own != (CPUSet{}) || !orAll {
		return own
	}
	return all
}

// busNumbers numbers a root complex's buses depth first, as firmware does:
// a bridge to an endpoint takes the endpoint's bus, a switch takes the next
// free numbers for its upstream port and its internal bus.
type busNumbers struct{ root, next uint32 }

func (b *busNumbers) port(br *PCIFunction, pt PCIePort, place func(string) *PCIFunction, x *PCIe) (used bool, err error) {
	if pt.Device != "" {
		ep := place(pt.Device)
		if ep == nil {
			return false, nil // a GPU beyond the node's count: no device, no port
		}
		bus := ep.Address.Bus
		if bus < b.next {
			return false, fmt.Errorf("%s: bus %02x is taken; firmware numbers depth first, so this endpoint needs a bus above %02x", ep.Address, bus, b.next-1)
		}
		br.Secondary, br.Subordinate = bus, bus
		b.next = bus + 1
		br.adopt(ep)
		return true, nil
	}
	first := minBus(pt.Switch, place)
	if first == noBus {
		return false, nil // nothing of the node behind it
	}
	up, internal := b.next, b.next+1
	if internal >= first {
		return false, fmt.Errorf("switch: no free bus numbers for its ports below its first endpoint's bus %02x (they would be %02x and %02x)", first, up, internal)
	}
	b.next = internal + 1
	us := modelFunction(x.Switch, PCIAddress{Domain: br.Address.Domain, Bus: up}, RoleSwitchUp, ClassBridgePCI)
	us.Secondary = internal
	for k, down := range pt.Switch {
		d, fn, _ := down.slotOf(k, 0) // validated
		ds := modelFunction(x.Switch, PCIAddress{Domain: br.Address.Domain, Bus: internal, Device: d, Function: fn}, RoleSwitchDown, ClassBridgePCI)
		u, err := b.port(ds, down, place, x)
		if err != nil {
			return false, fmt.Errorf("switch[%d]: %w", k, err)
		}
		if u {
			us.adopt(ds)
		}
	}
	us.Subordinate = b.next - 1
	br.Secondary, br.Subordinate = up, b.next-1
	br.adopt(us)
	return true, nil
}

const noBus = 0x100

// minBus is the lowest endpoint bus under a switch's ports.
func minBus(ports []PCIePort, place func(string) *PCIFunction) uint32 {
	m := uint32(noBus)
	for _, pt := range ports {
		if pt.Device != "" {
			if f := place(pt.Device); f != nil {
				m = min(m, f.Address.Bus)
			}
			continue
		}
		m = min(m, minBus(pt.Switch, place))
	}
	return m
}

func (f *PCIFunction) adopt(c *PCIFunction) {
	c.Parent = f
	f.Children = append(f.Children, c)
}

// markSwitches records, for each function, the top-most and the nearest
// switch above it.
func markSwitches(fs []*PCIFunction, top, leaf *PCIFunction) {
	for _, f := range fs {
		f.topSwitch, f.leafSwitch = top, leaf
		if f.Role == RoleSwitchUp {
			t := top
			if t == nil {
				t = f
			}
			markSwitches(f.Children, t, f)
			continue
		}
		markSwitches(f.Children, top, leaf)
	}
}

// attachSibling puts another function of f's device beside it.
func (f *PCIFunction) attachSibling(s *PCIFunction) {
	s.Root, s.NUMANode = f.Root, f.NUMANode
	s.topSwitch, s.leafSwitch = f.topSwitch, f.leafSwitch
	if f.Parent != nil {
		f.Parent.adopt(s)
		slices.SortFunc(f.Parent.Children, func(a, b *PCIFunction) int { return int(a.Address.Function) - int(b.Address.Function) })
		return
	}
	f.Root.Functions = append(f.Root.Functions, s)
}

// gpuFunction is a GPU as a PCI function, from its board.
func gpuFunction(g *GPU, r *PCIRoot, parent *PCIFunction) *PCIFunction {
	pci := &g.Board.PCI
	f := &PCIFunction{
		Address: g.Address, Role: RoleGPU, Index: g.Index, Root: r, Parent: parent,
		Vendor: uint16(pci.DeviceID), Device: uint16(pci.DeviceID >> 16),
		SubsystemVendor: uint16(pci.SubsystemID), SubDevice: uint16(pci.SubsystemID >> 16),
		Class:      pci.BaseClass<<16 | pci.SubClass<<8,
		Revision:   0xa1, // every NVIDIA datacenter GPU in the captures' boards reports rev a1
		MaxLinkGen: pci.GPUMaxLinkGen, MaxLinkWidth: pci.MaxLinkWidth,
		LinkGen: pci.LinkGen, LinkWidth: pci.LinkWidth,
		NUMANode: g.NUMANode,
	}
	if f.MaxLinkGen == 0 {
		f.MaxLinkGen = pci.MaxLinkGen
	}
	g.Function = f
	return f
}

// modelFunction is a function from a model (nil: a generic one of class).
func modelFunction(m *PCIModel, a PCIAddress, role PCIRole, class uint32) *PCIFunction {
	f := &PCIFunction{Address: a, Role: role, Class: class, MaxLinkGen: 4, MaxLinkWidth: 16}
	if m == nil {
		return f
	}
	v := func(s string, bits int) uint32 { n, _ := parseHex(s, bits); return n } // validated
	f.Vendor, f.Device = uint16(v(m.Vendor, 16)), uint16(v(m.Device, 16))
	f.SubsystemVendor, f.SubDevice = uint16(v(m.SubsystemVendor, 16)), uint16(v(m.SubsystemDevice, 16))
	if m.Class != "" {
		f.Class = v(m.Class, 24)
	}
	f.Revision = uint8(v(m.Revision, 8))
	if m.LinkGen != 0 {
		f.MaxLinkGen = m.LinkGen
	}
	if m.LinkWidth != 0 {
		f.MaxLinkWidth = m.LinkWidth
	}
	f.LinkGen, f.LinkWidth = f.MaxLinkGen, f.MaxLinkWidth
	return f
}

var roleNames = [...]string{RoleRootPort: "root port", RoleSwitchUp: "switch upstream port", RoleSwitchDown: "switch downstream port",
	RoleGPU: "GPU", RoleNIC: "NIC", RoleNVSwitch: "NVSwitch"}

func (r PCIRole) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("PCIRole(%d)", int(r))
}

// Walk calls fn for every function of the tree, parents before children.
func (t *PCITree) Walk(fn func(*PCIFunction)) {
	var walk func(fs []*PCIFunction)
	walk = func(fs []*PCIFunction) {
		for _, f := range fs {
			fn(f)
			walk(f.Children)
		}
	}
	for _, r := range t.Roots {
		walk(r.Functions)
	}
}

// NICs are the tree's NIC functions, in tree order.
func (t *PCITree) NICs() []*PCIFunction {
	var fs []*PCIFunction
	t.Walk(func(f *PCIFunction) {
		if f.Role == RoleNIC {
			fs = append(fs, f)
		}
	})
	return fs
}

// sameCPUs checks that each GPU under root r has r's CPUs, as a GPU's
// local_cpulist is its root complex's.
func sameCPUs(r *PCIRoot, gpus []GPU) error {
	var walk func(fs []*PCIFunction) error
	walk = func(fs []*PCIFunction) error {
		for _, f := range fs {
			if f.Role == RoleGPU {
				if g := &gpus[f.Index]; g.CPUs != nil && *g.CPUs != r.CPUs {
					return fmt.Errorf("GPU %s has CPUs %s (topology.cpuAffinity), its root complex %s", g.Address, g.CPUs.List(), r.CPUs.List())
				}
			}
			if err := walk(f.Children); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(r.Functions)
}
