package ibd

import (
	"bytes"
	"encoding/binary"
	"hash/fnv"
	"sort"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/ibshim/umad"
)

// Multicast groups: the SA's MCMemberRecord (IBA 15.2.5.17), which a port
// sets to join a group (made at its first join) and deletes to leave it,
// and the QPs attached to a group's MLID, to which the daemon copies each
// datagram sent to it.
//
// A daemon takes the joins of its node's ports and learns the other real
// nodes' from their daemons (mcpeers.go). A group's MLID follows from its
// MGID, so that every node's daemon gives the same one and a datagram
// relayed to a peer reaches the QPs attached there. (A real SM hands out
// MLIDs from 0xC000 in the order groups are made; which one a group gets
// is not something programs can rely on.)
// Two groups may then share an MLID, which a real SM does only when it
// runs out: a datagram carries its group's GID (its GRH's destination),
// by which ports and QPs tell the groups apart.

const (
	methodDelete  = 0x15
	methodDelResp = 0x95
	mlidBase      = 0xc000
	mlidTop       = 0xfffe // 0xffff is the permissive LID

	saStatusInsufficient = 0x0600 // 15.2.1.1: ERR_REQ_INSUFFICIENT_COMPONENTS
	saStatusNoResources  = 0x0100 // ERR_NO_RESOURCES

	joinFull = 1 // JoinState bits: full member, non-member, send-only non-member
	saKey    = 1 // OpenSM's default SA key: a query with it is trusted
	mcRecLen = 52
)

// MCMemberRecord component mask bits.
const (
	mcMGID      = 1 << 0
	mcPortGID   = 1 << 1
	mcQKey      = 1 << 2
	mcTClass    = 1 << 6
	mcPKey      = 1 << 7
	mcSL        = 1 << 12
	mcFlowLabel = 1 << 13
	mcScope     = 1 << 15
	mcJoinState = 1 << 16
)

type mcKey struct {
	s    *fabric.Subnet
	mgid [16]byte
}

type mcGroup struct {
	rec     [mcRecLen]byte    // the group's fields, as made
	members map[[16]byte]byte // port GID -> join state bits
	order   [][16]byte        // members in the order they joined
}

// mcAttach is one QP attached to a group's MLID.
type mcAttach struct {
	c   *conn
	qpn uint32
}

type mlidKey struct {
	s    *fabric.Subnet
	mlid uint16
}

// mlidOf is a group's MLID, from its MGID.
func mlidOf(mgid [16]byte) uint16 {
	h := fnv.New32a()
	h.Write(mgid[:])
	return uint16(mlidBase + h.Sum32()%(mlidTop-mlidBase+1))
}

// portGID is a port's GID: the subnet prefix and the port's GUID.
func portGID(p *fabric.Port) (g [16]byte) {
	binary.BigEndian.PutUint64(g[:], p.Node.Subnet.Prefix)
	binary.BigEndian.PutUint64(g[8:], p.GUID)
	return g
}

// mcJoin answers an MCMemberRecord Set (join) or Delete (leave) from port
// from: the record, or an SA status. mu is held.
func (d *Daemon) mcJoin(m mad, from *fabric.Port) ([]byte, uint16) {
	mask := binary.BigEndian.Uint64(m[48:])
	t := m[saHdrLen : saHdrLen+mcRecLen]
	var mgid, pgid [16]byte
	copy(mgid[:], t)
	copy(pgid[:], t[16:])
	join := t[48] & 0x0f
	if mask&(mcMGID|mcPortGID|mcJoinState) != mcMGID|mcPortGID|mcJoinState {
		return nil, saStatusInsufficient
	}
	// A port joins for itself: proxy joins and SM-assigned MGIDs (an MGID
	// of zero) are not simulated, and refused as OpenSM refuses a bad one.
	if pgid != portGID(from) || join == 0 || mgid[0] != 0xff {
		return nil, saStatusInvalid
	}
	if d.groups == nil {
		d.groups = map[mcKey]*mcGroup{}
	}
	k := mcKey{from.Node.Subnet, mgid}
	g := d.groups[k]
	if g == nil && m.method() != methodDelete {
		// A group another node's ports joined: this node joins it as made.
		if o := d.peerGroup(k); o != nil {
			g = &mcGroup{rec: o.rec, members: map[[16]byte]byte{}}
			if !fits(g, t, mask) {
				return nil, saStatusInvalid
			}
			d.groups[k] = g
		}
	}
	if m.method() == methodDelete {
		// A leave names join states the port holds (o15-0.1.14).
		if g == nil || g.members[pgid] == 0 || join&^g.members[pgid] != 0 {
			return nil, saStatusInvalid
		}
		if g.members[pgid] &^= join; g.members[pgid] == 0 {
			g.leave(pgid)
			if len(g.members) == 0 {
				delete(d.groups, k)
			}
		}
		d.groupsChanged()
		return g.record(pgid, join), 0
	}
	if g == nil {
		// Making a group takes what its packets carry (OpenSM's rule),
		// and a full member (o15-0.1.9).
		need := uint64(mcQKey | mcTClass | mcPKey | mcSL | mcFlowLabel)
		if mask&need != need {
			return nil, saStatusInsufficient
		}
		if join&joinFull == 0 {
			return nil, saStatusInvalid
		}
		if binary.BigEndian.Uint16(t[40:])&0x7fff != 0x7fff {
			return nil, saStatusInvalid // the ports hold the default partition alone
		}
		if d.subnetGroupCount(k.s) > mlidTop-mlidBase {
			return nil, saStatusNoResources // as many groups as the subnet has MLIDs
		}
		g = &mcGroup{members: map[[16]byte]byte{}}
		copy(g.rec[:], t)
		binary.BigEndian.PutUint16(g.rec[36:], mlidOf(mgid))
		g.rec[38] = 2<<6 | mtu4096
		g.rec[42] = 2<<6 | rateEnum(from.ActiveSpeed())
		g.rec[43] = 2<<6 | 18
		g.rec[47] = 0                     // hop limit: the subnet has no routers
		g.rec[48] = (mgid[1] & 0x0f) << 4 // scope, from the MGID; join state per member
		clear(g.rec[49:])
		d.groups[k] = g
	} else if !fits(g, t, mask) {
		return nil, saStatusInvalid
	}
	if g.members[pgid] == 0 {
		g.order = append(g.order, pgid)
	}
	g.members[pgid] |= join
	d.groupsChanged()
	return g.record(pgid, g.members[pgid]), 0
}

