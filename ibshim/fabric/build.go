package fabric

import (
	"encoding/json"
	"fmt"
	"hash/fnv"

	"github.com/nvmock/nvmock/profile"
)

// Values real ConnectX HCAs and Quantum switches report (see
// docs/research/infiniband.md).
const (
	caPartitionCap     = 128
	switchPartitionCap = 8
	linearFDBCap       = 49152 // every unicast LID
	multicastFDBCap    = 16384
	switchRevision     = 0xa1
	gidPrefix          = 0xfe80000000000000
)

// Build makes the fabric of a node of the profile's kind named host at
// slot (0 to nodes-1; -1: SlotOf(host)). The other slots are modelled
// nodes of the same kind, named after the profile's hostName.
func Build(n *profile.Node, host string, slot int) (*Fabric, error) {
	if n.IB == nil {
		return nil, fmt.Errorf("profile %s has no infiniband block", n.Profile.Name)
	}
	spec := &n.IB.Fabric
	if slot < 0 {
		slot = SlotOf(host, spec.Nodes)
		for i := range spec.Nodes { // a name the fabric lists takes its slot
			if fmt.Sprintf(spec.HostName, i+1) == host {
				slot = i
			}
		}
	}
	if slot >= spec.Nodes {
		return nil, fmt.Errorf("slot %d is outside fabric %s, whose %d nodes have slots 0 to %d", slot, spec.Name, spec.Nodes, spec.Nodes-1)
	}
	f := &Fabric{Name: spec.Name, Local: slot, Hosts: make([]string, spec.Nodes), HostFormat: spec.HostName, Model: model(spec, n.IB.HCAs)}
	for i := range f.Hosts {
		f.Hosts[i] = fmt.Sprintf(spec.HostName, i+1)
	}
	f.Place(slot, host)
	b := builder{f: f, spec: spec, hcas: n.IB.HCAs}
	if spec.ComputeRails > 0 {
		f.Subnets = append(f.Subnets, b.subnet("compute", false, spec.ComputeRails, spec.Spines))
	}
	if spec.StorageRails > 0 {
		f.Subnets = append(f.Subnets, b.subnet("storage", true, spec.StorageRails, 1))
	}
	return f, nil
}

type builder struct {
	f    *Fabric
	spec *profile.IBFabric
	hcas []profile.HCA
}

func (b *builder) switchNode(s *Subnet, role string, i int) *Node {
	sw := &b.spec.Switch
	g := guid(b.f.Name, b.spec.SwitchOUI, fmt.Sprintf("%s/%s/%d", s.Name, role, i))
	nd := &Node{Type: Switch, GUID: g, SysGUID: g, DeviceID: b.spec.SwitchDeviceID, Revision: switchRevision,
		FWVersion: sw.FWVersion, Slot: -1, Subnet: s, PartitionCap: switchPartitionCap,
		LinearFDBCap: linearFDBCap, MulticastFDBCap: multicastFDBCap,
		Desc: fmt.Sprintf("MF0;%s-%s-%s%02d:%s/U1", b.f.Name, s.Name, role, i+1, sw.Model)}
	n := sw.Ports + 1
	if b.spec.ANDeviceID != 0 {
		n++ // the Aggregation Node's port
	}
	nd.Ports = make([]*Port, n)
	for p := range nd.Ports {
		nd.Ports[p] = &Port{Node: nd, Num: p, GUID: g}
	}
	return nd
}

// aggregationNode is switch sw's SHARP Aggregation Node: a CA inside the
// ASIC, on its last port. A real Quantum's node GUID is its switch's plus
// 8; its other GUIDs and revision are not known and follow the switch's.
func (b *builder) aggregationNode(sw *Node) *Node {
	g := sw.GUID + 8
	an := &Node{Type: CA, GUID: g, SysGUID: g, DeviceID: b.spec.ANDeviceID, Revision: sw.Revision,
		FWVersion: sw.FWVersion, Slot: -1, Subnet: sw.Subnet, PartitionCap: caPartitionCap,
		Desc: "Mellanox Technologies Aggregation Node"}
	an.Ports = []*Port{nil, {Node: an, Num: 1, GUID: g}}
	cable(an.Ports[1], sw.Ports[len(sw.Ports)-1])
	return an
}

