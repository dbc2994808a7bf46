package profile

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// PCIe is the node's PCI Express tree as the profile writes it: root
// complexes, the root ports and switches under them, and the endpoints
// (GPUs, NICs, NVSwitches) by PCI address. Bridges get their bus numbers
// when the tree is resolved, depth first as firmware numbers them.
type PCIe struct {
	RootPort       *PCIModel     `json:"rootPort,omitempty"`       // the CPU's root port bridges
	Switch         *PCIModel     `json:"switch,omitempty"`         // PCIe switch ports, upstream and downstream
	NVSwitchDevice *PCIModel     `json:"nvswitchDevice,omitempty"` // the NVSwitches' PCI function
	NICs           []NIC         `json:"nics,omitempty"`
	RootComplexes  []RootComplex `json:"rootComplexes"`
}

// PCIModel is what a PCI function says it is; ids are hex strings such as
// "0x10de". Link fields are the port's maximum; absent: the class default.
type PCIModel struct {
	Vendor          string `json:"vendor"`
	Device          string `json:"device"`
	SubsystemVendor string `json:"subsystemVendor,omitempty"`
	SubsystemDevice string `json:"subsystemDevice,omitempty"`
	Class           string `json:"class,omitempty"` // 24 bits, "0x060400"
	Revision        string `json:"revision,omitempty"`
	LinkGen         uint32 `json:"linkGen,omitempty"`
	LinkWidth       uint32 `json:"linkWidth,omitempty"`
}

var rdmaNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]*$`)

// ValidRDMAName says whether name can be an RDMA device's (pcie.nics[].name):
// letters, digits, _ and -, as it names sysfs directories and links.
func ValidRDMAName(name string) bool { return rdmaNameRE.MatchString(name) }

// NIC is a network adapter beside the GPUs.
type NIC struct {
	BDF  string `json:"bdf"`
	Name string `json:"name,omitempty"` // its RDMA device name, e.g. mlx5_0
	PCIModel
}

// RootComplex is one PCI host bridge (sysfs pciDDDD:BB) and what hangs off
// its root bus.
type RootComplex struct {
	Bus      string     `json:"bus"` // "0000:40": domain and root bus
	NUMANode *uint32    `json:"numaNode,omitempty"`
	CPUs     string     `json:"cpus,omitempty"`    // local CPUs; default: those of its node's GPUs
	Devices  []string   `json:"devices,omitempty"` // endpoints on the root bus itself (no root port)
	Ports    []PCIePort `json:"ports,omitempty"`   // root ports
}

// PCIePort is a root or downstream port: it leads to one endpoint (Device)
// or to a switch, whose downstream ports Switch lists.
type PCIePort struct {
	Device string     `json:"device,omitempty"`
	Switch []PCIePort `json:"switch,omitempty"`
	// Slot is the port's own device and function on its bus, as lspci
	// prints them ("00.0" for a Grace root port, "01.1" for an AMD GPP
	// bridge). Default: by position, root ports from 01.0 and a switch's
	// downstream ports from 00.0.
	Slot string `json:"slot,omitempty"`
}

// slotOf is port k's device and function among its siblings, which
// number from first by position unless the port gives its slot.
func (pt *PCIePort) slotOf(k int, first uint32) (dev, fn uint32, err error) {
	if pt.Slot == "" {
		return first + uint32(k), 0, nil
	}
	d, f, ok := strings.Cut(pt.Slot, ".")
	dv, err1 := strconv.ParseUint(d, 16, 8)
	fv, err2 := strconv.ParseUint(f, 8, 8)
	if !ok || len(d) != 2 || len(f) != 1 || err1 != nil || err2 != nil || dv > maxPCIDevice || fv > 7 {
		return 0, 0, fmt.Errorf("%q is not a slot: device.function in hex as lspci prints them, 00.0 to 1f.7 (e.g. 01.1)", pt.Slot)
	}
	return uint32(dv), uint32(fv), nil
}

// Class codes of the functions pcisim renders.
const (
	ClassBridgePCI = 0x060400
	ClassNVSwitch  = 0x068000
	ClassIB        = 0x020700
)

func (m *PCIModel) validate(c *checker, at string, needClass bool) {
	c.hex(at+".vendor", m.Vendor, 16, true)
	c.hex(at+".device", m.Device, 16, true)
	c.hex(at+".subsystemVendor", m.SubsystemVendor, 16, false)
	c.hex(at+".subsystemDevice", m.SubsystemDevice, 16, false)
	c.hex(at+".class", m.Class, 24, needClass)
	c.hex(at+".revision", m.Revision, 8, false)
	if m.LinkGen > 6 {
		c.fail(at+".linkGen", "%d: PCIe generations go from 1 to 6", m.LinkGen)
	}
	switch m.LinkWidth {
	case 0, 1, 2, 4, 8, 16, 32:
	default:
		c.fail(at+".linkWidth", "%d is not a PCIe link width (1, 2, 4, 8, 16 or 32)", m.LinkWidth)
	}
}

// hex checks an id written as "0x..." of at most bits bits.
func (c *checker) hex(field, v string, bits int, required bool) {
	if v == "" {
		if required {
			c.fail(field, "is required (hex, such as %q)", hexExample(bits))
		}
		return
	}
	if _, err := parseHex(v, bits); err != nil {
		c.fail(field, "%v", err)
	}
}

func parseHex(v string, bits int) (uint32, error) {
	digits, ok := strings.CutPrefix(strings.ToLower(v), "0x")
	n, err := strconv.ParseUint(digits, 16, bits)
	if !ok || err != nil || digits == "" {
		return 0, fmt.Errorf("%q is not a %d-bit hex id such as %q", v, bits, hexExample(bits))
	}
	return uint32(n), nil
}

// hexExample is an id of the width: a vendor's, a class's (an InfiniBand
// NIC's, the class most written), a revision's (review: a class was shown
// "0x0010de").
func hexExample(bits int) string {
	switch bits {
	case 24:
		return "0x020700"
	case 8:
		return "0xa1"
	}
	return "0x10de"
}

// validatePCIe checks the block alone and against the GPUs, NICs and
// NVSwitches it places; the bus numbering is checked when resolving.
func (p *Profile) validatePCIe(c *checker) {
	x := p.PCIe
	if x == nil {
		return
	}
	for _, m := range []struct {
		at     string
		m      *PCIModel
		bridge bool
	}{{"pcie.rootPort", x.RootPort, true}, {"pcie.switch", x.Switch, true}, {"pcie.nvswitchDevice", x.NVSwitchDevice, false}} {
		if m.m == nil {
			continue
		}
		m.m.validate(c, m.at, false)
		// pcisim gives ports a bridge's header (type 1), others type 0;
		// lspci calls any other pairing an invalid class (review).
		if v, err := parseHex(m.m.Class, 24); m.m.Class != "" && err == nil && (v>>8 == ClassBridgePCI>>8) != m.bridge {
			if m.bridge {
				c.fail(m.at+".class", "%s: a root or switch port is a PCI-to-PCI bridge (0x0604xx)", m.m.Class)
			} else {
				c.fail(m.at+".class", "%s: an NVSwitch is no PCI-to-PCI bridge (such as 0x068000)", m.m.Class)
			}
		}
	}
	// What an endpoint address may name.
	kinds := map[PCIAddress]string{}
	for _, s := range p.Topology.BusIDs {
		if a, err := ParsePCIAddress(s); err == nil {
			kinds[a] = "GPU"
		}
	}
	for _, s := range p.Topology.NVSwitches {
		if a, err := ParsePCIAddress(s); err == nil {
			kinds[a] = "NVSwitch"
		}
	}
	names := map[string]string{}
	for i, n := range x.NICs {
		at := fmt.Sprintf("pcie.nics[%d]", i)
		n.validate(c, at, true)
		if v, err := parseHex(n.Class, 24); err == nil && v>>16 != 0x02 {
			c.fail(at+".class", "%s is not a network controller's (0x02xxxx, such as 0x020700 InfiniBand or 0x020000 Ethernet)", n.Class)
		} else if err == nil && strings.EqualFold(n.Vendor, "0x15b3") && v != ClassIB && v != 0x020000 {
			// A ConnectX port is one or the other; the HCA's link layer follows.
			c.fail(at+".class", "%s: a ConnectX function is InfiniBand (0x020700) or Ethernet (0x020000)", n.Class)
		}
		a, err := ParsePCIAddress(n.BDF)
		switch {
		case err != nil:
			c.fail(at+".bdf", "%v", err)
		case kinds[a] != "":
			c.fail(at+".bdf", "%s is already a %s", n.BDF, kinds[a])
		default:
			kinds[a] = "NIC"
		}
		switch {
		case len(n.Name) > maxMidStrLen:
			c.fail(at+".name", "%q is longer than %d characters", n.Name, maxMidStrLen)
		case n.Name != "" && !rdmaNameRE.MatchString(n.Name):
			// It names sysfs directories and links: no "/", "..", spaces.
			c.fail(at+".name", "%q is not an RDMA device name such as \"mlx5_0\" (letters, digits, _ and -)", n.Name)
		case n.Name != "" && names[n.Name] != "":
			c.fail(at+".name", "%q is already %s", n.Name, names[n.Name])
		case n.Name != "":
			names[n.Name] = at
		}
	}
	if len(x.RootComplexes) == 0 {
		c.fail("pcie.rootComplexes", "is required: at least one root complex (host bridge)")
	}
	placed := map[PCIAddress]string{}
	roots := map[[2]uint32]int{}
	for i, rc := range x.RootComplexes {
		at := fmt.Sprintf("pcie.rootComplexes[%d]", i)
		dom, bus, err := parseRootBus(rc.Bus)
		if err != nil {
			c.fail(at+".bus", "%v", err)
		} else if j, dup := roots[[2]uint32{dom, bus}]; dup {
			c.fail(at+".bus", "%s is already pcie.rootComplexes[%d]", rc.Bus, j)
		} else {
			roots[[2]uint32{dom, bus}] = i
		}
		if rc.NUMANode != nil && *rc.NUMANode > maxNUMANode {
			c.fail(at+".numaNode", "NUMA node %d: NUMA nodes go up to %d", *rc.NUMANode, maxNUMANode)
		}
		if rc.CPUs != "" {
			if _, err := ParseCPUList(rc.CPUs); err != nil {
				c.fail(at+".cpus", "%v", err)
			}
		}
		// A device number has 5 bits; root ports are devices 1 and up.
		if len(rc.Ports) > maxPCIDevice {
			c.fail(at+".ports", "%d root ports; a root bus has devices 1 to %d for them", len(rc.Ports), maxPCIDevice)
		}
		if len(rc.Devices) == 0 && len(rc.Ports) == 0 {
			c.fail(at, "has neither devices nor ports")
		}
		place := func(field, s string) {
			a, err := ParsePCIAddress(s)
			if err != nil {
				c.fail(field, "%v", err)
				return
			}
			if a.Function != 0 && kinds[a] == "NIC" {
				c.fail(field, "%s: place function 0 of the NIC; its other functions come with it", s)
				return
			}
			if kinds[a] == "" {
				c.fail(field, "%s is not a GPU (topology.busIds), NIC (pcie.nics) or NVSwitch (topology.nvswitches) of the profile", s)
				return
			}
			if prev, dup := placed[a]; dup {
				c.fail(field, "%s is already placed at %s", s, prev)
				return
			}
			placed[a] = field
			if kinds[a] == "NVSwitch" && x.NVSwitchDevice == nil {
				c.fail(field, "NVSwitch %s needs pcie.nvswitchDevice (its PCI ids)", s)
			}
			if a.Domain != dom {
				c.fail(field, "%s is in PCI domain %04x, its root complex %s in %04x", s, a.Domain, rc.Bus, dom)
			}
		}
		rootSlots := checkSlots(c, at+".ports", rc.Ports, 1)
		for k, d := range rc.Devices {
			place(fmt.Sprintf("%s.devices[%d]", at, k), d)
			// Review: this passed validation and failed in pcisim.
			if a, err := ParsePCIAddress(d); err == nil && a.Bus == bus {
				if j, taken := rootSlots[[2]uint32{a.Device, a.Function}]; taken {
					c.fail(fmt.Sprintf("%s.devices[%d]", at, k), "%s is root port ports[%d]'s place on the root bus (%02x.%x; without a slot, root ports are 01.0, 02.0 and on in order)", d, j, a.Device, a.Function)
				}
			}
		}
		var walk func(at string, ports []PCIePort)
		walk = func(at string, ports []PCIePort) {
			for k, pt := range ports {
				pat := fmt.Sprintf("%s[%d]", at, k)
				switch {
				case pt.Device != "" && pt.Switch != nil:
					c.fail(pat, "has both device and switch; a port leads to one of them")
				case pt.Device != "":
					place(pat+".device", pt.Device)
				case len(pt.Switch) == 0:
					c.fail(pat, "leads nowhere: give a device, or a switch with its downstream ports")
				default:
					if x.Switch == nil {
						c.fail(pat+".switch", "needs pcie.switch (the switch's PCI ids)")
					}
					if len(pt.Switch) > maxPCIDevice+1 {
						c.fail(pat+".switch", "%d downstream ports; a switch's internal bus has devices 0 to %d for them", len(pt.Switch), maxPCIDevice)
					}
					checkSlots(c, pat+".switch", pt.Switch, 0)
					walk(pat+".switch", pt.Switch)
				}
			}
		}
		if len(rc.Ports) > 0 && x.RootPort == nil {
			c.fail(at+".ports", "need pcie.rootPort (the root ports' PCI ids)")
		}
		walk(at+".ports", rc.Ports)
	}
	x.validateBusRanges(c, placed)
	for i, s := range p.Topology.BusIDs {
		if i >= p.GPUs {
			break // not a GPU of this node: gpus is below the list's length
		}
		if a, err := ParsePCIAddress(s); err == nil && placed[a] == "" && len(x.RootComplexes) > 0 {
			c.fail(fmt.Sprintf("topology.busIds[%d]", i), "GPU %s is nowhere in the pcie tree", s)
		}
	}
	for i, s := range p.Topology.NVSwitches {
		if a, err := ParsePCIAddress(s); err == nil && placed[a] == "" && len(x.RootComplexes) > 0 {
			c.fail(fmt.Sprintf("topology.nvswitches[%d]", i), "NVSwitch %s is nowhere in the pcie tree", s)
		}
	}
	var unplaced []int // NICs nowhere in the tree
	for i, n := range x.NICs {
		a, err := ParsePCIAddress(n.BDF)
		if err == nil && a.Function != 0 {
			// Another function of a multi-function NIC sits beside function 0.
			f0 := a
			f0.Function = 0
			if kinds[f0] != "NIC" {
				c.fail(fmt.Sprintf("pcie.nics[%d].bdf", i), "NIC function %s needs function 0 of its device among pcie.nics", n.BDF)
			}
			continue
		}
		if err == nil && placed[a] == "" && len(x.RootComplexes) > 0 {
			unplaced = append(unplaced, i)
		}
	}
	// A profile's own tree keeps its base's NICs: one line for them all,
	// saying so (review: ten lines, one per h100 NIC, and no way out).
	hint := ""
	if len(unplaced) > 0 && p.Base != "" {
		if b, err := Builtin(p.Base); err == nil && b.PCIe != nil && reflect.DeepEqual(b.PCIe.NICs, x.NICs) {
			hint = fmt.Sprintf("; a profile keeps its base %s's pcie.nics unless it gives its own (nics: [] for none)", p.Base)
		}
	}
	switch {
	case len(unplaced) == 1:
		i := unplaced[0]
		c.fail(fmt.Sprintf("pcie.nics[%d].bdf", i), "NIC %s is nowhere in the pcie tree%s", x.NICs[i].BDF, hint)
	case len(unplaced) > 1:
		bdfs := make([]string, len(unplaced))
		for k, i := range unplaced {
			bdfs[k] = x.NICs[i].BDF
		}
		c.fail("pcie.nics", "NICs %s are nowhere in the pcie tree%s", strings.Join(bdfs, ", "), hint)
	}
}

// checkSlots checks the ports' slots and that no two share one; it
// returns each slot's port.
func checkSlots(c *checker, at string, ports []PCIePort, first uint32) map[[2]uint32]int {
	taken := map[[2]uint32]int{}
	for k := range ports {
		d, f, err := ports[k].slotOf(k, first)
		if err != nil {
			c.fail(fmt.Sprintf("%s[%d].slot", at, k), "%v", err)
			continue
		}
		if d > maxPCIDevice {
			continue // the count check names it
		}
		if j, dup := taken[[2]uint32{d, f}]; dup {
			c.fail(fmt.Sprintf("%s[%d]", at, k), "is at %02x.%x, as [%d] is; give one of them another slot", d, f, j)
			continue
		}
		taken[[2]uint32{d, f}] = k
	}
	return taken
}

// maxPCIDevice is the largest device number (5 bits).
const maxPCIDevice = 31

// validateBusRanges checks that no root complex's bus lies within another's
// buses in its domain (its root bus to the last of its endpoints' buses):
// firmware gives each host bridge a range of its own, and lspci and hwloc
// would hang one's devices under the other's bridges (review).
func (x *PCIe) validateBusRanges(c *checker, placed map[PCIAddress]string) {
	type span struct{ dom, lo, hi uint32 }
	spans := make([]*span, len(x.RootComplexes))
	for i, rc := range x.RootComplexes {
		dom, bus, err := parseRootBus(rc.Bus)
		if err != nil {
			continue
		}
		s := &span{dom, bus, bus}
		var walk func([]PCIePort)
		at := fmt.Sprintf("pcie.rootComplexes[%d].", i)
		grow := func(d string) { // an endpoint placed twice is named already
			if a, err := ParsePCIAddress(d); err == nil && a.Domain == dom && strings.HasPrefix(placed[a], at) {
				s.hi = max(s.hi, a.Bus)
			}
		}
		walk = func(ports []PCIePort) {
			for _, pt := range ports {
				if pt.Device != "" {
					grow(pt.Device)
				}
				walk(pt.Switch)
			}
		}
		for _, d := range rc.Devices {
			grow(d)
		}
		walk(rc.Ports)
		spans[i] = s
	}
	for i, s := range spans {
		for j, o := range spans {
			if s != nil && o != nil && i != j && s.dom == o.dom && s.lo > o.lo && s.lo <= o.hi {
				c.fail(fmt.Sprintf("pcie.rootComplexes[%d].bus", i), "%s lies within pcie.rootComplexes[%d]'s buses %02x-%02x; each host bridge has a bus range of its own", x.RootComplexes[i].Bus, j, o.lo, o.hi)
			}
		}
	}
}

// parseRootBus reads a root complex's "DDDD:BB".
func parseRootBus(s string) (domain, bus uint32, err error) {
	d, b, ok := strings.Cut(s, ":")
	dv, err1 := strconv.ParseUint(d, 16, 32)
	bv, err2 := strconv.ParseUint(b, 16, 8)
	if !ok || err1 != nil || err2 != nil || (len(d) != 4 && len(d) != 8) || len(b) != 2 {
		return 0, 0, fmt.Errorf("%q is not a root bus such as \"0000:40\" (domain:bus)", s)
	}
	return uint32(dv), uint32(bv), nil
}
