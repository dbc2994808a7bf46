package fabric

// MulticastTree is the spanning tree an SM routes one MLID over, as
// OpenSM builds it (osm_mcast_mgr.c): for each switch on the tree, the
// ports its multicast forwarding table sends the MLID out of, in 16-port
// chunks as MFT blocks hold them (chunk i, bit j: port 16i+j). members
// are the ports of every group with the MLID, whatever their join state;
// a port that is down is left out, and with fewer than two there is no
// tree.
//
// The root is the switch whose farthest member is the fewest hops away
// (a member behind a switch counts one hop more), the first such in
// OpenSM's switch table, which is keyed by the GUID as stored (network
// order), read as a little-endian number on x86. From each switch the
// members are split by the first port, in number order, on a least-hop
// path to the switch each hangs from; every switch below the root also
// forwards back up the link it was reached by.
func (s *Subnet) MulticastTree(members []*Port) map[*Node][]uint16 {
	var ports []*Port
	seen := map[*Port]bool{}
	for _, p := range members {
		if p != nil && p.Node.Type == CA && p.Peer != nil && p.Peer.Node.Type == Switch && !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	if len(ports) < 2 {
		return nil
	}
	var switches []*Node
	for _, nd := range s.Nodes {
		if nd.Type == Switch {
			switches = append(switches, nd)
		}
	}
	switches = InOpenSMOrder(switches)
	hops := map[*Node]map[*Node]int{} // member's switch -> switch -> least hops to it
	for _, p := range ports {
		if to := p.Peer.Node; hops[to] == nil {
			hops[to] = switchHops(to)
		}
	}
	var root *Node
	best := -1
	for _, sw := range switches {
		far := 0
		for _, h := range hops {
			d, ok := h[sw]
			if !ok {
				far = -1
				break
			}
			far = max(far, d+1)
		}
		if far >= 0 && (best < 0 || far < best) {
			root, best = sw, far
		}
	}
	if root == nil {
		return nil
	}
	t := map[*Node][]uint16{}
	branch(t, root, ports, 0, hops)
	return t
}

// branch routes members from sw, which was reached through its port up
// (0 at the root).
func branch(t map[*Node][]uint16, sw *Node, members []*Port, up int, hops map[*Node]map[*Node]int) {
	set := func(port int) {
		if t[sw] == nil {
			t[sw] = make([]uint16, (len(sw.Ports)+15)/16)
		}
		t[sw][port/16] |= 1 << (port % 16)
	}
	if up != 0 {
		set(up)
	}
	by := map[int][]*Port{}
	for _, m := range members {
		out := -1
		if leaf := m.Peer.Node; leaf == sw {
			out = m.Peer.Num
		} else {
			least := hops[leaf][sw]
			for _, p := range sw.Ports[1:] {
				if p != nil && p.Peer != nil && p.Peer.Node.Type == Switch {
					if d, ok := hops[leaf][p.Peer.Node]; ok && d+1 == least {
						out = p.Num
						break
					}
				}
			}
		}
		if out > 0 {
			by[out] = append(by[out], m)
		}
	}
	for out, ms := range by {
		set(out)
		if next := sw.Ports[out].Peer.Node; next.Type == Switch {
			branch(t, next, ms, sw.Ports[out].Peer.Num, hops)
		}
	}
}

// switchHops is the least number of hops from each switch that reaches
// to, over links between switches.
func switchHops(to *Node) map[*Node]int {
	d := map[*Node]int{to: 0}
	queue := []*Node{to}
	for len(queue) > 0 {
		at := queue[0]
		queue = queue[1:]
		for _, p := range at.Ports {
			if p != nil && p.Peer != nil && p.Peer.Node.Type == Switch {
				if _, ok := d[p.Peer.Node]; !ok {
					d[p.Peer.Node] = d[at] + 1
					queue = append(queue, p.Peer.Node)
				}
			}
		}
	}
	return d
}
