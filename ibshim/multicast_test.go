//go:build integration

package ibshim_test

// UD multicast: programs join groups through the SA (MCMemberRecord over
// umad), attach QPs to the group's MLID, and the daemons copy each
// datagram to the QPs attached on ports that joined, on every node.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/internal/testenv"
)

// mcgroup builds testdata/mcgroup.c.
func mcgroup(t *testing.T) string {
	t.Helper()
	cc := testenv.Tool(t, "gcc")
	testenv.Tool(t, "saquery")
	bin := filepath.Join(t.TempDir(), "mcgroup")
	if out, err := exec.Command(cc, "-O1", "-Wall", "-Werror", "-o", bin, "testdata/mcgroup.c", "-libverbs", "-l:libibumad.so.3").CombinedOutput(); err != nil {
		testenv.Missing(t, "building testdata/mcgroup.c against libibverbs and libibumad (libibverbs-dev, libibumad3): %v\n%s", err, out)
	}
	return bin
}

func TestMulticastGroupsCarryDatagramsToThePortsThatJoined(t *testing.T) {
	bin := mcgroup(t)
	// Last, the port goes down (a MAD through another HCA has the daemon
	// see it at once) and comes back: out of its groups, as OpenSM drops a
	// port it no longer finds.
	out := node(t, fmt.Sprintf(`%s mlx5_0; echo "exit $?"; echo '== groups'; saquery -C mlx5_0 -g
echo '== members'; saquery -C mlx5_0 --smkey 1 -m; echo '== untrusted'; saquery -C mlx5_0 -m
%[2]s ctl ib down mlx5_0; saquery -C mlx5_1 -s > /dev/null; %[2]s ctl ib up mlx5_0
echo '== after a flap'; saquery -C mlx5_0 -g`, bin, builtNvmock(t)))
	for _, check := range []string{"sa-errors", "join", "attach-checks", "delivery", "loopback", "detach", "leave", "shared-mlid"} {
		if !strings.Contains(out, "ok "+check+"\n") {
			t.Fatalf("mcgroup did not pass %q:\n%s", check, out)
		}
	}
	m := regexp.MustCompile(`kept mlid 0x([0-9a-f]+)\nexit 0\n`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("mcgroup did not end joined to a group:\n%s", out)
	}
	mlid, _ := strconv.ParseUint(m[1], 16, 16)
	// The group the program left behind is the SA's: saquery lists it,
	// and, asked with OpenSM's SA key (trusted), this port as its full
	// member; the ones it left are gone. Untrusted, the IBA hides who.
	groups, members, _ := strings.Cut(strings.SplitN(out, "== groups\n", 2)[1], "== members\n")
	members, untrusted, _ := strings.Cut(members, "== untrusted\n")
	untrusted, flap, _ := strings.Cut(untrusted, "== after a flap\n")
	if strings.Contains(flap, "MGID") {
		t.Errorf("saquery -g after the port went down and up:\n%s\nwant no group: the port left them", flap)
	}
	wantGroup := fmt.Sprintf("MGID....................ff12:601b:ffff::4d43\n\t\tMlid....................0x%04X\n\t\tMtu.....................0x85\n\t\tpkey....................0xFFFF\n", mlid)
	if !strings.Contains(groups, wantGroup) || strings.Count(groups, "MGID") != 1 {
		t.Errorf("saquery -g:\n%s\nwant the one group left joined:\n%s", groups, wantGroup)
	}
	gid := regexp.MustCompile(`PortGid\.+(fe80:\S+)\n\t\tScopeState\.+0x21\n`).FindStringSubmatch(members)
	if gid == nil || !strings.Contains(members, "NodeDescription") || strings.Count(members, "MGID") != 1 {
		t.Errorf("saquery --smkey 1 -m:\n%s\nwant this port, a full member of a link-local group", members)
	}
	if !strings.Contains(untrusted, "PortGid.................::\n\t\tScopeState..............0x20\n") {
		t.Errorf("saquery -m (untrusted):\n%s\nwant the group with no port and no join state", untrusted)
	}
}

// perftest's multicast test between two nodes: each joins through its own
// daemon; the client's datagrams to the group cross to the server's node.
func TestPerftestMulticastBetweenTwoNodes(t *testing.T) {
	testenv.Tool(t, "ib_send_bw")
	out, serverOut := twoNodes(t, []string{"sh", "-c", `ib_send_bw -c UD -g -d mlx5_0 -n 200 -p 18530; echo "server exit $?"`},
		testenv.WaitListen+`waitlisten 18530; ib_send_bw -c UD -g -d mlx5_0 -n 200 -p 18530 127.0.0.1; echo "client exit $?"; sleep 0.5`)
	row := regexp.MustCompile(`(?m)^\s*4096\s+200\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s*$`)
	c, s := row.FindStringSubmatch(out), row.FindStringSubmatch(serverOut)
	if c == nil || s == nil || !strings.Contains(out, "client exit 0") || !strings.Contains(serverOut, "server exit 0") {
		t.Fatalf("ib_send_bw -c UD -g from node-b to node-a:\n%s\nnode-a:\n%s", out, serverOut)
	}
	if avg, _ := strconv.ParseFloat(s[1], 64); avg <= 0 {
		t.Errorf("ib_send_bw -c UD -g: node-a received at %s MB/s", s[1])
	}
}

