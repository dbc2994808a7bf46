package ibd

import (
	"encoding/binary"

	"github.com/nvmock/nvmock/ibshim/fabric"
)

// The SA's records of switch tables and port tables (IBA 15.2.5), listed
// as OpenSM lists them (osm_sa_*_record.c): switches in its switch table's
// order, ports in its port table's (both keyed by GUID in network order,
// read little-endian on x86), with its component mask rules, which for an
// end node ignore the port a query names.
const (
	attrSL2VLRecord      = 0x13
	attrSwitchInfoRecord = 0x14
	attrLFTRecord        = 0x15
	attrMFTRecord        = 0x17
	attrPKeyRecord       = 0x33
	attrVLArbRecord      = 0x36
)

// switches are the subnet's switches, in OpenSM's switch table's order.
func switches(s *fabric.Subnet) []*fabric.Node {
	var sw []*fabric.Node
	for _, nd := range s.Nodes {
		if nd.Type == fabric.Switch {
			sw = append(sw, nd)
		}
	}
	return fabric.InOpenSMOrder(sw)
}

// portNodes are the nodes the SM has a port object for (a switch, or a CA
// whose port is up), in OpenSM's port table's order, or the one whose
// base LID the query names (bit 0).
func portNodes(s *fabric.Subnet, tmpl []byte, mask uint64) []*fabric.Node {
	if mask&1 != 0 {
		p := s.Port(binary.BigEndian.Uint16(tmpl))
		if p == nil || p.Base() != p {
			return nil
		}
		return []*fabric.Node{p.Node}
	}
	var nds []*fabric.Node
	for _, nd := range s.Nodes {
		if nd.Type == fabric.Switch || !nd.Ports[1].Down() {
			nds = append(nds, nd)
		}
	}
	return fabric.InOpenSMOrder(nds)
}

// ports are a node's ports a query covers: an end node's own port, or a
// switch's, all or the one named. ok is false for a number out of range.
func ports(nd *fabric.Node, named bool, num int) (out []*fabric.Port, ok bool) {
	if nd.Type != fabric.Switch {
		return nd.Ports[1:], true
	}
	if named {
		if num >= len(nd.Ports) {
			return nil, false
		}
		return nd.Ports[num : num+1], true
	}
	return nd.Ports, true
}

func (d *Daemon) switchInfoRecords(s *fabric.Subnet, tmpl []byte, mask uint64) [][]byte {
	var out [][]byte
	for _, sw := range switches(s) {
		if mask&1 != 0 && binary.BigEndian.Uint16(tmpl) != sw.Ports[0].LID {
			continue
		}
		r := make([]byte, 24)
		put16(r, sw.Ports[0].LID)
		switchInfo(sw, r[4:], d.mftTop(sw))
		out = append(out, r)
	}
	return out
}

func lftRecords(s *fabric.Subnet, tmpl []byte, mask uint64) [][]byte {
	var out [][]byte
	for _, sw := range switches(s) {
		if mask&1 != 0 && binary.BigEndian.Uint16(tmpl) != sw.Ports[0].LID {
			continue
		}
		lo, hi := 0, int(s.TopLID)/64 // the blocks in use: up to the top LID routed
		if mask&2 != 0 {
			lo = int(binary.BigEndian.Uint16(tmpl[2:]))
			hi = min(hi, lo)
		}
		for b := lo; b <= hi; b++ {
			r := make([]byte, 72)
			put16(r, sw.Ports[0].LID)
			put16(r[2:], uint16(b))
			for i := range 64 {
				r[8+i] = 0xff
				if lid := b*64 + i; lid < len(sw.LFT) {
					r[8+i] = sw.LFT[lid]
				}
			}
			out = append(out, r)
		}
	}
	return out
}

