//go:build e2e

package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/internal/testenv"
)

// fabricOf is the fabric the node's overlay was installed with, as its
// daemon serves it.
func (n *node) fabricOf(t *testing.T) *fabric.Fabric {
	t.Helper()
	ov, err := filepath.EvalSymlinks(filepath.Join(n.env["OVERLAY_ROOT"], "driver"))
	if err != nil {
		t.Fatal(err)
	}
	_, f, err := hostprep.LoadFabric(filepath.Dir(ov))
	if err != nil || f == nil {
		t.Fatalf("the e2e node's profile (%s) has no fabric: %v", n.env["PROFILE"], err)
	}
	return f
}

// A GPU container of an unmodified image with Debian's InfiniBand tools
// sees the node's HCAs (sysfs by the hook, /dev/infiniband, the verbs
// provider) and, through the plugin's fabric daemon, the whole fabric.
func TestRDMAContainerSeesTheHCAsAndTheFabric(t *testing.T) {
	n := theNode
	f := n.fabricOf(t)
	ca := f.Find("mlx5_0")
	var other *fabric.Node
	for _, nd := range ca.Subnet.Nodes {
		if nd.Type == fabric.CA && nd.Slot >= 0 && nd.Slot != f.Local { // a host, not an Aggregation Node
			other = nd
			break
		}
	}
	p := n.runPod(t, optedIn, nil)
	script := fmt.Sprintf(`ibstat -l | wc -l; echo --
ibstat mlx5_0 | grep -E 'Base lid|Node GUID'; echo --
ibv_devinfo -d mlx5_0 | grep -E 'node_guid|port_lid|fw_ver'; echo --
ibnetdiscover -C mlx5_0 | grep -c '^Ca'; echo --
ibping -C mlx5_0 -c 1 %d | grep -c '0%% packet loss'`, other.Ports[1].LID)
	r := n.run(t, p, ctr{image: "rdma", cmd: []string{"sh", "-c", script}})
	parts := strings.Split(r.out, "--\n")
	if r.code != 0 || len(parts) != 5 {
		t.Fatalf("exited %d:\n%s", r.code, r.out)
	}
	if got := strings.TrimSpace(parts[0]); got != strconv.Itoa(len(testNodeHCAs(t, n))) {
		t.Errorf("ibstat -l lists %s HCAs, want %d", got, len(testNodeHCAs(t, n)))
	}
	lid := strconv.Itoa(int(ca.Ports[1].LID))
	if want := fmt.Sprintf("Node GUID: 0x%016x", ca.GUID); !strings.Contains(parts[1], want) || !strings.Contains(parts[1], "Base lid: "+lid) {
		t.Errorf("ibstat mlx5_0:\n%s\nwant %q and base lid %s", parts[1], want, lid)
	}
	if !strings.Contains(parts[2], "port_lid:\t\t"+lid) || !strings.Contains(parts[2], ca.FWVersion) {
		t.Errorf("ibv_devinfo (the provider through RDMAV_DRIVERS):\n%s\nwant port_lid %s, fw %s", parts[2], lid, ca.FWVersion)
	}
	var cas int
	for _, nd := range ca.Subnet.Nodes {
		if nd.Type == fabric.CA {
			cas++
		}
	}
	if got := strings.TrimSpace(parts[3]); got != strconv.Itoa(cas) {
		t.Errorf("ibnetdiscover finds %s CAs, want the modelled fabric's %d", got, cas)
	}
	if got := strings.TrimSpace(parts[4]); got != "1" {
		t.Errorf("ibping to modelled node %s (LID %d) from a container: %s", f.Hosts[other.Slot], other.Ports[1].LID, r.out)
	}
}

// testNodeHCAs are the RDMA devices of the e2e node's profile.
func testNodeHCAs(t *testing.T, n *node) []string {
	var out []string
	for _, h := range n.nodeTree(t).IB.HCAs {
		out = append(out, h.Name)
	}
	return out
}