// subnet cables one rail-optimized subnet: HCA rail r of every node on
// leaf r, ports 1 up; each leaf's upper half of ports to the spines, evenly.
func (b *builder) subnet(name string, storage bool, rails, spines int) *Subnet {
	s := &Subnet{Name: name, Prefix: gidPrefix, byGUID: map[uint64]*Port{}}
	ports := b.spec.Switch.Ports
	var sp, leaves []*Node
	for i := 0; i < spines; i++ {
		sp = append(sp, b.switchNode(s, "spine", i))
	}
	for r := 0; r < rails; r++ {
		leaves = append(leaves, b.switchNode(s, "leaf", r))
	}
	// Each leaf's upper half goes to the spines, as many cables to each as
	// fit: on the leaf, and on the spine beside the other leaves'.
	down := ports / 2
	per := min((ports-down)/spines, ports/rails)
	for r, l := range leaves {
		for j, s := range sp {
			for k := 0; k < per; k++ {
				cable(l.Ports[down+1+j*per+k], s.Ports[r*per+k+1])
			}
		}
	}
	s.Nodes = append(append(s.Nodes, sp...), leaves...)
	for slot, host := range b.f.Hosts {
		for i := range b.hcas {
			h := &b.hcas[i]
			if h.Ethernet || h.Storage != storage {
				continue
			}
			g, sys := CardGUIDs(b.f.Name, b.hcas, h, slot)
			ca := &Node{Type: CA, GUID: g, SysGUID: sys, DeviceID: h.Function.Device, FWVersion: h.Adapter.FWVersion,
				Slot: slot, HCA: h.Name, Adapter: h.Adapter, Subnet: s, PartitionCap: caPartitionCap,
				Desc: CADesc(host, h.Name)}
			ca.Ports = []*Port{nil, {Node: ca, Num: 1, GUID: g, Speed: h.Adapter.Speed}}
			cable(ca.Ports[1], leaves[h.Rail].Ports[slot+1])
			s.Nodes = append(s.Nodes, ca)
		}
	}
	// After the hosts, so that the hosts' LIDs do not depend on them.
	if b.spec.ANDeviceID != 0 {
		for _, sw := range append(append([]*Node{}, sp...), leaves...) {
			s.Nodes = append(s.Nodes, b.aggregationNode(sw))
		}
	}
	// The switches run at the fastest HCA's speed; each link trains to
	// its slower end's (Port.ActiveSpeed).
	speed := profile.IBSpeed(0)
	for _, nd := range s.Nodes {
		if nd.Type == CA && nd.Slot >= 0 {
			speed = max(speed, nd.Ports[1].Speed)
		}
	}
	if speed == 0 {
		speed = profile.SpeedNDR
	}
	lid := uint16(1)
	for _, nd := range s.Nodes {
		base := nd.Ports[0]
		switch {
		case nd.Type == Switch:
			for _, p := range nd.Ports {
				p.Speed = speed
			}
		case nd.Slot < 0: // an Aggregation Node runs at its switch's speed
			base = nd.Ports[1]
			base.Speed = speed
		default:
			base = nd.Ports[1]
		}
		base.LID = lid
		s.byGUID[nd.GUID] = base
		lid++
	}
	s.TopLID = lid - 1
	s.ByLID = make([]*Port, lid)
	for _, nd := range s.Nodes {
		p := nd.Base()
		s.ByLID[p.LID] = p
	}
	s.SM = sp[0].Ports[0]
	s.route()
	return s
}

func cable(a, b *Port) { a.Peer, b.Peer = b, a }

// Walk follows a directed route from port from: path[1..] are the ports
// taken out of each node in turn (IBA 14.2.2: path[0] is unused). It
// returns the port the packet arrives on, or nil where a port does not
// exist or has no cable. With no hops that is from itself.
func Walk(from *Port, path []byte) *Port {
	at := from
	for i, out := range path {
		if i == 0 {
			continue
		}
		nd := at.Node
		if int(out) >= len(nd.Ports) || nd.Ports[out] == nil || nd.Ports[out].Peer == nil {
			return nil
		}
		at = nd.Ports[out].Peer
	}
	return at
}

// LocalCAs are the local node's CAs of the subnet, by RDMA name.
func (s *Subnet) LocalCAs(slot int) map[string]*Node {
	out := map[string]*Node{}
	for _, nd := range s.Nodes {
		if nd.Type == CA && nd.Slot == slot {
			out[nd.HCA] = nd
		}
	}
	return out
}

// Find is the local CA named hca, in whichever subnet it is cabled to.
func (f *Fabric) Find(hca string) *Node {
	for _, s := range f.Subnets {
		if nd := s.LocalCAs(f.Local)[hca]; nd != nil {
			return nd
		}
	}
	return nil
}

// CADesc is a CA's node description as rdma-ndd writes it, "host mlx5_0",
// cut to the 64 bytes the kernel keeps (IB_DEVICE_NODE_DESC_MAX) and an
// SMP carries.
func CADesc(host, hca string) string {
	d := host + " " + hca
	if len(d) > 64 {
		d = d[:64]
	}
	return d
}

// model hashes what a fabric is built from, as every node of it has it.
func model(spec *profile.IBFabric, hcas []profile.HCA) string {
	h := fnv.New64a()
	e := json.NewEncoder(h) // pointers followed, as %v would not
	_ = e.Encode(spec)
	for _, c := range hcas {
		_ = e.Encode([]any{c.Name, c.Ethernet, c.Storage, c.Rail, c.Adapter})
	}
	return fmt.Sprintf("%016x", h.Sum64())
}
