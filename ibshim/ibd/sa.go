package ibd

import (
	"bytes"
	"encoding/binary"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/profile"
)

// SA attributes (IBA 15.2.5) and the header offsets of an SA MAD.
const (
	attrNodeRecord     = 0x11
	attrPortInfoRecord = 0x12
	attrSMInfoRecord   = 0x18
	attrLinkRecord     = 0x20
	attrGUIDInfoRecord = 0x30
	attrServiceRecord  = 0x31
	attrPathRecord     = 0x35
	attrMCMemberRecord = 0x38
	attrInformRecord   = 0xf3
	saHdrLen           = 56
	saStatusInvalid    = 0x0200
)

// field is where a component mask bit's field lies in a record: bytes, or
// the bits of mask within one byte.
type field struct {
	off, n int
	mask   byte
	all    bool // the record has every bit the query sets (a capability mask)
}

func at(off, n int) field        { return field{off: off, n: n} }
func bits(off int, m byte) field { return field{off: off, n: 1, mask: m} }
func allOf(off, n int) field     { return field{off: off, n: n, all: true} }

// recordKind is one SA record type: its size and component fields.
// Filters on fields not listed are refused, except PathRecord's
// selectors and path counts, which constrain a path rather than name it:
// the fabric has one path between two ports and it meets them.
type recordKind struct {
	size   int
	fields map[int]field // component mask bit -> field
	loose  bool          // unknown component bits are ignored (PathRecord)
}

var records = map[uint16]recordKind{
	attrNodeRecord: {size: 108, fields: map[int]field{0: at(0, 2), 1: at(2, 2), 2: at(4, 1), 3: at(5, 1), 4: at(6, 1),
		5: at(7, 1), 6: at(8, 8), 7: at(16, 8), 8: at(24, 8), 9: at(32, 2), 10: at(34, 2), 11: at(36, 4),
		12: at(40, 1), 13: at(41, 3), 14: at(44, 64)}},
	// Bit 7 is PortInfo's CapabilityMask: saquery -s asks for IsSM ports.
	attrPortInfoRecord: {size: 68, fields: map[int]field{0: at(0, 2), 1: at(2, 1), 7: allOf(24, 4)}},
	attrSMInfoRecord: {size: 25, fields: map[int]field{0: at(0, 2), 1: at(2, 2), 2: at(4, 8), 3: at(12, 8),
		4: at(20, 4), 5: bits(24, 0xf0), 6: bits(24, 0x0f)}},
	attrLinkRecord:     {size: 6, fields: map[int]field{0: at(0, 2), 1: at(2, 1), 2: at(3, 1), 3: at(4, 2)}},
	attrGUIDInfoRecord: {size: 72, fields: map[int]field{0: at(0, 2), 1: at(2, 1)}},
	attrPathRecord: {size: 64, loose: true, fields: map[int]field{2: at(8, 16), 3: at(24, 16), 4: at(40, 2),
		5: at(42, 2), 13: at(50, 2), 15: bits(53, 0x0f), 17: bits(54, 0x3f), 19: bits(55, 0x3f)}},
	attrServiceRecord: {size: 176, loose: true},
	// PortGID, Scope and JoinState: mcRecords.
	attrMCMemberRecord: {size: mcRecLen, loose: true, fields: map[int]field{0: at(0, 16), 2: at(32, 4),
		3: at(36, 2), 6: at(39, 1), 7: at(40, 2), 12: bits(44, 0xf0)}},
	attrInformRecord: {size: 60, loose: true},
	// Switch and port tables: their components are matched as OpenSM
	// does (sarecords.go).
	attrSwitchInfoRecord: {size: 24, loose: true},
	attrLFTRecord:        {size: 72, loose: true},
	attrMFTRecord:        {size: 72, loose: true},
	attrSL2VLRecord:      {size: 16, loose: true},
	attrPKeyRecord:       {size: 72, loose: true},
	attrVLArbRecord:      {size: 72, loose: true},
}