// ibping -S in one pod answers ibping from another: the daemon passes the
// vendor MADs between the two containers' agents.
func TestIbpingBetweenTwoContainers(t *testing.T) {
	n := theNode
	lid := n.fabricOf(t).Find("mlx5_0").Ports[1].LID
	server := n.runPod(t, optedIn, nil)
	n.start(t, server, ctr{image: "rdma", cmd: []string{"ibping", "-C", "mlx5_0", "-S"}})
	time.Sleep(300 * time.Millisecond) // its agent registers as it starts
	client := n.runPod(t, optedIn, nil)
	r := n.run(t, client, ctr{image: "rdma", cmd: []string{"sh", "-c", fmt.Sprintf("ibping -C mlx5_0 -c 2 %d", lid)}})
	if r.code != 0 || !strings.Contains(r.out, "2 received, 0% packet loss") {
		t.Errorf("ibping from one container to ibping -S in another (LID %d): exited %d\n%s", lid, r.code, r.out)
	}
}

// RC traffic between two containers through the plugin's fabric daemon:
// ibv_rc_pingpong checks the data it receives, and perftest (which links
// libmlx5 itself) and UCX write to the other container's memory.
func TestRDMATrafficBetweenTwoContainers(t *testing.T) {
	n := theNode
	const ucx = "export UCX_TLS=rc_verbs,ud_verbs:aux,self UCX_NET_DEVICES=mlx5_0:1; "
	for _, c := range []struct{ name, server, client, want string }{
		{"ibv_rc_pingpong", "ibv_rc_pingpong -d mlx5_0 -g 0 -c -n 100 -p 18610", "ibv_rc_pingpong -d mlx5_0 -g 0 -c -n 100 -p 18610 127.0.0.1", "819200 bytes in "},
		{"ib_write_bw", "ib_write_bw -d mlx5_0 -n 100 -p 18611", "ib_write_bw -d mlx5_0 -n 100 -p 18611 127.0.0.1", " 65536      100  "},
		// Completion channels: both ends sleep on one between messages.
		{"ibv_rc_pingpong -e", "ibv_rc_pingpong -e -d mlx5_0 -g 0 -c -n 100 -p 18612", "ibv_rc_pingpong -e -d mlx5_0 -g 0 -c -n 100 -p 18612 127.0.0.1", "819200 bytes in "},
		// UC: unanswered, each message checked.
		{"ibv_uc_pingpong", "ibv_uc_pingpong -d mlx5_0 -g 0 -c -n 100 -p 18614", "ibv_uc_pingpong -d mlx5_0 -g 0 -c -n 100 -p 18614 127.0.0.1", "819200 bytes in "},
		// XRC: each message names the SRQ it is for, through a target QP.
		{"ibv_xsrq_pingpong", "ibv_xsrq_pingpong -d mlx5_0 -n 50 -p 18615", "ibv_xsrq_pingpong -d mlx5_0 -n 50 -p 18615 127.0.0.1", "success\n"},
		// UCX dlopens libibverbs, out of the preloaded shim's scope.
		{"ucx_perftest", ucx + "ucx_perftest -t ucp_put_bw -n 100 -s 65536 -p 18613", ucx + "ucx_perftest -t ucp_put_bw -n 100 -s 65536 -p 18613 127.0.0.1", "Final:                   100 "},
	} {
		server := n.runPod(t, optedIn, nil)
		n.start(t, server, ctr{image: "rdma", cmd: []string{"sh", "-c", c.server}})
		client := n.runPod(t, optedIn, nil)
		r := n.run(t, client, ctr{image: "rdma", cmd: []string{"sh", "-c", "sleep 0.5; " + c.client}})
		if r.code != 0 || !strings.Contains(r.out, c.want) {
			t.Errorf("%s from one container to another: exited %d\n%s\nwant %q", c.name, r.code, r.out, c.want)
		}
	}
}

