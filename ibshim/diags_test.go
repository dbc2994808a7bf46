//go:build integration

package ibshim_test

// The fabric checks health-check scripts run (infiniband-diags'
// ibqueryerrors, ibtracert, dump_fts, check_lft_balance): they walk the
// whole modelled fabric, read every port's counters and follow and judge
// the switches' unicast and multicast tables.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/internal/testenv"
)

// hop is one line of ibtracert's path: out of port out into the node
// at lid, on its port in.
type hop struct{ out, in, lid int }

var hopLine = regexp.MustCompile(`(?m)^\[(\d+)\] -> (?:switch|ca)(?: port)? \{?0x[0-9a-f]+\}?\[(\d+)\] lid (\d+)`)

func hops(out string) []hop {
	var hs []hop
	for _, m := range hopLine.FindAllStringSubmatch(out, -1) {
		o, _ := strconv.Atoi(m[1])
		i, _ := strconv.Atoi(m[2])
		l, _ := strconv.Atoi(m[3])
		hs = append(hs, hop{o, i, l})
	}
	return hs
}

func TestHealthChecksFindFaultsAndFollowTheTables(t *testing.T) {
	bin := mcgroup(t)
	for _, tool := range []string{"ibqueryerrors", "ibtracert", "dump_fts", "check_lft_balance"} {
		testenv.Tool(t, tool)
	}
	f := model(t)
	s := f.Subnets[0]
	a, b := f.Find("mlx5_0").Ports[1], f.Find("mlx5_3").Ports[1]
	var far *fabric.Port // a modelled node's HCA on another rail
	for _, nd := range s.Nodes {
		if nd.Type == fabric.CA && nd.Slot >= 0 && nd.Slot != f.Local && nd.Ports[1].Peer.Node != a.Peer.Node {
			far = nd.Ports[1]
			break
		}
	}
	out := nodeOf(t, "h100", fmt.Sprintf(`ibqueryerrors -C mlx5_0; echo ==
ibtracert -C mlx5_0 %[2]d %[3]d; echo ==
%[1]s mlx5_0 > /dev/null && %[1]s mlx5_3 join | sed -n 's/joined mlid //p'; echo ==
m=$(saquery -C mlx5_0 -g | sed -n 's/.*Mlid\.*//p'); ibtracert -C mlx5_0 -m $m %[2]d %[4]d; echo ==
dump_fts -C mlx5_0 -M | grep -c '^0x'; echo ==
ibnetdiscover -C mlx5_0 --cache %[5]s/fabric.cache > /dev/null && dump_fts -C mlx5_0 > %[5]s/lfts
check_lft_balance -l %[5]s/lfts -i %[5]s/fabric.cache; echo ==
check_lft_balance -v -l %[5]s/lfts -i %[5]s/fabric.cache | grep -c 'Switch Port Usage' || true`, bin, a.LID, far.LID, b.LID, t.TempDir()),
		"--ib-fault", "mlx5_0=symbol_error:12,link_downed:1")
	parts := strings.Split(out, "==\n")
	if len(parts) != 7 {
		t.Fatalf("output:\n%s", out)
	}

	// Every node of the subnet is checked; only this node's mlx5_0 has
	// errors, the ones its fault gave it.
	want := fmt.Sprintf("GUID %#016x port 1: [SymbolErrorCounter == 12] [LinkDownedCounter == 1]", a.GUID)
	if !strings.Contains(parts[0], want) || !strings.Contains(parts[0], fmt.Sprintf("## Summary: %d nodes checked, 1 bad nodes found", len(s.Nodes))) ||
		!strings.Contains(parts[0], "1 ports have errors beyond threshold") {
		t.Errorf("ibqueryerrors:\n%s\nwant %d nodes checked and one port with errors: %q", parts[0], len(s.Nodes), want)
	}

	// The unicast path follows each switch's LFT to the modelled node.
	var path []hop
	for p := a; p.Node.Type == fabric.Switch || p == a; {
		out := p.Num
		if p.Node.Type == fabric.Switch {
			out = int(p.Node.LFT[far.LID])
		}
		next := p.Node.Ports[out].Peer
		path = append(path, hop{out, next.Num, int(next.Base().LID)})
		if next.Node.Type == fabric.CA {
			break
		}
		p = next
	}
	if got := hops(parts[1]); fmt.Sprint(got) != fmt.Sprint(path) {
		t.Errorf("ibtracert %d %d:\n%s\nwant the LFTs' path %v", a.LID, far.LID, parts[1], path)
	}

	// A group two ports of this node joined, on two leaves: the multicast
	// trace goes out of ports the switches' tables name for its MLID, from
	// one member to the other.
	mlid, err := strconv.ParseUint(strings.TrimSpace(parts[2]), 0, 16)
	if err != nil {
		t.Fatalf("mcgroup join: %q", parts[2])
	}
	tree := s.MulticastTree([]*fabric.Port{a, b})
	got := hops(parts[3])
	if len(got) < 2 || got[len(got)-1].lid != int(b.LID) {
		t.Fatalf("ibtracert -m %#x %d %d:\n%s\nwant a path to LID %d", mlid, a.LID, b.LID, parts[3], b.LID)
	}
	at := a.Peer.Node
	for _, h := range got[1:] {
		if mask := tree[at]; mask == nil || mask[h.out/16]&(1<<(h.out%16)) == 0 {
			t.Errorf("ibtracert -m:\n%s\nleaves %s by port %d, which its table for MLID %#x does not name", parts[3], at.Desc, h.out, mlid)
		}
		at = at.Ports[h.out].Peer.Node
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(parts[4])); n != len(tree) {
		t.Errorf("dump_fts -M lists %d MLID rows, want one on each of the %d switches of the group's tree", n, len(tree))
	}

	// check_lft_balance, which operators run on the LFTs: OpenSM's
	// min-hop engine spreads the hosts over parallel links and uplinks,
	// so no switch is reported unbalanced, and -v lists them all.
	var switches int
	for _, nd := range s.Nodes {
		if nd.Type == fabric.Switch {
			switches++
		}
	}
	if strings.TrimSpace(parts[5]) != "" || strings.TrimSpace(parts[6]) != strconv.Itoa(switches) {
		t.Errorf("check_lft_balance:\n%s\nwith -v, %s switches listed; want none unbalanced of %d", parts[5], strings.TrimSpace(parts[6]), switches)
	}
}

