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
	hops := map[*Node]map[*Node]int{} // to switch -> from switch -> least hops
	for _, sw := range switches {
		hops[sw] = switchHops(sw)
	}
	for _, sw := range switches {
		sw.LFT = make([]uint8, int(s.TopLID)+1)
		for l := range sw.LFT {
			sw.LFT[l] = 0xff // unreachable
		}
		paths := make([]int, len(sw.Ports))
		for _, dst := range dests {
			lid := dst.Base().LID
			if dst == sw {
				sw.LFT[lid] = 0
				continue
			}
			to := dst // the switch it hangs from
			if dst.Type == CA {
				if to = dst.Ports[1].Peer.Node; to == sw {
					sw.LFT[lid] = uint8(dst.Ports[1].Peer.Num)
					continue
				}
			}
			least, ok := hops[to][sw]
			if !ok {
				continue
			}
			best := -1
			for _, p := range sw.Ports[1:] {
				if p.Peer == nil || p.Peer.Node.Type != Switch {
					continue
				}
				if d, ok := hops[to][p.Peer.Node]; ok && d+1 == least && (best < 0 || paths[p.Num] < paths[best]) {
					best = p.Num
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