// A group two nodes joined is one group of the subnet: the node that did
// not make it joins it as made (a join that could not make it), both SAs
// list both members, and the switches forward its MLID over the spanning
// tree OpenSM would build, which ibroute -M reads from every switch.
func TestAGroupJoinedOnTwoNodesIsRoutedByTheSwitches(t *testing.T) {
	bin := mcgroup(t)
	testenv.Tool(t, "ibroute")
	f, err := fabric.Build(testenv.Node(t, "h100", 8), "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Subnets[0]
	a, b := s.LocalCAs(0)["mlx5_0"].Ports[1], s.LocalCAs(1)["mlx5_3"].Ports[1]
	var lids []string
	for _, nd := range s.Nodes {
		if nd.Type == fabric.Switch {
			lids = append(lids, strconv.Itoa(int(nd.Ports[0].LID)))
		}
	}
	dir := t.TempDir()
	// node-a makes and keeps the group, then waits for node-b to be done.
	cmdA := []string{"sh", "-c", fmt.Sprintf(`%s mlx5_0 > %[2]s/a.out 2>&1; touch %[2]s/a.done
while [ ! -e %[2]s/b.done ]; do sleep 0.1; done`, bin, dir)}
	out, _ := twoNodes(t, cmdA, fmt.Sprintf(`for i in $(seq 200); do [ -e %[2]s/a.done ] && break; sleep 0.1; done
%[1]s mlx5_3 join; echo '== members'; saquery -C mlx5_3 --smkey 1 -m
for lid in %[3]s; do echo "== switch $lid"; ibroute -C mlx5_3 -M $lid; done; touch %[2]s/b.done`, bin, dir, strings.Join(lids, " ")))
	aOut, _ := os.ReadFile(filepath.Join(dir, "a.out"))
	m := regexp.MustCompile(`kept mlid 0x([0-9a-f]+)\n`).FindSubmatch(aOut)
	if m == nil || !strings.Contains(out, "joined mlid 0x"+string(m[1])+"\n") {
		t.Fatalf("node-a's mcgroup:\n%s\nnode-b:\n%s\nwant node-b to join the group node-a made, at its MLID", aOut, out)
	}
	mlid, _ := strconv.ParseUint(string(m[1]), 16, 16)
	sections := strings.Split(out, "== ")
	members := sections[1]
	for _, want := range []string{"NodeDescription.........node-a mlx5_0\n", "NodeDescription.........node-b mlx5_3\n"} {
		if !strings.Contains(members, want) || strings.Count(members, "MGID") != 2 {
			t.Errorf("saquery --smkey 1 -m on node-b:\n%s\nwant two members, among them %q", members, want)
		}
	}
	tree := s.MulticastTree([]*fabric.Port{a, b})
	// Independently of the tree's shape: each member's leaf sends the MLID
	// to the member's port (its slot + 1), and three switches carry it.
	if len(tree) != 3 || tree[a.Peer.Node][0]&(1<<1) == 0 || tree[b.Peer.Node][0]&(1<<2) == 0 {
		t.Fatalf("the model's tree: %v", tree)
	}
	row := regexp.MustCompile(fmt.Sprintf(`(?m)^0x%04x      (.*)$`, mlid))
	for _, sec := range sections[2:] {
		lid, table, _ := strings.Cut(strings.TrimPrefix(sec, "switch "), "\n")
		n, _ := strconv.Atoi(lid)
		sw := s.Port(uint16(n)).Node
		var got []int
		if r := row.FindStringSubmatch(table); r != nil {
			for i := 0; i < len(r[1]); i += 2 {
				if r[1][i] == 'x' {
					got = append(got, i/2)
				}
			}
		}
		var want []int
		for p := range sw.Ports {
			if mask := tree[sw]; mask != nil && mask[p/16]&(1<<(p%16)) != 0 {
				want = append(want, p)
			}
		}
		top := "0xbfff"
		if want != nil {
			top = fmt.Sprintf("0x%04x", 0xc000+(int(mlid)-0xc000)/32*32+31)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || !strings.Contains(table, "Multicast mlids [0xc000-"+top+"]") {
			t.Errorf("ibroute -M of %s (LID %d):\n%s\nwant MLID %#x out of ports %v, the table's top %s", sw.Desc, n, table, mlid, want, top)
		}
	}
}
