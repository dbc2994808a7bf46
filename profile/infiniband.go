package profile

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// InfiniBand is the node's InfiniBand: what its HCAs report and the fabric
// they are cabled into. Absent: the node has none (its Mellanox functions
// still show as PCI devices).
type InfiniBand struct {
	// Adapters says what each kind of HCA reports, by the PCI device id
	// of pcie.nics ("0x1021"); every Mellanox NIC needs its kind here.
	Adapters map[string]Adapter `json:"adapters"`
	// Storage names the InfiniBand HCAs cabled to the storage fabric; the
	// node's other InfiniBand HCAs are compute rails, in pcie.nics order.
	Storage []string     `json:"storage,omitempty"`
	Fabric  IBFabricSpec `json:"fabric"`
}

// Adapter is one ConnectX or BlueField generation as its HCAs report it.
type Adapter struct {
	HCAType   string `json:"hcaType"`   // sysfs hca_type, "MT4129"
	FWVersion string `json:"fwVersion"` // "28.39.1002"
	BoardID   string `json:"boardId"`   // the PSID, "MT_0000000838"
	Speed     string `json:"speed"`     // the port's: HDR, NDR or XDR, 4X wide
	OUI       string `json:"oui"`       // GUID prefix, 6 hex digits: "a088c2"
	// CapabilityMask is the InfiniBand port's PortInfo CapabilityMask, as
	// ibstat shows it; absent: DefaultCapMask.
	CapabilityMask string `json:"capabilityMask,omitempty"`
}

// DefaultCapMask is the capability mask real ConnectX-6 and ConnectX-7
// ports show in most captures (docs/research/infiniband.md).
const DefaultCapMask = 0xa651e848

// IBFabricSpec is the cluster's InfiniBand as one node sees it: rail-optimized
// leaf and spine switches, as NVIDIA's SuperPOD reference architectures
// cable them, with Nodes nodes of this profile's kind (this one among
// them). Every node naming the same fabric agrees on all of it.
type IBFabricSpec struct {
	Name     string   `json:"name"`     // the seed of GUIDs and names: "superpod"
	Nodes    int      `json:"nodes"`    // one scalable unit: 32 on DGX H100
	HostName string   `json:"hostName"` // modelled nodes' names, with %d for the slot from 1: "dgx%02d"
	Spines   int      `json:"spines"`   // compute fabric's spine switches
	Switch   IBSwitch `json:"switch"`
}

// IBSwitch is the fabric's switch model.
type IBSwitch struct {
	Model     string `json:"model"`     // "MQM9700"
	DeviceID  string `json:"deviceId"`  // NodeInfo device id, "0xd2f0"
	Ports     int    `json:"ports"`     // InfiniBand ports, 64 on a QM9700
	FWVersion string `json:"fwVersion"` // "31.2012.1068"
	OUI       string `json:"oui"`       // GUID prefix
	// AggregationNode is the switch ASIC's SHARP Aggregation Node, a CA
	// on the port after the last: absent, the switch shows none.
	AggregationNode *IBAggregationNode `json:"aggregationNode,omitempty"`
}

// IBAggregationNode is what a switch's SHARP Aggregation Node reports.
type IBAggregationNode struct {
	DeviceID string `json:"deviceId"` // NodeInfo device id, "0xcf09" on Quantum
}

// IBSpeed is a port's signalling rate, 4X wide.
type IBSpeed int

const (
	SpeedHDR IBSpeed = iota + 1 // 50 Gb/s a lane
	SpeedNDR                    // 100
	SpeedXDR                    // 200
)

var ibSpeeds = map[string]IBSpeed{"HDR": SpeedHDR, "NDR": SpeedNDR, "XDR": SpeedXDR}

func (s IBSpeed) String() string {
	for k, v := range ibSpeeds {
		if v == s {
			return k
		}
	}
	return "?"
}

// Gbps is the 4X port's rate as sysfs gives it: 200, 400, 800.
func (s IBSpeed) Gbps() int { return 100 << s }

// IB is the node's InfiniBand, resolved.
type IB struct {
	HCAs   []HCA // every Mellanox function with an RDMA name, in pcie.nics order
	Fabric IBFabric
}

// HCA is one RDMA device of the node.
type HCA struct {
	Name     string // mlx5_0
	Function *PCIFunction
	Adapter  *IBAdapter
	// Ethernet: a RoCE function (class 0x020000), in no fabric.
	Ethernet bool
	Storage  bool
	Rail     int // its index among the node's compute or storage HCAs
}

// IBAdapter is an Adapter, parsed.
type IBAdapter struct {
	HCAType, FWVersion, BoardID string
	Speed                       IBSpeed
	OUI                         uint32
	CapMask                     uint32 // the InfiniBand port's
}

// IBFabric is an IBFabricSpec, parsed.
type IBFabric struct {
	Name, HostName string
	Nodes, Spines  int
	Switch         IBSwitch
	SwitchDeviceID uint16
	SwitchOUI      uint32
	ANDeviceID     uint16 // the switches' Aggregation Node's; 0: none
	ComputeRails   int
	StorageRails   int
}