// fits says whether a join's record t fits group g: a join must fit the
// group it joins.
func fits(g *mcGroup, t []byte, mask uint64) bool {
	return (mask&mcQKey == 0 || bytes.Equal(t[32:36], g.rec[32:36])) && (mask&mcPKey == 0 || bytes.Equal(t[40:42], g.rec[40:42]))
}

// record is the group's MCMemberRecord for one member.
func (g *mcGroup) record(pgid [16]byte, join byte) []byte {
	r := make([]byte, mcRecLen)
	copy(r, g.rec[:])
	copy(r[16:], pgid[:])
	r[48] = r[48]&0xf0 | join
	return r
}

// mcRecords answers a query (OpenSM's rules, after the IBA's p923): a
// record per group, or for the port the query names; a trusted query
// (OpenSM's SA key) without a port gets a record per member. Only a
// trusted one sees PortGID and JoinState. The other components are
// matched by the caller.
func (d *Daemon) mcRecords(s *fabric.Subnet, t []byte, mask uint64, trusted bool) [][]byte {
	groups := d.subnetGroups(s)
	var keys [][16]byte
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return bytes.Compare(keys[i][:], keys[j][:]) < 0 })
	var out [][]byte
	stateMask := byte(0)
	if mask&mcScope != 0 {
		stateMask |= 0xf0
	}
	if mask&mcJoinState != 0 {
		stateMask |= 0x0f
	}
	for _, k := range keys {
		g := groups[k]
		var recs [][]byte
		switch {
		case mask&mcPortGID != 0:
			var p [16]byte
			copy(p[:], t[16:])
			if g.members[p] != 0 {
				recs = append(recs, g.record(p, g.members[p]))
			}
		case trusted:
			for _, p := range g.order {
				recs = append(recs, g.record(p, g.members[p]))
			}
		default:
			recs = append(recs, g.record([16]byte{}, g.rec[48]&0x0f))
		}
		for _, r := range recs {
			if r[48]&stateMask != t[48]&stateMask {
				continue
			}
			if !trusted {
				clear(r[16:32])
				r[48] &= 0xf0
				r[49] &^= 0x80 // ProxyJoin
			}
			out = append(out, r)
		}
	}
	return out
}

// mcAttachMsg takes a verbs context's attach or detach of one of its QPs
// to an MLID: u32 magic, u32 op, u32 qpn, u16 mlid, u8 attach.
func (d *Daemon) mcAttachMsg(c *conn, msg []byte) {
	if len(msg) < umad.VerbsAttachSize {
		return
	}
	le := binary.LittleEndian
	qpn, mlid, on := le.Uint32(msg[8:]), le.Uint16(msg[12:]), msg[14] != 0
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.verbsPort == nil || qpn/umad.QPNBlock != c.block || mlid < mlidBase || mlid > mlidTop {
		return
	}
	k := mlidKey{c.verbsPort.Node.Subnet, mlid}
	if d.attached == nil {
		d.attached = map[mlidKey]map[mcAttach]bool{}
	}
	if on {
		if d.attached[k] == nil {
			d.attached[k] = map[mcAttach]bool{}
		}
		d.attached[k][mcAttach{c, qpn}] = true
		return
	}
	delete(d.attached[k], mcAttach{c, qpn})
	if len(d.attached[k]) == 0 {
		delete(d.attached, k)
	}
}

