package fabric

import (
	"math/bits"
	"sort"
)

// route fills every switch's linear forwarding table as OpenSM's default
// engine (min-hop) does (osm_ucast_mgr.c, osm_switch_recommend_path with
// LMC 0): destinations in its port table's order (GUIDs in network order,
// read little-endian on x86); a CA on this switch by its own port; else,
// of the ports on a least-hop path to the switch the destination hangs
// from, the first, in number order, with the fewest CA destinations
// routed through it so far (routes to switches are not counted). So each
// switch spreads the hosts evenly over parallel links and uplinks, which
// infiniband-diags' check_lft_balance checks.
//
// Routed again (a link went down or came back), the tables are made anew.
// OpenSM keeps the routes it set that are still least-hop, so fewer move
// there; here the tables must not depend on history, so that every
// node's daemon, whenever it started, shows the same.
func (s *Subnet) route() {
	var switches, dests []*Node
	for _, nd := range s.Nodes {
		if nd.Type == Switch {
			switches = append(switches, nd)
		}
		if p := nd.Base(); p.LID != NoLID && s.Port(p.LID) == p {
			dests = append(dests, nd)
		}
	}
	dests = InOpenSMOrder(dests)
	// Switches by index, so that the loops below, run for every switch
	// and destination (every nvmock exec builds a unit's fabric), index
	// slices rather than maps.
	idx := make(map[*Node]int, len(switches))
	for i, sw := range switches {
		idx[sw] = i
	}
	hops := make([][]int, len(switches)) // to switch -> from switch -> least hops; -1: none
	for i, sw := range switches {
		hops[i] = hopsTo(sw, idx)
	}
	// The switch each destination hangs from (itself for a switch).
	to := make([]int, len(dests))
	for j, dst := range dests {
		to[j] = -1
		at := dst
		if dst.Type == CA {
			if dst.Ports[1].Peer == nil {
				continue
			}
			at = dst.Ports[1].Peer.Node
		}
		if i, ok := idx[at]; ok {
			to[j] = i
		}
	}
	type uplink struct{ num, sw int }
	for si, sw := range switches {
		sw.LFT = make([]uint8, int(s.TopLID)+1)
		for l := range sw.LFT {
			sw.LFT[l] = 0xff // unreachable
		}
		var links []uplink // ports to other switches, in number order
		for _, p := range sw.Ports[1:] {
			if p.Peer != nil && p.Peer.Node.Type == Switch {
				links = append(links, uplink{p.Num, idx[p.Peer.Node]})
			}
		}
		paths := make([]int, len(sw.Ports))
		for j, dst := range dests {
			lid := dst.Base().LID
			if dst == sw {
				sw.LFT[lid] = 0
				continue
			}
			if to[j] < 0 {
				continue
			}
			if to[j] == si { // a CA on this switch
				sw.LFT[lid] = uint8(dst.Ports[1].Peer.Num)
				continue
			}
			h := hops[to[j]]
			least := h[si]
			if least < 0 {
				continue
			}
			best := -1
			for _, l := range links {
				if h[l.sw] >= 0 && h[l.sw]+1 == least && (best < 0 || paths[l.num] < paths[best]) {
					best = l.num
				}
			}
			if best < 0 {
				continue
			}
			sw.LFT[lid] = uint8(best)
			if dst.Type == CA {
				paths[best]++
			}
		}
	}
}

// hopsTo is the least number of switch-to-switch hops from each switch
// (by idx) to to, -1 where there is no path.
func hopsTo(to *Node, idx map[*Node]int) []int {
	d := make([]int, len(idx))
	for i := range d {
		d[i] = -1
	}
	d[idx[to]] = 0
	queue := []*Node{to}
	for len(queue) > 0 {
		at := queue[0]
		queue = queue[1:]
		for _, p := range at.Ports {
			if p != nil && p.Peer != nil && p.Peer.Node.Type == Switch {
				if n := idx[p.Peer.Node]; d[n] < 0 {
					d[n] = d[idx[at]] + 1
					queue = append(queue, p.Peer.Node)
				}
			}
		}
	}
	return d
}

// Base is the port through which a node is addressed: a switch's port 0,
// a CA's port.
func (n *Node) Base() *Port {
	if n.Type == Switch {
		return n.Ports[0]
	}
	return n.Ports[1]
}

// InOpenSMOrder is nodes in the order of OpenSM's GUID-keyed tables: by
// the GUID as stored (network order), read as a little-endian number on
// x86.
func InOpenSMOrder(nodes []*Node) []*Node {
	out := append([]*Node(nil), nodes...)
	sort.SliceStable(out, func(i, j int) bool {
		return bits.ReverseBytes64(out[i].Base().GUID) < bits.ReverseBytes64(out[j].Base().GUID)
	})
	return out
}
