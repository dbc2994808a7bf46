//go:build e2e

package e2e

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/ibshim/fabric"
)

// peer starts the second e2e node (hack/e2e-node.sh peer up: containerd
// and the chart's pod in a network namespace of their own, the fabric
// daemon peered with this node's) and takes it down at cleanup.
func (n *node) peer(t *testing.T) *node {
	t.Helper()
	n.script(t, "peer", "up")
	t.Cleanup(func() {
		if out, err := exec.Command(n.env["NODE_SCRIPT"], "peer", "down").CombinedOutput(); err != nil {
			t.Errorf("e2e-node.sh peer down: %v\n%s", err, out)
		}
	})
	p, err := connectDir(n.env["NVMOCK_E2E_DIR"] + "-b")
	if err != nil {
		t.Fatalf("the peer node: %v", err)
	}
	return p
}

// waitForPeer is a shell loop, for the rdma image, that waits up to 10 s for
// ibnetdiscover to name HCA hca after host: the daemons have met.
func waitForPeer(host, hca string) string {
	return fmt.Sprintf(`i=0; until ibnetdiscover -C mlx5_0 | grep -q '"%s %s"'; do
  i=$((i+1)); [ $i -lt 100 ] || { echo "no %s in discovery after 10 s"; exit 1; }; sleep 0.1
done
`, host, hca, host)
}

// Two real containerd nodes, each with the chart's pod and its fabric
// daemon, each in its own network: ibping from a container of one reaches
// ibping -S in a container of the other, both ways, and each node's
// discovery names the other's HCAs after it. The MADs cross the two
// daemons over TCP, as between two cluster nodes.
func TestIbpingBetweenContainersOnTwoNodes(t *testing.T) {
	a := theNode
	b := a.peer(t)
	fa, fb := a.fabricOf(t), b.fabricOf(t)
	if fa.Local == fb.Local || fa.Hosts[fa.Local] != a.env["NODE_NAME"] || fb.Hosts[fb.Local] != b.env["NODE_NAME"] {
		t.Fatalf("slots: %s at %d (%q), %s at %d (%q); want each at its own, named after it",
			a.env["NODE_NAME"], fa.Local, fa.Hosts[fa.Local], b.env["NODE_NAME"], fb.Local, fb.Hosts[fb.Local])
	}
	for _, tc := range []struct {
		name           string
		server, client *node
		serverFabric   *fabric.Fabric
	}{
		{"b pings a", a, b, fa},
		{"a pings b", b, a, fb},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := tc.server.env["NODE_NAME"]
			lid := tc.serverFabric.Find("mlx5_0").Ports[1].LID
			sp := tc.server.runPod(t, optedIn, nil)
			tc.server.start(t, sp, ctr{image: "rdma", cmd: []string{"ibping", "-C", "mlx5_0", "-S"}})
			cp := tc.client.runPod(t, optedIn, nil)
			script := waitForPeer(host, "mlx5_0") + fmt.Sprintf(`ibping -C mlx5_0 -c 2 %d; echo ==
ibnetdiscover -C mlx5_0 | grep -c '"%s mlx5_'`, lid, host)
			r := tc.client.run(t, cp, ctr{image: "rdma", cmd: []string{"sh", "-c", script}})
			parts := strings.Split(r.out, "==\n")
			if r.code != 0 || len(parts) != 2 {
				t.Fatalf("exited %d:\n%s", r.code, r.out)
			}
			if !strings.Contains(parts[0], "2 received, 0% packet loss") || !strings.Contains(parts[0], "Pong from") {
				t.Errorf("ibping from a container of %s to ibping -S in one of %s (LID %d):\n%s\nwant 2 pongs",
					tc.client.env["NODE_NAME"], host, lid, parts[0])
			}
			// Each compute CA is named twice: its own line and its leaf's link to it.
			if got, want := strings.TrimSpace(parts[1]), strconv.Itoa(2*computeHCAs(t, tc.server)); got != want {
				t.Errorf("%s's discovery names %s's HCAs after it %s times, want %s",
					tc.client.env["NODE_NAME"], host, got, want)
			}
		})
	}
}