// On a DGX A100 (ConnectX-6, Quantum), infiniband-diags also reads
// Mellanox's extended port info, and ibportstate fails without it; the
// leaf's ports have it too.
func TestIbportstateReadsMellanoxExtendedPortInfo(t *testing.T) {
	testenv.Tool(t, "ibportstate")
	f := modelOf(t, "a100")
	ca := f.Find("mlx5_0").Ports[1]
	out := nodeOf(t, "a100", fmt.Sprintf(`ibportstate -C mlx5_0 %d 1; echo "exit $?"; echo ==
smpquery -C mlx5_0 mlnxextportinfo %d %d; echo "exit $?"`, ca.LID, ca.Peer.Node.Ports[0].LID, ca.Peer.Num))
	parts := strings.Split(out, "==\n")
	if len(parts) != 2 || !strings.Contains(parts[0], "exit 0") || strings.Count(parts[0], "# MLNX ext Port info:") != 1 ||
		!strings.Contains(parts[0], "LinkSpeedActive:.................0x00") {
		t.Errorf("ibportstate %d 1 on an a100 node:\n%s\nwant the port's Mellanox extended port info, no FDR10, exit 0", ca.LID, out)
	}
	if len(parts) == 2 && (!strings.Contains(parts[1], "exit 0") || !strings.Contains(parts[1], "StateChangeEnable:...............0x00")) {
		t.Errorf("smpquery mlnxextportinfo of the leaf's port %d:\n%s", ca.Peer.Num, parts[1])
	}
}