// sa answers a subnet administration query from port from. It returns the
// response's SA data (records laid out at the attribute offset) and status.
func (d *Daemon) sa(m mad, from *fabric.Port) (out []byte, attrOffset int, status uint16) {
	s := from.Node.Subnet
	if m[2] != 2 {
		return nil, 0, statusBadVersion // SA is class version 2
	}
	if m.attr() == attrClassInfo {
		if m.method() != methodGet {
			return nil, 0, statusBadMethodAttr
		}
		b := make([]byte, madLen-saHdrLen)
		b[0], b[1] = 1, 2
		put32(b[4:], 18)
		return b, 0, 0
	}
	kind, ok := records[m.attr()]
	if !ok {
		return nil, 0, statusBadMethodAttr
	}
	off := (kind.size + 7) / 8
	if m.attr() == attrMCMemberRecord && (m.method() == methodSet || m.method() == methodDelete) {
		r, st := d.mcJoin(m, from)
		return r, off, st
	}
	if m.method() != methodGet && m.method() != methodGetTbl {
		return nil, 0, statusBadMethod
	}
	mask := binary.BigEndian.Uint64(m[48:])
	tmpl := m[saHdrLen:]
	for bit := 0; bit < 64 && !kind.loose; bit++ {
		if _, known := kind.fields[bit]; mask&(1<<bit) != 0 && !known {
			return nil, 0, saStatusInvalid // a filter this SA cannot apply
		}
	}
	var all [][]byte
	switch m.attr() {
	case attrNodeRecord:
		all = d.nodeRecords(s)
	case attrPortInfoRecord:
		all = d.portInfoRecords(s)
	case attrSMInfoRecord:
		r := make([]byte, kind.size)
		put16(r, s.SM.LID)
		put64(r[4:], s.SM.Node.GUID)
		put32(r[20:], d.activity())
		r[24] = smPriority<<4 | smStateMaster
		all = [][]byte{r}
	case attrLinkRecord:
		for _, nd := range s.Nodes {
			for _, p := range nd.Ports {
				if p != nil && p.Peer != nil {
					r := make([]byte, kind.size)
					put16(r, p.Base().LID)
					r[2], r[3] = byte(p.Num), byte(p.Peer.Num)
					put16(r[4:], p.Peer.Base().LID)
					all = append(all, r)
				}
			}
		}
	case attrGUIDInfoRecord:
		for lid := 1; lid <= int(s.TopLID); lid++ {
			if s.ByLID[lid] == nil {
				continue // a down port's
			}
			r := make([]byte, kind.size)
			put16(r, uint16(lid))
			put64(r[8:], s.ByLID[lid].GUID)
			all = append(all, r)
		}
	case attrPathRecord:
		all = d.pathRecords(s, from, tmpl, mask)
	case attrMCMemberRecord:
		all = d.mcRecords(s, tmpl, mask, binary.BigEndian.Uint64(m[36:]) == saKey)
	case attrSwitchInfoRecord:
		all = d.switchInfoRecords(s, tmpl, mask)
	case attrLFTRecord:
		all = lftRecords(s, tmpl, mask)
	case attrMFTRecord:
		all = d.mftRecords(s, tmpl, mask)
	case attrSL2VLRecord:
		all = sl2vlRecords(s, tmpl, mask)
	case attrPKeyRecord:
		if binary.BigEndian.Uint64(m[36:]) != saKey {
			return nil, 0, saStatusInvalid // trusted requests only (IBA p922)
		}
		all = pkeyRecords(s, tmpl, mask)
	case attrVLArbRecord:
		all = vlArbRecords(s, tmpl, mask)
	}
	// Mock nodes run no IPoIB (whose broadcast group an SM makes),
	// register no services and subscribe to no traps: no service or
	// inform records, and only the multicast groups programs join.
	var match [][]byte
	for _, r := range all {
		if matches(r, tmpl, mask, kind.fields) {
			match = append(match, r)
		}
	}
	if m.method() == methodGet {
		switch len(match) {
		case 0:
			return nil, off, saNoRecords
		case 1:
		default:
			return nil, off, saTooMany
		}
	}
	out = make([]byte, len(match)*off*8)
	for i, r := range match {
		copy(out[i*off*8:], r)
	}
	return out, off, 0
}

