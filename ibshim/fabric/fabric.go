package fabric

import (
	"fmt"
	"hash/fnv"

	"github.com/nvmock/nvmock/profile"
)

// NodeType is NodeInfo's: a channel adapter or a switch.
type NodeType uint8

const (
	CA     NodeType = 1
	Switch NodeType = 2
)

// MellanoxVendor is the NodeInfo vendor id of ConnectX HCAs and Quantum
// switches.
const MellanoxVendor = 0x0002c9

// CapMask is a CA port's PortInfo capability mask: its adapter's, and an
// Aggregation Node's (not captured) as a ConnectX's.
func (n *Node) CapMask() uint32 {
	if n.Adapter != nil {
		return n.Adapter.CapMask
	}
	return profile.DefaultCapMask
}

// Fabric is every subnet the node's HCAs are cabled into.
type Fabric struct {
	Name       string
	Hosts      []string // node names by slot
	HostFormat string   // modelled nodes' names, %d the slot from 1
	Local      int      // this node's slot
	Subnets    []*Subnet
	// Model identifies what the fabric was built from (its block and the
	// node's HCAs): peers that differ would disagree on every LID.
	Model string
}

// Place names slot's node host. A modelled node that had that name takes
// the slot's modelled one, so no two nodes share a name (a real dgx05 at
// slot 0 swaps names with the modelled dgx05).
func (f *Fabric) Place(slot int, host string) {
	for j, h := range f.Hosts {
		if j != slot && h == host && h == fmt.Sprintf(f.HostFormat, j+1) {
			f.Hosts[j] = fmt.Sprintf(f.HostFormat, slot+1)
		}
	}
	f.Hosts[slot] = host
}

// Subnet is one InfiniBand subnet: its switches and CAs, with one SM.
type Subnet struct {
	Name   string // "compute" or "storage"
	Nodes  []*Node
	SM     *Port   // the port of the master SM
	ByLID  []*Port // index: LID
	Prefix uint64  // GID prefix
	TopLID uint16  // highest unicast LID given
	byGUID map[uint64]*Port
}

// Node is a switch or an HCA.
type Node struct {
	Type            NodeType
	GUID, SysGUID   uint64
	Desc            string
	DeviceID        uint16
	Revision        uint32
	FWVersion       string
	Ports           []*Port // Ports[n] is port n; a CA has no port 0
	Slot            int     // the host's slot; -1 for switches
	HCA             string  // a CA's RDMA name on its host
	Adapter         *profile.IBAdapter
	LFT             []uint8 // switches: out port by LID
	Subnet          *Subnet
	PartitionCap    uint16
	LinearFDBCap    uint16
	MulticastFDBCap uint16
}

// Port is one port of a node. A switch's port 0 is the switch itself.
type Port struct {
	Node  *Node
	Num   int
	GUID  uint64
	LID   uint16
	Peer  *Port // the other end of its cable; nil: port 0 or not cabled
	Speed profile.IBSpeed
	// Errors are a faulty port's PMA error counters (Fault), by name.
	Errors map[string]uint64
	// A down port's cable and LID, for when it comes up (Fabric.Apply).
	wire    *Port
	baseLID uint16
}

// IsSwitchPort0 says whether the port is a switch's management port.
func (p *Port) IsSwitchPort0() bool { return p.Node.Type == Switch && p.Num == 0 }

// ActiveSpeed is the speed the port's link trained to: the slower end's,
// as both ends of a cable agree (IBA 14.2.5.6); a port without a cable,
// its own.
func (p *Port) ActiveSpeed() profile.IBSpeed {
	if p.Peer != nil {
		return min(p.Speed, p.Peer.Speed)
	}
	return p.Speed
}

// Base is the port through which a node is addressed: a switch's port 0,
// a CA's own port.
func (p *Port) Base() *Port {
	if p.Node.Type == Switch {
		return p.Node.Ports[0]
	}
	return p
}

// ByGUID finds a port by its GUID (switch ports share their switch's).
func (s *Subnet) ByGUID(g uint64) *Port { return s.byGUID[g] }

// Port finds the port a LID addresses, or nil.
func (s *Subnet) Port(lid uint16) *Port {
	if int(lid) < len(s.ByLID) {
		return s.ByLID[lid]
	}
	return nil
}

// SlotOf places a node that the fabric does not list by name: its name's
// hash among the slots. Two real nodes may land on one slot; give them
// slots explicitly then.
func SlotOf(name string, nodes int) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % uint32(nodes))
}

// guid is a GUID under oui, derived from the fabric's name and what it
// names, so that every node derives the same.
func guid(fabric string, oui uint32, what string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%s", fabric, what)
	return uint64(oui)<<40 | h.Sum64()&(1<<40-1)
}

// CardGUIDs are the node and system image GUIDs of HCA h on the node at
// slot. A card's functions share one system image GUID, its function 0's
// node GUID, and function n's node GUID is that plus n, as ConnectX and
// BlueField cards number their ports.
func CardGUIDs(fabric string, hcas []profile.HCA, h *profile.HCA, slot int) (node, sys uint64) {
	f0 := h
	a := h.Function.Address
	for i := range hcas {
		b := hcas[i].Function.Address
		if b.Domain == a.Domain && b.Bus == a.Bus && b.Device == a.Device && b.Function == 0 {
			f0 = &hcas[i]
		}
	}
	sys = guid(fabric, f0.Adapter.OUI, fmt.Sprintf("ca/%d/%s", slot, f0.Name))
	if f0 == h {
		return sys, sys
	}
	return sys + uint64(a.Function), sys
}
