package ibd

import (
	"encoding/binary"

	"github.com/nvmock/nvmock/ibshim/fabric"
)

// The switches' multicast forwarding tables, as the SM programs them for
// the groups the fabric's real nodes joined: a spanning tree per MLID
// over its members (fabric.MulticastTree), remade when a group, a peer or
// a link changes.

// mftBlock is how many MLIDs a MulticastForwardingTable block holds.
const mftBlock = 32

// mfts is each switch's table: MLID -> port mask chunks. mu is held.
func (d *Daemon) mfts(s *fabric.Subnet) map[*fabric.Node]map[uint16][]uint16 {
	if t, ok := d.mftCache[s]; ok {
		return t
	}
	members := map[uint16][]*fabric.Port{}
	for _, g := range d.subnetGroups(s) {
		mlid := mlidOfRec(g)
		for _, gid := range g.order {
			if p := s.ByGUID(binary.BigEndian.Uint64(gid[8:])); p != nil {
				members[mlid] = append(members[mlid], p)
			}
		}
	}
	t := map[*fabric.Node]map[uint16][]uint16{}
	for mlid, ps := range members {
		for sw, mask := range s.MulticastTree(ps) {
			if t[sw] == nil {
				t[sw] = map[uint16][]uint16{}
			}
			t[sw][mlid] = mask
		}
	}
	if d.mftCache == nil {
		d.mftCache = map[*fabric.Subnet]map[*fabric.Node]map[uint16][]uint16{}
	}
	d.mftCache[s] = t
	return t
}

// mftChanged forgets the tables: a group, a member or a link changed.
// mu is held.
func (d *Daemon) mftChanged() { d.mftCache = nil }

// mft fills one MulticastForwardingTable block of switch nd (IBA
// 14.2.5.12): the attribute modifier's low 9 bits pick 32 MLIDs from
// 0xC000, its top 4 bits which 16 ports. It returns the MAD status.
// mu is held.
func (d *Daemon) mft(nd *fabric.Node, mod uint32, data []byte) uint16 {
	block, pos := int(mod&0x1ff), int(mod>>28)
	if block >= int(nd.MulticastFDBCap)/mftBlock || pos*16 >= len(nd.Ports) {
		return statusBadValue
	}
	t := d.mfts(nd.Subnet)[nd]
	for i := range mftBlock {
		if mask := t[uint16(mlidBase+block*mftBlock+i)]; mask != nil {
			put16(data[2*i:], mask[pos])
		}
	}
	return 0
}

// mftTop is the switch's MulticastFDBTop as OpenSM sets it on a switch
// that supports it: the last MLID of the highest block in use, or 0xBFFF
// when none is. (The captured Quantum's port 0 does not advertise
// IsMulticastFDBTopSupported, so OpenSM would leave it alone there; what
// the switch then reports is not known. This lets ibroute -M read the
// tables.) OpenSM never lowers it; this follows the groups. mu is held.
func (d *Daemon) mftTop(nd *fabric.Node) uint16 {
	top := -1
	for mlid := range d.mfts(nd.Subnet)[nd] {
		top = max(top, int(mlid-mlidBase)/mftBlock)
	}
	return uint16(mlidBase + (top+1)*mftBlock - 1)
}