// mftRecords are the blocks up to the highest in use of every switch
// with one, each position of each.
func (d *Daemon) mftRecords(s *fabric.Subnet, tmpl []byte, mask uint64) [][]byte {
	var out [][]byte
	pb := binary.BigEndian.Uint16(tmpl[2:])
	for _, sw := range switches(s) {
		if mask&1 != 0 && binary.BigEndian.Uint16(tmpl) != sw.Ports[0].LID {
			continue
		}
		top := int(d.mftTop(sw)) - mlidBase
		if top < 0 {
			continue // no block in use
		}
		blo, bhi := 0, top/mftBlock
		plo, phi := 0, (len(sw.Ports)+15)/16-1
		if mask&(1<<3) != 0 {
			blo = int(pb & 0x1ff)
			bhi = min(bhi, blo)
		}
		if mask&(1<<1) != 0 {
			plo = int(pb >> 12)
			phi = min(phi, plo)
		}
		for b := blo; b <= bhi; b++ {
			for p := plo; p <= phi; p++ {
				r := make([]byte, 72)
				put16(r, sw.Ports[0].LID)
				put16(r[2:], uint16(p)<<12|uint16(b))
				d.mft(sw, uint32(b)|uint32(p)<<28, r[8:])
				out = append(out, r)
			}
		}
	}
	return out
}

// sl2vlRecords: every SL on VL 0, as the SMA answers. A switch has one
// per pair of ports (in, out); an end node one, out of its port.
func sl2vlRecords(s *fabric.Subnet, tmpl []byte, mask uint64) [][]byte {
	var out [][]byte
	for _, nd := range portNodes(s, tmpl, mask) {
		if nd.Type != fabric.Switch {
			r := make([]byte, 16)
			put16(r, nd.Base().LID)
			r[3] = byte(nd.Ports[1].Num) // in port 0
			out = append(out, r)
			continue
		}
		outs, ok1 := ports(nd, mask&(1<<2) != 0, int(tmpl[3]))
		ins, ok2 := ports(nd, mask&(1<<1) != 0, int(tmpl[2]))
		if !ok1 || !ok2 {
			continue
		}
		for _, o := range outs {
			for _, i := range ins {
				r := make([]byte, 16)
				put16(r, nd.Base().LID)
				r[2], r[3] = byte(i.Num), byte(o.Num)
				out = append(out, r)
			}
		}
	}
	return out
}

// pkeyRecords: each port's P_Key table blocks, the default partition
// alone, as the SMA answers. A CA's table (and a switch port 0's) has
// PartitionCap entries, a switch's other ports its enforcement cap's.
func pkeyRecords(s *fabric.Subnet, tmpl []byte, mask uint64) [][]byte {
	var out [][]byte
	for _, nd := range portNodes(s, tmpl, mask) {
		ps, ok := ports(nd, mask&(1<<2) != 0, int(tmpl[4]))
		if !ok {
			continue
		}
		for _, p := range ps {
			n := (int(nd.PartitionCap) + 31) / 32
			if nd.Type == fabric.Switch && p.Num != 0 {
				n = (switchEnforcementCap + 31) / 32
			}
			lo, hi := 0, n-1
			if mask&(1<<1) != 0 {
				// The block asked for, empty past the table, as OpenSM
				// makes it.
				lo = int(binary.BigEndian.Uint16(tmpl[2:]))
				hi = lo
			}
			for b := lo; b <= hi; b++ {
				r := make([]byte, 72)
				put16(r, nd.Base().LID)
				// OpenSM writes the block number in host order (x86's):
				// saquery, which prints it unconverted, shows it right.
				binary.LittleEndian.PutUint16(r[2:], uint16(b))
				r[4] = byte(p.Num)
				if b == 0 {
					put16(r[8:], 0xffff)
				}
				out = append(out, r)
			}
		}
	}
	return out
}

// vlArbRecords: blocks 1 to 4 of each port (low and high priority), no
// weights, as the SMA answers.
func vlArbRecords(s *fabric.Subnet, tmpl []byte, mask uint64) [][]byte {
	var out [][]byte
	for _, nd := range portNodes(s, tmpl, mask) {
		ps, ok := ports(nd, mask&(1<<1) != 0, int(tmpl[2]))
		if !ok {
			continue
		}
		for _, p := range ps {
			for b := 1; b <= 4; b++ {
				if mask&(1<<2) != 0 && int(tmpl[3]) != b {
					continue
				}
				r := make([]byte, 72)
				put16(r, nd.Base().LID)
				r[2], r[3] = byte(p.Num), byte(b)
				out = append(out, r)
			}
		}
	}
	return out
}
