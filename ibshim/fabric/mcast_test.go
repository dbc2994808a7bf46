package fabric_test

import (
	"fmt"
	"math/bits"
	"math/rand"
	"sort"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/internal/testenv"
)

// flood sends a packet from port from through the tables t, as switches
// forward multicast: out of every port its MLID's mask names but the one
// it came in on. It counts what each CA port receives.
func flood(t map[*fabric.Node][]uint16, from *fabric.Port) map[*fabric.Port]int {
	got := map[*fabric.Port]int{}
	queue := []*fabric.Port{from.Peer} // the ports packets arrive on
	for steps := 0; len(queue) > 0 && steps < 10000; steps++ {
		in := queue[0]
		queue = queue[1:]
		sw := in.Node
		mask := t[sw]
		for _, p := range sw.Ports[1:] {
			if p.Num == in.Num || mask == nil || mask[p.Num/16]&(1<<(p.Num%16)) == 0 || p.Peer == nil {
				continue
			}
			if p.Peer.Node.Type == fabric.Switch {
				queue = append(queue, p.Peer)
			} else {
				got[p.Peer]++
			}
		}
	}
	return got
}

func TestMulticastTreeReachesEveryMemberOnce(t *testing.T) {
	f, err := fabric.Build(testenv.Node(t, "h100", 8), "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Subnets[0]
	var cas []*fabric.Port
	for _, nd := range s.Nodes {
		if nd.Type == fabric.CA && nd.Slot >= 0 {
			cas = append(cas, nd.Ports[1])
		}
	}
	r := rand.New(rand.NewSource(1))
	for trial := range 200 {
		n := 2 + r.Intn(12)
		var members []*fabric.Port
		in := map[*fabric.Port]bool{}
		for _, i := range r.Perm(len(cas))[:n] {
			members = append(members, cas[i])
			in[cas[i]] = true
		}
		tree := s.MulticastTree(members)
		for _, from := range members {
			got := flood(tree, from)
			for p, k := range got {
				if !in[p] || p == from || k != 1 {
					t.Fatalf("trial %d: a packet from %s reaches %s %d times (member: %v)", trial, from.Node.Desc, p.Node.Desc, k, in[p])
				}
			}
			if len(got) != n-1 {
				t.Fatalf("trial %d: a packet from %s reaches %d of the other %d members", trial, from.Node.Desc, len(got), n-1)
			}
		}
	}
}

func TestMulticastTreeIsRootedAsOpenSMRootsIt(t *testing.T) {
	f, err := fabric.Build(testenv.Node(t, "h100", 8), "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Subnets[0]
	ca := func(slot int, hca string) *fabric.Port { return s.LocalCAs(slot)[hca].Ports[1] }
	// One rail: the leaf alone, its two ports.
	a, b := ca(0, "mlx5_0"), ca(5, "mlx5_0")
	tree := s.MulticastTree([]*fabric.Port{a, b})
	if len(tree) != 1 || tree[a.Peer.Node] == nil || tree[a.Peer.Node][0] != 1<<1|1<<6 {
		t.Errorf("two members on one leaf: %d switches, leaf mask %v; want the leaf alone, ports 1 and 6", len(tree), tree[a.Peer.Node])
	}
	// Fewer than two, or a member down: no tree.
	if got := s.MulticastTree([]*fabric.Port{a, a}); got != nil {
		t.Errorf("one member: %v, want no tree", got)
	}
	// Two rails: the spine first in OpenSM's switch table (GUIDs as
	// stored, read little-endian), one port down to each leaf (the
	// lowest), and each leaf up that link.
	c := ca(0, "mlx5_3")
	tree = s.MulticastTree([]*fabric.Port{a, c})
	var root *fabric.Node
	for _, nd := range s.Nodes {
		if nd.Type == fabric.Switch {
			isSpine := true
			for _, p := range nd.Ports[1:] {
				if p.Peer != nil && p.Peer.Node.Type == fabric.CA && p.Peer.Node.Slot >= 0 {
					isSpine = false
				}
			}
			if isSpine && (root == nil || bits.ReverseBytes64(nd.GUID) < bits.ReverseBytes64(root.GUID)) {
				root = nd
			}
		}
	}
	if root == nil || len(tree) != 3 || tree[root] == nil {
		t.Fatalf("members on two leaves: %d switches on the tree, the first spine there: %v; want it and two leaves", len(tree), root != nil && tree[root] != nil)
	}
	for _, m := range []*fabric.Port{a, c} {
		leaf := m.Peer.Node
		var down *fabric.Port
		for _, p := range root.Ports[1:] {
			if p.Peer != nil && p.Peer.Node == leaf {
				down = p
				break
			}
		}
		want := make([]uint16, len(tree[leaf]))
		for _, n := range []int{m.Peer.Num, down.Peer.Num} {
			want[n/16] |= 1 << (n % 16)
		}
		for i := range want {
			if tree[leaf][i] != want[i] {
				t.Errorf("%s's mask %v, want %v: its member's port %d and port %d up to the root", leaf.Desc, tree[leaf], want, m.Peer.Num, down.Peer.Num)
				break
			}
		}
		if tree[root][down.Num/16]&(1<<(down.Num%16)) == 0 {
			t.Errorf("the root does not send down port %d, its first to %s", down.Num, leaf.Desc)
		}
	}
	// A member whose link is down is no member of the tree.
	if err := f.Apply([]fabric.Fault{{HCA: "mlx5_0", Down: true}}); err != nil {
		t.Fatal(err)
	}
	if got := s.MulticastTree([]*fabric.Port{a, b}); got != nil {
		t.Errorf("two members, one down: %v, want no tree", got)
	}
	if got := s.MulticastTree([]*fabric.Port{a, b, c}); len(got) != 3 || got[b.Peer.Node][0]&(1<<1) != 0 {
		t.Errorf("three members on two leaves, one of them down: %d switches, leaf mask %v; want a spine and the two leaves, without port 1", len(got), got[b.Peer.Node])
	}
}

// OpenSM's switch table is a map keyed by the GUID in network order,
// which x86 reads little-endian: of the spines equally near, the root is
// the one whose GUID is least read that way, not the least GUID.
func TestMulticastTreeRootFollowsOpenSMsSwitchOrder(t *testing.T) {
	n := testenv.Node(t, "h100", 8)
	for i := range 100 {
		n.IB.Fabric.Name = fmt.Sprintf("pod%d", i)
		f, err := fabric.Build(n, "node-a", 0)
		if err != nil {
			t.Fatal(err)
		}
		s := f.Subnets[0]
		var least, first *fabric.Node
		for _, nd := range s.Nodes {
			if nd.Type != fabric.Switch || strings.Contains(nd.Desc, "-leaf") {
				continue
			}
			if least == nil || nd.GUID < least.GUID {
				least = nd
			}
			if first == nil || bits.ReverseBytes64(nd.GUID) < bits.ReverseBytes64(first.GUID) {
				first = nd
			}
		}
		if least == first {
			continue
		}
		a, c := s.LocalCAs(0)["mlx5_0"].Ports[1], s.LocalCAs(0)["mlx5_3"].Ports[1]
		tree := s.MulticastTree([]*fabric.Port{a, c})
		if tree[first] == nil || tree[least] != nil {
			t.Errorf("fabric %s: the tree's spine is not %s (GUID %#x) but another", n.IB.Fabric.Name, first.Desc, first.GUID)
		}
		return
	}
	t.Fatal("no fabric name of 100 puts the spines in different orders")
}

// The LFTs deliver every LID on a least-hop path from every switch, on
// every built-in fabric and under other fabric names (other GUIDs, so
// another order), and spread the CA destinations over each switch's ports
// towards other switches: at most two apart, as OpenSM's greedy choice
// leaves them (a spine's Aggregation Node can only go by that spine's
// links, which may all be at the most already).
func TestLFTsAreLeastHopAndBalanced(t *testing.T) {
	for _, prof := range []string{"h100", "a100", "b200", "gb200"} {
		n := testenv.Node(t, prof, 8)
		name := n.IB.Fabric.Name
		for i := range 20 {
			if i > 0 {
				n.IB.Fabric.Name = fmt.Sprintf("%s%d", name, i)
			}
			f, err := fabric.Build(n, "node-a", 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range f.Subnets {
				checkLFTs(t, prof+"/"+n.IB.Fabric.Name+"/"+s.Name, s)
			}
		}
	}
}

func checkLFTs(t *testing.T, what string, s *fabric.Subnet) {
	t.Helper()
	// Least hops between switches, by breadth-first search.
	dist := map[*fabric.Node]map[*fabric.Node]int{}
	for _, a := range s.Nodes {
		if a.Type != fabric.Switch {
			continue
		}
		d := map[*fabric.Node]int{a: 0}
		for q := []*fabric.Node{a}; len(q) > 0; q = q[1:] {
			for _, p := range q[0].Ports {
				if p != nil && p.Peer != nil && p.Peer.Node.Type == fabric.Switch {
					if _, ok := d[p.Peer.Node]; !ok {
						d[p.Peer.Node] = d[q[0]] + 1
						q = append(q, p.Peer.Node)
					}
				}
			}
		}
		dist[a] = d
	}
	for _, sw := range s.Nodes {
		if sw.Type != fabric.Switch {
			continue
		}
		count := map[int]int{}
		for lid := 1; lid <= int(s.TopLID); lid++ {
			dst := s.Port(uint16(lid))
			if dst == nil {
				continue
			}
			want := 0 // hops: to the destination's switch, and a CA's link
			if dst.Node.Type == fabric.CA {
				want = dist[dst.Peer.Node][sw] + 1
			} else {
				want = dist[dst.Node][sw]
			}
			at, hops := sw, 0
			for ; at != dst.Node && hops <= want; hops++ {
				out := int(at.LFT[lid])
				if out == 0 || out >= len(at.Ports) || at.Ports[out].Peer == nil {
					t.Fatalf("%s: %s routes LID %d out of port %d, which leads nowhere", what, at.Desc, lid, out)
				}
				if at == sw && dst.Node.Type == fabric.CA && at.Ports[out].Peer.Node.Type == fabric.Switch {
					count[out]++
				}
				at = at.Ports[out].Peer.Node
			}
			if at != dst.Node || hops != want {
				t.Fatalf("%s: from %s, LID %d takes %d hops, least is %d", what, sw.Desc, lid, hops, want)
			}
		}
		lo, hi := 1<<30, 0
		for _, p := range sw.Ports[1:] {
			if p.Peer != nil && p.Peer.Node.Type == fabric.Switch {
				lo, hi = min(lo, count[p.Num]), max(hi, count[p.Num])
			}
		}
		if hi > lo+2 {
			t.Errorf("%s: %s sends %d to %d CA destinations out of its switch ports; want at most two apart", what, sw.Desc, lo, hi)
		}
	}
}

// OpenSM routes in its port table's order: the first host, in that
// order, that hangs off another leaf goes out of a leaf's first uplink,
// where no route is yet.
func TestLFTsRouteInOpenSMsPortOrder(t *testing.T) {
	f, err := fabric.Build(testenv.Node(t, "h100", 8), "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Subnets[0]
	var cas []*fabric.Node
	for _, nd := range s.Nodes {
		if nd.Type == fabric.CA {
			cas = append(cas, nd)
		}
	}
	sort.Slice(cas, func(i, j int) bool {
		return bits.ReverseBytes64(cas[i].GUID) < bits.ReverseBytes64(cas[j].GUID)
	})
	checked := 0
	for _, leaf := range s.Nodes {
		if leaf.Type != fabric.Switch || !strings.Contains(leaf.Desc, "-leaf") {
			continue
		}
		var first *fabric.Node // the first CA routed through an uplink
		for _, ca := range cas {
			if ca.Ports[1].Peer.Node != leaf {
				first = ca
				break
			}
		}
		if first.Slot < 0 {
			continue // an Aggregation Node, which may be a spine's
		}
		up := len(leaf.Ports) - 1 // the first uplink: past the hosts' half
		for _, p := range leaf.Ports[1:] {
			if p.Peer != nil && p.Peer.Node.Type == fabric.Switch && p.Num < up {
				up = p.Num
			}
		}
		if got := int(leaf.LFT[first.Ports[1].LID]); got != up {
			t.Errorf("%s routes %s, the first host in OpenSM's order, out of port %d; want its first uplink, %d", leaf.Desc, first.Desc, got, up)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no leaf's first destination was a host")
	}
}