// mcDrop forgets a context's attachments. mu is held.
func (d *Daemon) mcDrop(c *conn) {
	for k, set := range d.attached {
		for a := range set {
			if a.c == c {
				delete(set, a)
			}
		}
		if len(set) == 0 {
			delete(d.attached, k)
		}
	}
}

// mcTargets is the QPs of this node attached to an MLID, on ports that
// are up and joined a group of that MLID to receive (a full member or a
// non-member; a send-only member receives nothing): as on a fabric, where
// the SM routes a group only to the ports that joined it. The joins of
// this node's ports were made through this daemon. mu is held.
func (d *Daemon) mcTargets(s *fabric.Subnet, mlid uint16, msg []byte) []mcAttach {
	var out []mcAttach
	for a := range d.attached[mlidKey{s, mlid}] {
		if p := a.c.verbsPort; p != nil && !p.Down() && d.receives(p, mlid, groupOf(msg)) {
			out = append(out, a)
		}
	}
	return out
}

// groupOf is the GID a datagram to a group names (its GRH's
// destination), or zero: sent without a GRH, it names its MLID alone.
func groupOf(msg []byte) (g [16]byte) {
	if msg[umad.PktFlagsOffset]&umad.PktMcast != 0 && len(msg) >= umad.PktSize+16 {
		copy(g[:], msg[umad.PktSize:])
	}
	return g
}

func (d *Daemon) receives(p *fabric.Port, mlid uint16, mgid [16]byte) bool {
	gid := portGID(p)
	for k, g := range d.groups {
		if k.s == p.Node.Subnet && binary.BigEndian.Uint16(g.rec[36:]) == mlid && (mgid == [16]byte{} || k.mgid == mgid) &&
			g.members[gid]&3 != 0 { // a full member or a non-member: not send-only
			return true
		}
	}
	return false
}

// countIn counts a datagram in at each port it reaches, once a port.
func (d *Daemon) countIn(ts []mcAttach, n int) {
	seen := map[*fabric.Port]bool{}
	for _, t := range ts {
		if p := t.c.verbsPort; !seen[p] {
			seen[p] = true
			d.countData(nil, p, n)
		}
	}
}

// mcPacket sends a datagram a context sent to an MLID to this node's QPs
// attached to it and to every peer, which does the same for its own.
// Called with mu held; unlocks it.
func (d *Daemon) mcPacket(c *conn, from *fabric.Port, mlid uint16, msg []byte) {
	le := binary.LittleEndian
	if from.Down() || le.Uint32(msg[umad.PktSQPNOffset:])/umad.QPNBlock != c.block ||
		msg[umad.PktKindOffset] != umad.PktUDSend {
		d.mu.Unlock()
		return // a connected QP's packets go to a port, not a group
	}
	s := from.Node.Subnet
	ts := d.mcTargets(s, mlid, msg)
	idx := d.subnetIndex(s)
	peers := make([]*peer, 0, len(d.peers))
	for _, p := range d.peers {
		peers = append(peers, p)
	}
	d.countData(from, nil, len(msg)-umad.PktSize)
	d.countIn(ts, len(msg)-umad.PktSize)
	d.mu.Unlock()
	for _, t := range ts {
		t.c.sendData(addressed(msg, t.qpn))
	}
	for _, p := range peers {
		p.sendWait(frameVerbs, []byte{byte(idx)}, msg)
	}
}

// addressed is a copy of a packet to a group, addressed to one QP.
func addressed(msg []byte, qpn uint32) []byte {
	b := append([]byte(nil), msg...)
	binary.LittleEndian.PutUint32(b[umad.PktDQPNOffset:], qpn)
	return b
}

// mcPortsDown takes the ports of this node that are down out of their
// groups: OpenSM's drop manager does so with a port it no longer finds,
// and a program joins again when the port is back (IPoIB does, on the
// port's event). mu is held.
func (d *Daemon) mcPortsDown() {
	changed := false
	for k, g := range d.groups {
		for gid := range g.members {
			if p := k.s.ByGUID(binary.BigEndian.Uint64(gid[8:])); p == nil || p.Down() {
				g.leave(gid)
				changed = true
			}
		}
		if len(g.members) == 0 {
			delete(d.groups, k)
		}
	}
	if changed {
		d.groupsChanged()
	}
}

// leave takes a port out of the group.
func (g *mcGroup) leave(gid [16]byte) {
	delete(g.members, gid)
	for i, p := range g.order {
		if p == gid {
			g.order = append(g.order[:i], g.order[i+1:]...)
			return
		}
	}
}
