package fabric_test

import (
	"strings"
	"testing"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

func TestH100FabricIsOneRailOptimizedScalableUnit(t *testing.T) {
	f, err := fabric.Build(testenv.Node(t, "h100", 8), "node-a", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Subnets) != 2 {
		t.Fatalf("%d subnets, want compute and storage", len(f.Subnets))
	}
	for _, tc := range []struct {
		subnet                   *fabric.Subnet
		name                     string
		spines, leaves, cas, lid int
	}{
		// Each switch's Aggregation Node takes a LID after the hosts'.
		{f.Subnets[0], "compute", 4, 8, 32 * 8, 2*(4+8) + 32*8},
		{f.Subnets[1], "storage", 1, 2, 32 * 2, 2*(1+2) + 32*2},
	} {
		s := tc.subnet
		var switches, cas int
		for _, nd := range s.Nodes {
			if nd.Type == fabric.Switch {
				switches++
			} else if nd.Slot >= 0 {
				cas++
			}
		}
		if s.Name != tc.name || switches != tc.spines+tc.leaves || cas != tc.cas || int(s.TopLID) != tc.lid {
			t.Errorf("%s: %d switches, %d CAs, top LID %d; want %s with %d, %d, %d", s.Name, switches, cas, s.TopLID, tc.name, tc.spines+tc.leaves, tc.cas, tc.lid)
		}
		if s.SM.Node != s.Nodes[0] || s.SM.LID != 1 {
			t.Errorf("%s: SM at %q LID %d, want the first spine at LID 1", s.Name, s.SM.Node.Desc, s.SM.LID)
		}
	}
	// Rail r of every node is on leaf r, at the node's slot + 1.
	for _, nd := range f.Subnets[0].Nodes {
		if nd.Type != fabric.CA || nd.Slot < 0 {
			continue
		}
		leaf := nd.Ports[1].Peer
		if leaf.Num != nd.Slot+1 {
			t.Errorf("%s is on leaf port %d, want %d", nd.Desc, leaf.Num, nd.Slot+1)
		}
	}
	if nd := f.Find("mlx5_0"); nd == nil || nd.Desc != "node-a mlx5_0" || nd.Slot != 3 {
		t.Errorf("local mlx5_0 = %+v, want node-a's at slot 3", nd)
	}
	if f.Find("mlx5_2") != nil {
		t.Error("mlx5_2, an Ethernet port, is in a subnet")
	}
}

func TestEveryNodeOfTheClusterBuildsTheSameFabric(t *testing.T) {
	n := testenv.Node(t, "h100", 8)
	a, err := fabric.Build(n, "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fabric.Build(n, "node-b", 5)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range a.Subnets {
		for j, nd := range s.Nodes {
			other := b.Subnets[i].Nodes[j]
			if nd.GUID != other.GUID || nd.Ports[len(nd.Ports)-1].LID != other.Ports[len(other.Ports)-1].LID {
				t.Fatalf("%s: node %d differs between two nodes' views: %#x vs %#x", s.Name, j, nd.GUID, other.GUID)
			}
		}
	}
	if a.Hosts[5] != "dgx06" || b.Hosts[5] != "node-b" || b.Hosts[0] != "dgx01" {
		t.Errorf("hosts %v / %v: a real node takes its slot's name, the others are modelled", a.Hosts[:6], b.Hosts[:6])
	}
}

// TestForwardingTablesReachEveryLID follows each switch's LFT hop by hop.
func TestForwardingTablesReachEveryLID(t *testing.T) {
	f, err := fabric.Build(testenv.Node(t, "a100", 8), "node-a", -1)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Subnets {
		for _, sw := range s.Nodes {
			if sw.Type != fabric.Switch {
				continue
			}
			for lid := uint16(1); lid <= s.TopLID; lid++ {
				at, hops := sw, 0
				for at.Type == fabric.Switch && at.LFT[lid] != 0 && hops < 8 {
					out := at.Ports[at.LFT[lid]]
					if out.Peer == nil {
						t.Fatalf("%s: LID %d leaves %s by uncabled port %d", s.Name, lid, at.Desc, out.Num)
					}
					at, hops = out.Peer.Node, hops+1
				}
				if dst := s.Port(lid).Node; at != dst {
					t.Fatalf("%s: from %s, LID %d ends at %s after %d hops, want %s", s.Name, sw.Desc, lid, at.Desc, hops, dst.Desc)
				}
			}
		}
	}
}

func TestDirectedRoutesWalkCables(t *testing.T) {
	f, err := fabric.Build(testenv.Node(t, "h100", 8), "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	from := f.Find("mlx5_0").Ports[1]
	for _, tc := range []struct {
		name string
		path []byte
		want string
	}{
		{"no hops is the port itself", []byte{0}, "node-a mlx5_0"},
		{"one hop is its leaf", []byte{0, 1}, "MF0;superpod-compute-leaf01:MQM9700/U1"},
		{"leaf port 2 is the next node's rail 0", []byte{0, 1, 2}, "dgx02 mlx5_0"},
		{"leaf port 33 goes up to the first spine", []byte{0, 1, 33}, "MF0;superpod-compute-spine01:MQM9700/U1"},
	} {
		at := fabric.Walk(from, tc.path)
		if at == nil || at.Node.Desc != tc.want {
			t.Errorf("%s: path %v reached %v, want %s", tc.name, tc.path, at, tc.want)
		}
	}
	for _, bad := range [][]byte{{0, 2}, {0, 1, 200}} {
		if at := fabric.Walk(from, bad); at != nil {
			t.Errorf("path %v reached %s, want nothing (no such port)", bad, at.Node.Desc)
		}
	}
}

// The two functions of a dual-port card (h100's storage slot 2: mlx5_1
// InfiniBand, mlx5_2 Ethernet) share the card's system image GUID, and
// port 2's node GUID is port 1's plus one, as ConnectX cards number them.
func TestACardsPortsShareItsSystemGUID(t *testing.T) {
	n := testenv.Node(t, "h100", 8)
	f, err := fabric.Build(n, "node-a", 2)
	if err != nil {
		t.Fatal(err)
	}
	hcas := n.IB.HCAs
	byName := map[string]*profile.HCA{}
	for i := range hcas {
		byName[hcas[i].Name] = &hcas[i]
	}
	p1, sys1 := fabric.CardGUIDs(f.Name, hcas, byName["mlx5_1"], 2)
	p2, sys2 := fabric.CardGUIDs(f.Name, hcas, byName["mlx5_2"], 2)
	if ca := f.Find("mlx5_1"); ca.GUID != p1 || ca.SysGUID != sys1 {
		t.Errorf("the fabric's mlx5_1 is %#x/%#x, CardGUIDs %#x/%#x", ca.GUID, ca.SysGUID, p1, sys1)
	}
	if p1 != sys1 || sys2 != sys1 || p2 != p1+1 {
		t.Errorf("mlx5_1 %#x (system %#x), mlx5_2 %#x (system %#x): want one system GUID, port 2 = port 1 + 1", p1, sys1, p2, sys2)
	}
}

// A Quantum switch (a100: 40 ports) and a Quantum-2 one (h100: 64) have
// their SHARP Aggregation Node on the port after their last: a CA with
// its switch's GUID plus 8, numbered after the hosts, so the hosts' LIDs
// are those of a fabric without them.
func TestQuantumSwitchesHaveAggregationNodes(t *testing.T) {
	for _, tc := range []struct {
		profile string
		port    int
	}{{"a100", 41}, {"h100", 65}} {
		t.Run(tc.profile, func(t *testing.T) { checkAggregationNodes(t, tc.profile, tc.port) })
	}
}

func checkAggregationNodes(t *testing.T, name string, port int) {
	f, err := fabric.Build(testenv.Node(t, name, 8), "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Subnets[0]
	var switches, ans int
	firstHost := uint16(0)
	for _, nd := range s.Nodes {
		switch {
		case nd.Type == fabric.Switch:
			switches++
			if len(nd.Ports) != port+1 {
				t.Errorf("%s has ports 0 to %d, want 0 to %d", nd.Desc, len(nd.Ports)-1, port)
				continue
			}
			an := nd.Ports[port].Peer
			if an == nil || an.Node.Desc != "Mellanox Technologies Aggregation Node" || an.Node.GUID != nd.GUID+8 || an.Node.DeviceID != 0xcf09 {
				t.Errorf("%s port %d: %+v, want its Aggregation Node", nd.Desc, port, an)
			}
		case nd.Slot < 0:
			ans++
			if nd.Ports[1].LID <= s.TopLID-uint16(switches) {
				t.Errorf("Aggregation Node %x has LID %d, before the hosts'", nd.GUID, nd.Ports[1].LID)
			}
		case firstHost == 0:
			firstHost = nd.Ports[1].LID
		}
	}
	if ans != switches || firstHost != uint16(switches)+1 {
		t.Errorf("%d Aggregation Nodes for %d switches; first host LID %d, want %d", ans, switches, firstHost, switches+1)
	}
	for lid := uint16(1); lid <= s.TopLID; lid++ {
		for _, nd := range s.Nodes {
			if nd.Type == fabric.Switch && nd.LFT[lid] == 0xff {
				t.Fatalf("%s has no route to LID %d", nd.Desc, lid)
			}
		}
	}
}

// A long host name is cut, as the kernel keeps 64 bytes of a node
// description: sysfs and an SMP show the same text.
func TestALongHostNameIsCutAt64Bytes(t *testing.T) {
	host := strings.Repeat("h", 80)
	f, err := fabric.Build(testenv.Node(t, "h100", 8), host, 0)
	if err != nil {
		t.Fatal(err)
	}
	var desc string
	for _, nd := range f.Subnets[0].Nodes {
		if nd.Slot == 0 && nd.HCA == "mlx5_0" {
			desc = nd.Desc
		}
	}
	if desc != host[:64] {
		t.Errorf("mlx5_0's description is %q (%d bytes), want the first 64 bytes of the host name", desc, len(desc))
	}
}

// A real node named as the fabric names a slot's node takes that slot, and
// one placed elsewhere swaps names with it: no two hosts share a name (QA:
// --ib-host dgx05 showed "dgx05 mlx5_0" twice in ibhosts).
func TestANodeNamedLikeAModelledOneIsNeverTwo(t *testing.T) {
	n := testenv.Node(t, "h100", 8)
	f, err := fabric.Build(n, "dgx05", -1)
	if err != nil {
		t.Fatal(err)
	}
	if f.Local != 4 {
		t.Errorf("dgx05 at slot %d, want its name's 4", f.Local)
	}
	f, err = fabric.Build(n, "dgx05", 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.Hosts[0] != "dgx05" || f.Hosts[4] != "dgx01" {
		t.Errorf("dgx05 placed at slot 0: hosts %v, want slot 4 named dgx01", f.Hosts[:6])
	}
	seen := map[string]bool{}
	for _, h := range f.Hosts {
		if seen[h] {
			t.Errorf("%s twice among %v", h, f.Hosts)
		}
		seen[h] = true
	}
}

// Both ends of a cable run at the slower end's speed: an HDR card on a
// leaf of NDR cards trains its link to HDR, and the switches run at the
// fastest card's speed (QA: the leaf port said NDR to an HDR card, and
// every switch took the first card's speed).
func TestALinkTrainsToItsSlowerEnd(t *testing.T) {
	n := testenv.Node(t, "h100", 8)
	var hdr *profile.HCA
	for i := range n.IB.HCAs {
		if h := &n.IB.HCAs[i]; !h.Storage && !h.Ethernet && h.Rail == 0 {
			a := *h.Adapter
			a.Speed = profile.SpeedHDR
			h.Adapter, hdr = &a, h
		}
	}
	f, err := fabric.Build(n, "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	card := f.Find(hdr.Name).Ports[1]
	leaf := card.Peer
	if card.ActiveSpeed() != profile.SpeedHDR || leaf.ActiveSpeed() != profile.SpeedHDR {
		t.Errorf("%s's link: %v at the card, %v at the leaf; want HDR at both", hdr.Name, card.ActiveSpeed(), leaf.ActiveSpeed())
	}
	if leaf.Speed != profile.SpeedNDR {
		t.Errorf("the leaf port runs at %v, want the fastest card's NDR", leaf.Speed)
	}
}