// A second mock node, nvmock exec on this host with a daemon of its own,
// joins the e2e node's fabric through the port the chart's plugin listens
// on (infiniband.peerPort), and pings ibping -S in a container there: the
// MADs cross two daemons over TCP, as between two real nodes.
func TestIbpingFromAnotherNodeReachesAContainer(t *testing.T) {
	n := theNode
	f := n.fabricOf(t)
	lid := f.Find("mlx5_0").Ports[1].LID
	slot := (f.Local + 1) % len(f.Hosts)
	server := n.runPod(t, optedIn, nil)
	n.start(t, server, ctr{image: "rdma", cmd: []string{"ibping", "-C", "mlx5_0", "-S"}})
	bin := filepath.Join(testenv.BuildDir(), "bin", "nvmock")
	// The daemons meet within a second of the exec'd one starting.
	script := fmt.Sprintf(`sleep 1.5; ibping -C mlx5_0 -c 2 %d; echo ==
ibnetdiscover -C mlx5_0 | grep -c '"%s mlx5_'`, lid, f.Hosts[f.Local])
	cmd := exec.Command(bin, "exec", "--profile", n.env["PROFILE"], "--assets", filepath.Join(testenv.BuildDir(), "driver"),
		"--ib-host", "e2e-peer", "--ib-slot", strconv.Itoa(slot), "--ib-peers", "127.0.0.1:4791", "--", "sh", "-c", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nvmock exec: %v\n%s", err, out)
	}
	parts := strings.Split(string(out), "==\n")
	if len(parts) != 2 {
		t.Fatalf("output:\n%s", out)
	}
	// Only the container can answer: a real node's port with no ibping -S
	// is silent (TestTwoNodesPassMADsBetweenTheirDaemons).
	if !strings.Contains(parts[0], "2 received, 0% packet loss") {
		t.Errorf("ibping from the exec'd node to ibping -S in a container of the e2e node (LID %d):\n%s\nwant 2 pongs", lid, parts[0])
	}
	// Each compute CA is named twice: its own line and its leaf's link to it.
	if got, want := strings.TrimSpace(parts[1]), strconv.Itoa(2*computeHCAs(t, n)); got != want {
		t.Errorf("ibnetdiscover on the exec'd node names the e2e node's HCAs after its host %q %s times, want %s", f.Hosts[f.Local], got, want)
	}
}

// The chart's infiniband.faults reach the containers of the node they
// name (hack/e2e-node.sh gives the e2e node two): a storage HCA with its
// cable out, and one with error counts, in sysfs and from the PMA.
func TestPortFaultsFromTheChartShowInContainers(t *testing.T) {
	n := theNode
	p := n.runPod(t, optedIn, nil)
	r := n.run(t, p, ctr{image: "rdma", cmd: []string{"sh", "-c", `ibstat mlx5_10 | grep -E 'State|Physical state|Base lid'; echo --
cat /sys/class/infiniband/mlx5_4/ports/1/counters/symbol_error; echo --
perfquery -C mlx5_4 | grep -E 'SymbolErrorCounter|LinkDownedCounter'`}})
	parts := strings.Split(r.out, "--\n")
	if r.code != 0 || len(parts) != 3 {
		t.Fatalf("exited %d:\n%s", r.code, r.out)
	}
	for _, want := range []string{"State: Down", "Physical state: Polling", "Base lid: 65535"} {
		if !strings.Contains(parts[0], want) {
			t.Errorf("ibstat mlx5_10 (infiniband.faults: down):\n%s\nwant %q", parts[0], want)
		}
	}
	if got := strings.TrimSpace(parts[1]); got != "5" {
		t.Errorf("sysfs symbol_error of mlx5_4: %q, want 5", got)
	}
	if !strings.Contains(parts[2], "SymbolErrorCounter:..............5") || !strings.Contains(parts[2], "LinkDownedCounter:...............1") {
		t.Errorf("perfquery mlx5_4:\n%s\nwant SymbolErrorCounter 5, LinkDownedCounter 1", parts[2])
	}
}

// A container's sysfs traffic counters are the chart's fabric daemon's
// PMA counters: they move with the MADs crossing the port.
func TestSysfsTrafficCountersMoveInContainers(t *testing.T) {
	n := theNode
	p := n.runPod(t, optedIn, nil)
	r := n.run(t, p, ctr{image: "rdma", cmd: []string{"sh", "-c", `c=/sys/class/infiniband/mlx5_1/ports/1/counters
before=$(cat $c/port_xmit_packets)
perfquery -C mlx5_1 >/dev/null
i=0; while [ $i -lt 100 ] && [ "$(cat $c/port_xmit_packets)" = "$before" ]; do sleep 0.05; i=$((i+1)); done
echo $before $(cat $c/port_xmit_packets)`}})
	f := strings.Fields(r.out)
	if r.code != 0 || len(f) != 2 || f[0] == f[1] {
		t.Errorf("port_xmit_packets of mlx5_1 before and after perfquery (exit %d): %q, want it moved", r.code, r.out)
	}
}