var (
	ouiRE      = regexp.MustCompile(`^[0-9a-f]{6}$`)
	fwRE       = regexp.MustCompile(`^\d+\.\d+\.\d+$`)
	hostNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)
	hostVerbRE = regexp.MustCompile(`^[^%]*%(0[1-9])?d[^%]*$`) // the node's number, in decimal
)

// Limits of a modelled fabric: a switch's port numbers are one byte (255
// is the SMPs' "all ports"), and a leaf takes a node a port on its lower
// half.
const (
	maxSwitchPorts = 254
	maxFabricNodes = maxSwitchPorts / 2
)

func (p *Profile) validateInfiniBand(c *checker) {
	ib := p.InfiniBand
	if ib == nil {
		return
	}
	if p.PCIe == nil || len(p.PCIe.NICs) == 0 {
		c.fail("infiniband", "needs pcie.nics: the HCAs are PCI functions of the node")
		return
	}
	byID := map[uint32]string{} // the keys by the id they spell
	for _, id := range slices.Sorted(maps.Keys(ib.Adapters)) {
		a := ib.Adapters[id]
		at := fmt.Sprintf("infiniband.adapters[%q]", id)
		if n, err := parseHex(id, 16); err != nil {
			c.fail(at, "the key must be a PCI device id: %v", err)
		} else if prev, dup := byID[n]; dup {
			c.fail(at, "device 0x%04x is already infiniband.adapters[%q]", n, prev)
		} else {
			byID[n] = id
		}
		c.str(at+".hcaType", a.HCAType, maxShortStrLen, true)
		if !fwRE.MatchString(a.FWVersion) {
			c.fail(at+".fwVersion", "%q is not a firmware version such as \"28.39.1002\"", a.FWVersion)
		}
		c.str(at+".boardId", a.BoardID, maxShortStrLen+16, true)
		if _, ok := ibSpeeds[a.Speed]; !ok && a.Speed == "" {
			c.fail(at+".speed", "is required: HDR, NDR or XDR")
		} else if !ok {
			c.fail(at+".speed", "%q is not HDR, NDR or XDR", a.Speed)
		}
		if !ouiRE.MatchString(a.OUI) {
			c.fail(at+".oui", "%q is not 6 lowercase hex digits such as \"a088c2\"", a.OUI)
		}
		c.hex(at+".capabilityMask", a.CapabilityMask, 32, false)
	}
	names := map[string]string{} // Mellanox NICs' names: their classes
	missing := map[uint32]bool{}
	for i, n := range p.PCIe.NICs {
		if !strings.EqualFold(n.Vendor, "0x15b3") || n.Name == "" {
			continue
		}
		names[n.Name] = n.Class
		id, err := parseHex(n.Device, 16)
		if _, ok := byID[id]; err == nil && !ok && !missing[id] {
			missing[id] = true // once per kind
			c.fail(fmt.Sprintf("pcie.nics[%d]", i), "%s (device %s) has no infiniband.adapters entry for its device id", n.Name, n.Device)
		}
	}
	for i, s := range ib.Storage {
		at := fmt.Sprintf("infiniband.storage[%d]", i)
		class, ok := names[s]
		switch {
		case !ok:
			c.fail(at, "%q is not the name of a Mellanox NIC of pcie.nics", s)
		case class != "" && ethernet(class):
			c.fail(at, "%q is an Ethernet function (class %s), not an InfiniBand HCA", s, class)
		case slices.Index(ib.Storage, s) < i:
			c.fail(at, "%q is already infiniband.storage[%d]", s, slices.Index(ib.Storage, s))
		}
	}
	f := &ib.Fabric
	if f.Name == "" && f.Nodes == 0 && f.HostName == "" && f.Spines == 0 && f.Switch == (IBSwitch{}) {
		c.fail("infiniband.fabric", "is required: name, nodes, hostName, spines and switch (docs/profiles.md)")
		return
	}
	c.str("infiniband.fabric.name", f.Name, 63, true)
	if f.Nodes < 1 || f.Nodes > maxFabricNodes {
		c.fail("infiniband.fabric.nodes", "%d is out of range; use 1 to %d", f.Nodes, maxFabricNodes)
	}
	if !hostVerbRE.MatchString(f.HostName) || !hostNameRE.MatchString(fmt.Sprintf(f.HostName, 1)) {
		c.fail("infiniband.fabric.hostName", "%q must be a host name with one %%d (or %%02d) for the node's number, such as \"dgx%%02d\"", f.HostName)
	}
	if f.Spines < 1 || f.Spines > 64 {
		c.fail("infiniband.fabric.spines", "%d is out of range; use 1 to 64", f.Spines)
	}
	s := &f.Switch
	c.str("infiniband.fabric.switch.model", s.Model, maxShortStrLen, true)
	c.hex("infiniband.fabric.switch.deviceId", s.DeviceID, 16, true)
	if s.Ports < 2 || s.Ports > maxSwitchPorts {
		c.fail("infiniband.fabric.switch.ports", "%d is out of range; use 2 to %d", s.Ports, maxSwitchPorts)
	}
	// A switch's NodeDescription, "MF0;<name>-storage-spine01:<model>/U1",
	// holds 64 bytes: a longer one loses the part that tells switches apart.
	if d := len("MF0;-storage-spine01:/U1") + len(f.Name) + len(s.Model); d > 64 {
		c.fail("infiniband.fabric.name", "%q with switch model %q makes switch descriptions of %d bytes, past a NodeDescription's 64; shorten the name", f.Name, s.Model, d)
	}
	if !fwRE.MatchString(s.FWVersion) {
		c.fail("infiniband.fabric.switch.fwVersion", "%q is not a firmware version such as \"31.2012.1068\"", s.FWVersion)
	}
	if !ouiRE.MatchString(s.OUI) {
		c.fail("infiniband.fabric.switch.oui", "%q is not 6 lowercase hex digits such as \"fc6a1c\"", s.OUI)
	}
	if an := s.AggregationNode; an != nil {
		c.hex("infiniband.fabric.switch.aggregationNode.deviceId", an.DeviceID, 16, true)
		if s.Ports == maxSwitchPorts {
			c.fail("infiniband.fabric.switch.ports", "%d ports leave no port number for the Aggregation Node; use at most %d", s.Ports, maxSwitchPorts-1)
		}
	}
}