func matches(r, tmpl []byte, mask uint64, fields map[int]field) bool {
	for bit, f := range fields {
		if mask&(1<<bit) == 0 || f.off+f.n > len(tmpl) {
			continue
		}
		if f.all {
			if binary.BigEndian.Uint32(r[f.off:])&binary.BigEndian.Uint32(tmpl[f.off:]) != binary.BigEndian.Uint32(tmpl[f.off:]) {
				return false
			}
		} else if f.mask != 0 {
			if r[f.off]&f.mask != tmpl[f.off]&f.mask {
				return false
			}
		} else if !bytes.Equal(r[f.off:f.off+f.n], tmpl[f.off:f.off+f.n]) {
			return false
		}
	}
	return true
}

func (d *Daemon) nodeRecords(s *fabric.Subnet) [][]byte {
	var out [][]byte
	for _, nd := range s.Nodes {
		p := nd.Base()
		if p.Down() {
			continue // the SM took it out of the subnet
		}
		r := make([]byte, 108)
		put16(r, p.LID)
		nodeInfo(nd, p, r[4:44])
		copy(r[44:], nd.Desc)
		out = append(out, r)
	}
	return out
}

func (d *Daemon) portInfoRecords(s *fabric.Subnet) [][]byte {
	var out [][]byte
	for _, nd := range s.Nodes {
		for _, p := range nd.Ports {
			if p == nil || p.Down() {
				continue
			}
			r := make([]byte, 68)
			put16(r, p.Base().LID)
			r[2] = byte(p.Num)
			d.portInfo(p, p, r[4:])
			out = append(out, r)
		}
	}
	return out
}

// pathRecords lists paths from the requester (or the source the query
// names) to every destination, or the one it names. Paths between two
// other ports are not listed: on a real SA that is every pair of ports.
func (d *Daemon) pathRecords(s *fabric.Subnet, from *fabric.Port, tmpl []byte, mask uint64) [][]byte {
	src := from
	if mask&(1<<5) != 0 {
		src = s.Port(binary.BigEndian.Uint16(tmpl[42:]))
	} else if mask&(1<<3) != 0 {
		src = s.ByGUID(binary.BigEndian.Uint64(tmpl[32:]))
	}
	if src == nil || src.Down() {
		return nil
	}
	var out [][]byte
	for lid := 1; lid <= int(s.TopLID); lid++ {
		dst := s.ByLID[lid]
		if dst == nil {
			continue // a down port's
		}
		r := make([]byte, 64)
		put64(r[8:], s.Prefix)
		put64(r[16:], dst.GUID)
		put64(r[24:], s.Prefix)
		put64(r[32:], src.GUID)
		put16(r[40:], dst.LID)
		put16(r[42:], src.LID)
		r[49] = 0x80 // reversible
		put16(r[50:], 0xffff)
		r[54] = 2<<6 | mtu4096
		r[55] = 2<<6 | rateEnum(min(src.ActiveSpeed(), dst.ActiveSpeed())) // the path's slowest link
		r[56] = 2<<6 | 18
		out = append(out, r)
	}
	return out
}

// rateEnum is the SA's rate encoding of a 4X port (IBA 15.2.5.16).
func rateEnum(s profile.IBSpeed) byte {
	switch s {
	case profile.SpeedHDR:
		return 17 // 200 Gb/s
	case profile.SpeedXDR:
		return 23 // 800 Gb/s
	}
	return 21 // 400 Gb/s
}