// nvmock ctl ib on the node reaches a container that is running: its
// sysfs (through the hook's live ports) and the fabric daemon (discovery
// from another HCA) follow a cable pulled and put back.
func TestCtlIBReachesARunningContainer(t *testing.T) {
	n := theNode
	var cas int
	for _, nd := range n.fabricOf(t).Find("mlx5_0").Subnet.Nodes {
		if nd.Type == fabric.CA {
			cas++
		}
	}
	p := n.runPod(t, optedIn, nil)
	id := n.start(t, p, ctr{image: "rdma", cmd: []string{"sh", "-c", `while true; do
echo "$(ibstat mlx5_1 | grep -m1 'State:') / $(ibnetdiscover -C mlx5_0 | grep -c '^Ca') CAs"; sleep 0.1; done`}})
	// A verbs program waiting on the HCA's async fd hears it too.
	watch := n.start(t, n.runPod(t, optedIn, nil), ctr{image: "rdma", cmd: []string{"stdbuf", "-oL", "ibv_asyncwatch", "-d", "mlx5_1"}})
	up, down := fmt.Sprintf("State: Active / %d CAs", cas), fmt.Sprintf("State: Down / %d CAs", cas-1)
	n.waitOutput(t, id, up)
	n.waitOutput(t, watch, "mlx5_1: async event FD")
	n.ctl(t, "ib", "down", "mlx5_1")
	defer n.ctl(t, "ib", "clear", "mlx5_1") // the chart's faults on mlx5_4 and mlx5_10 stay
	n.waitOutput(t, id, down)
	n.ctl(t, "ib", "up", "mlx5_1")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out := n.logs(t, id)
		if strings.Contains(out[strings.LastIndex(out, down):], up) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after ctl ib up mlx5_1 the container printed:\n%s\nwant %q again", out, up)
		}
	}
	n.waitOutput(t, watch, "  event_type IBV_EVENT_PORT_ERR (10), port 1\n  event_type IBV_EVENT_PORT_ACTIVE (9), port 1\n")
	if got := n.ctl(t, "ib"); !strings.Contains(got, "mlx5_1=link_downed:1") || !strings.Contains(got, "mlx5_10=down") {
		t.Errorf("ctl ib lists:\n%s\nwant mlx5_1's link_downed beside the chart's faults", got)
	}
}

// A pod that opts out of InfiniBand gets its GPUs and no HCAs; every
// image, static and musl too, runs its own commands under the preload.
func TestInfiniBandOptOutAndImagesThatCannotUseIt(t *testing.T) {
	n := theNode
	out := n.runPod(t, optedIn, map[string]string{"nvmock.io/infiniband": "false"})
	r := n.run(t, out, ctr{image: "glibc", cmd: []string{"sh", "-c", `ls /dev/infiniband 2>&1 | head -1; echo "preload=$LD_PRELOAD"; nvidia-smi -L | wc -l`}})
	if !strings.Contains(r.out, "No such file") || !strings.Contains(r.out, "preload=\n") || r.code != 0 {
		t.Errorf("opted-out pod: exited %d\n%s\nwant no /dev/infiniband and no preload", r.code, r.out)
	}
	p := n.runPod(t, optedIn, nil)
	for _, c := range []ctr{
		{image: "busybox", cmd: []string{"sh", "-c", "ls /dev/infiniband | head -1; echo $LD_PRELOAD"}},
		{image: "musl"}, {image: "static"},
	} {
		r := n.run(t, p, c)
		if r.code != 0 || strings.Contains(r.out, "ERROR: ld.so") {
			t.Errorf("%s image with the shim preloaded: exited %d\n%s", c.image, r.code, r.out)
		}
		if c.image == "busybox" && (!strings.Contains(r.out, "issm0") || !strings.Contains(r.out, "libnvmock-umad.so")) {
			t.Errorf("busybox (static) sees:\n%s\nwant /dev/infiniband and the preload set (and ignored)", r.out)
		}
	}
}

// computeHCAs counts the node's InfiniBand HCAs in the compute subnet.
func computeHCAs(t *testing.T, n *node) int {
	t.Helper()
	var c int
	for _, h := range n.nodeTree(t).IB.HCAs {
		if !h.Ethernet && !h.Storage {
			c++
		}
	}
	return c
}
