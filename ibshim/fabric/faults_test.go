package fabric_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/internal/testenv"
)

func TestParseFault(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want fabric.Fault
	}{
		{"mlx5_3=down", fabric.Fault{HCA: "mlx5_3", Down: true}},
		{"gpu-1/mlx5_0=symbol_error:12,link_downed:1", fabric.Fault{Node: "gpu-1", HCA: "mlx5_0",
			Counters: map[string]uint64{"symbol_error": 12, "link_downed": 1}}},
		{"mlx5_1=down,local_link_integrity_errors:15", fabric.Fault{HCA: "mlx5_1", Down: true,
			Counters: map[string]uint64{"local_link_integrity_errors": 15}}},
	} {
		got, err := fabric.ParseFault(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("%q reads back as %q", tc.in, got.String())
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"mlx5_3", "want [NODE/]HCA=down"},
		{"mlx5_3=", "want [NODE/]HCA=down"},
		{"../mlx5_0=down", `".." is not a node's host name`}, {"mlx5 0=down", `"mlx5 0" is not an HCA name`},
		{"mlx5_3=up", `"up" is neither down nor an error counter (symbol_error, `},
		{"mlx5_3=symbol_error", "symbol_error needs a count"},
		{"mlx5_3=symbol_error:-1", "symbol_error needs a count"},
		{"mlx5_3=link_downed:256", "link_downed counts to 255 at most"},
		{"mlx5_3=excessive_buffer_overrun_errors:16", "excessive_buffer_overrun_errors counts to 15 at most"},
	} {
		if _, err := fabric.ParseFault(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseFault(%q): %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

// A cable out takes the port out of the subnet: no peer at either end,
// no LID, no route to it; the other ports keep theirs.
func TestADownPortLeavesTheSubnet(t *testing.T) {
	n := testenv.Node(t, "h100", 8)
	f, err := fabric.Build(n, "node-a", 3)
	if err != nil {
		t.Fatal(err)
	}
	ca := f.Find("mlx5_3")
	p, leafPort, lid := ca.Ports[1], ca.Ports[1].Peer, ca.Ports[1].LID
	other := f.Find("mlx5_0").Ports[1]
	faults := []fabric.Fault{
		{HCA: "mlx5_3", Down: true},
		{HCA: "mlx5_0", Counters: map[string]uint64{"symbol_error": 7}},
		{Node: "node-b", HCA: "mlx5_4", Down: true}, // another node's: checked, not applied
	}
	if err := f.Apply(faults); err != nil {
		t.Fatal(err)
	}
	if !p.Down() || p.Peer != nil || leafPort.Peer != nil || p.LID != fabric.NoLID {
		t.Errorf("mlx5_3 after a cable out: down %v, peer %v, leaf port's peer %v, LID %d", p.Down(), p.Peer, leafPort.Peer, p.LID)
	}
	s := ca.Subnet
	if s.Port(lid) != nil {
		t.Errorf("LID %d still addresses a port", lid)
	}
	for _, nd := range s.Nodes {
		if nd.Type == fabric.Switch && nd.LFT[lid] != 0xff {
			t.Errorf("%s still routes LID %d out of port %d", nd.Desc, lid, nd.LFT[lid])
		}
	}
	if leaf := other.Peer.Node; leaf.LFT[other.LID] != uint8(other.Peer.Num) {
		t.Errorf("the route to mlx5_0 changed")
	}
	if other.Down() || other.Errors["symbol_error"] != 7 {
		t.Errorf("mlx5_0: down %v, errors %v; want up with symbol_error 7", other.Down(), other.Errors)
	}
	if f.Find("mlx5_4").Ports[1].Down() {
		t.Error("node-b's fault was applied to node-a")
	}
	for _, bad := range []fabric.Fault{{HCA: "mlx5_2", Down: true}, {Node: "node-a", HCA: "mlx5_99", Down: true}} {
		if err := f.Apply([]fabric.Fault{bad}); err == nil || !strings.Contains(err.Error(), "the node has no InfiniBand HCA "+bad.HCA) {
			t.Errorf("Apply(%s): %v, want it refused (mlx5_2 is Ethernet)", bad, err)
		}
	}
}

// Faults replace those before: a port that comes up is cabled again, with
// its LID and routes, and loses its error counts.
func TestApplyingFaultsAgainReplacesThem(t *testing.T) {
	f, err := fabric.Build(testenv.Node(t, "h100", 8), "node-a", 3)
	if err != nil {
		t.Fatal(err)
	}
	p := f.Find("mlx5_3").Ports[1]
	peer, lid := p.Peer, p.LID
	routes := map[*fabric.Node]uint8{}
	for _, nd := range p.Node.Subnet.Nodes {
		if nd.Type == fabric.Switch {
			routes[nd] = nd.LFT[lid]
		}
	}
	must := func(faults ...fabric.Fault) {
		t.Helper()
		if err := f.Apply(faults); err != nil {
			t.Fatal(err)
		}
	}
	must(fabric.Fault{HCA: "mlx5_3", Down: true, Counters: map[string]uint64{"link_downed": 1}})
	must(fabric.Fault{HCA: "mlx5_0", Counters: map[string]uint64{"symbol_error": 3}})
	if p.Down() || p.Peer != peer || peer.Peer != p || p.LID != lid || p.Node.Subnet.Port(lid) != p || p.Errors != nil {
		t.Errorf("mlx5_3 after its fault was replaced: down %v, LID %d, errors %v; want it cabled as built, LID %d", p.Down(), p.LID, p.Errors, lid)
	}
	for nd, out := range routes {
		if nd.LFT[lid] != out {
			t.Errorf("%s routes LID %d out of %d, want %d as before", nd.Desc, lid, nd.LFT[lid], out)
		}
	}
	if got := f.Find("mlx5_0").Ports[1].Errors["symbol_error"]; got != 3 {
		t.Errorf("mlx5_0 symbol_error %d, want 3", got)
	}
	must()
	if f.Find("mlx5_0").Ports[1].Errors != nil {
		t.Error("no faults left mlx5_0 its error counts")
	}
}

// A fault naming another node may be for another pool's board (the chart
// gives each node the fleet's list): only this node's are checked against
// its HCAs. Review: an a100 pool's faults failed every h100 node's install.
func TestAnotherNodesFaultIsCheckedOnItsNode(t *testing.T) {
	f, err := fabric.Build(testenv.Node(t, "h100", 8), "node-a", 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Apply([]fabric.Fault{{Node: "a100-node", HCA: "mlx5_99", Down: true}}); err != nil {
		t.Errorf("another node's fault on an HCA this board lacks: %v", err)
	}
	for _, ft := range []fabric.Fault{{HCA: "mlx5_99", Down: true}, {Node: "node-a", HCA: "mlx5_99", Down: true}} {
		if err := f.Apply([]fabric.Fault{ft}); err == nil {
			t.Errorf("%s on this node: no error", ft)
		}
	}
}