// resolveIB types the node's InfiniBand; the profile is validated. The
// cabling must fit: each leaf takes one rail's HCAs of every node on half
// its ports and goes up to the spines on the other half.
func (p *Profile) resolveIB(t *PCITree) (*IB, error) {
	ib := p.InfiniBand
	out := &IB{}
	adapters := map[uint32]*IBAdapter{} // by device id
	for id, a := range ib.Adapters {
		oui, _ := parseHex("0x"+a.OUI, 24)
		capMask := uint32(DefaultCapMask)
		if a.CapabilityMask != "" {
			capMask, _ = parseHex(a.CapabilityMask, 32)
		}
		n, _ := parseHex(id, 16) // validated
		adapters[n] = &IBAdapter{HCAType: a.HCAType, FWVersion: a.FWVersion, BoardID: a.BoardID,
			Speed: ibSpeeds[a.Speed], OUI: oui, CapMask: capMask}
	}
	var nics []*PCIFunction
	t.Walk(func(f *PCIFunction) {
		// NICs the tree repeats for GPUs beyond topology.busIds are PCI
		// functions only: a fabric is cabled for the profile's node.
		if f.Role == RoleNIC && f.Vendor == 0x15b3 && f.Name != "" && f.Index < len(p.PCIe.NICs) {
			nics = append(nics, f)
		}
	})
	slices.SortFunc(nics, func(a, b *PCIFunction) int { return a.Index - b.Index })
	var compute, storage int
	for _, f := range nics {
		h := HCA{Name: f.Name, Function: f, Adapter: adapters[uint32(f.Device)], Ethernet: f.Class != ClassIB}
		switch {
		case h.Ethernet:
		case slices.Contains(ib.Storage, f.Name):
			h.Storage, h.Rail = true, storage
			storage++
		default:
			h.Rail = compute
			compute++
		}
		out.HCAs = append(out.HCAs, h)
	}
	f := ib.Fabric
	dev, _ := parseHex(f.Switch.DeviceID, 16)
	oui, _ := parseHex("0x"+f.Switch.OUI, 24)
	out.Fabric = IBFabric{Name: f.Name, HostName: f.HostName, Nodes: f.Nodes, Spines: f.Spines, Switch: f.Switch,
		SwitchDeviceID: uint16(dev), SwitchOUI: oui, ComputeRails: compute, StorageRails: storage}
	if an := f.Switch.AggregationNode; an != nil {
		id, _ := parseHex(an.DeviceID, 16)
		out.Fabric.ANDeviceID = uint16(id)
	}
	if down := f.Switch.Ports / 2; f.Nodes > down && (compute > 0 || storage > 0) {
		return nil, fmt.Errorf("infiniband.fabric.nodes: %d nodes do not fit on a %s leaf: it takes %d (half its %d ports; the other half go to the spines); use at most %d", f.Nodes, f.Switch.Model, down, f.Switch.Ports, down)
	}
	// Each leaf needs a cable to every spine, from the upper half of its
	// ports; each spine a port for every leaf.
	if up := f.Switch.Ports - f.Switch.Ports/2; f.Spines > up {
		return nil, fmt.Errorf("infiniband.fabric.spines: %d spines do not fit: a %s leaf has %d ports up; use at most %d", f.Spines, f.Switch.Model, up, up)
	}
	if rails := max(compute, storage); rails > f.Switch.Ports {
		return nil, fmt.Errorf("infiniband.fabric.switch.ports: a %d-port spine cannot take %d leaves (one per rail); use a switch with more ports", f.Switch.Ports, rails)
	}
	return out, nil
}

// ethernet says whether a NIC's class (default: InfiniBand) is not
// InfiniBand's; a bad class is pcie's to report.
func ethernet(class string) bool {
	v, err := parseHex(class, 24)
	return err == nil && v != ClassIB
}
