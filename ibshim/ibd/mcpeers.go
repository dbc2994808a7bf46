package ibd

import (
	"encoding/binary"
	"encoding/json"
	"sort"

	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/ibshim/fabric"
)

// A fabric has one SA, which knows every group and member. Here each
// daemon takes the joins of its own node's ports, and tells the other
// real nodes' daemons its node's memberships whenever they change (a
// frame of groups, JSON, the whole of them), so that the SA of every node
// answers for the subnet and the switches' forwarding tables cover every
// member. A daemon that goes away takes its node's memberships with it.

const frameGroups = 5

// wireGroup is one group with this node's members, as a frame carries it.
type wireGroup struct {
	Subnet  int            `json:"subnet"`
	MGID    [16]byte       `json:"mgid"`
	Rec     [mcRecLen]byte `json:"rec"`
	Members []wireMember   `json:"members"`
}

type wireMember struct {
	GID  [16]byte `json:"gid"`
	Join byte     `json:"join"`
}

// groupsFrame is this node's memberships as a frame's body, or nil when
// they are too many for a frame (the peers keep the last they had).
// mu is held.
func (d *Daemon) groupsFrame() []byte {
	out := []wireGroup{}
	for k, g := range d.groups {
		w := wireGroup{Subnet: d.subnetIndex(k.s), MGID: k.mgid, Rec: g.rec}
		for _, gid := range g.order {
			w.Members = append(w.Members, wireMember{gid, g.members[gid]})
		}
		out = append(out, w)
	}
	b, _ := json.Marshal(out)
	if len(b) >= maxFrame {
		d.log.WithField("component", "ibd").Warnf("%d multicast groups are too many to tell the peers; they keep the groups they were told last", len(out))
		return nil
	}
	return b
}

// groupsChanged tells every peer this node's memberships and remakes the
// forwarding tables. mu is held.
func (d *Daemon) groupsChanged() {
	d.mftChanged()
	if len(d.links) == 0 {
		return
	}
	if b := d.groupsFrame(); b != nil {
		for p := range d.links {
			p.sendState(b)
		}
	}
}

// peerGroups takes the memberships a peer says its node has.
func (d *Daemon) peerGroups(p *peer, body []byte, log *logrus.Entry) {
	var in []wireGroup
	if err := json.Unmarshal(body, &in); err != nil {
		log.Warnf("multicast groups from peer: %v", err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p.groups = map[mcKey]*mcGroup{}
	for _, w := range in {
		if w.Subnet < 0 || w.Subnet >= len(d.fab.Subnets) {
			continue
		}
		g := &mcGroup{rec: w.Rec, members: map[[16]byte]byte{}}
		if l := mlidOfRec(g); l < 0xc000 || l == 0xffff {
			continue // no multicast LID (review: MulticastFDBTop wrapped)
		}
		for _, m := range w.Members {
			if g.members[m.GID] == 0 && m.Join != 0 {
				g.order = append(g.order, m.GID)
			}
			g.members[m.GID] |= m.Join
		}
		p.groups[mcKey{d.fab.Subnets[w.Subnet], w.MGID}] = g
	}
	d.mftChanged()
}

// subnetGroups is every group of subnet s that the fabric's real nodes
// joined, by MGID: this node's joins and those of the peers in use. A
// group keeps the fields it was made with on the first node that has it
// (this one, then the peers by slot). mu is held.
func (d *Daemon) subnetGroups(s *fabric.Subnet) map[[16]byte]*mcGroup {
	all := map[[16]byte]*mcGroup{}
	add := func(groups map[mcKey]*mcGroup) {
		for k, g := range groups {
			if k.s != s {
				continue
			}
			m := all[k.mgid]
			if m == nil {
				m = &mcGroup{rec: g.rec, members: map[[16]byte]byte{}}
				all[k.mgid] = m
			}
			for _, gid := range g.order {
				if m.members[gid] == 0 {
					m.order = append(m.order, gid)
				}
				m.members[gid] |= g.members[gid]
			}
		}
	}
	add(d.groups)
	slots := make([]int, 0, len(d.peers))
	for slot := range d.peers {
		slots = append(slots, slot)
	}
	sort.Ints(slots)
	for _, slot := range slots {
		add(d.peers[slot].groups)
	}
	return all
}

// subnetGroupCount is how many groups subnet s has: this node's and the
// peers' in use, each MGID once. mu is held.
func (d *Daemon) subnetGroupCount(s *fabric.Subnet) int {
	n := 0
	for k := range d.groups {
		if k.s == s {
			n++
		}
	}
	var theirs map[mcKey]bool
	for _, p := range d.peers {
		for k := range p.groups {
			if k.s == s && d.groups[k] == nil && !theirs[k] {
				if theirs == nil {
					theirs = map[mcKey]bool{}
				}
				theirs[k] = true
				n++
			}
		}
	}
	return n
}

// peerGroup is group k as the first peer in use (by slot) that has it
// made it, or nil: what a join of it here takes. mu is held.
func (d *Daemon) peerGroup(k mcKey) *mcGroup {
	var g *mcGroup
	first := -1
	for slot, p := range d.peers {
		if o := p.groups[k]; o != nil && (first < 0 || slot < first) {
			g, first = o, slot
		}
	}
	return g
}

// mlidOfRec is the MLID a group's record carries.
func mlidOfRec(g *mcGroup) uint16 { return binary.BigEndian.Uint16(g.rec[36:]) }
