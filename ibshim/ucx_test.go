//go:build integration

package ibshim_test

// UCX, the communication library under Open MPI, Dask and RAPIDS, loads
// libibverbs with dlopen (out of the preload's global scope), links
// libmlx5, and probes rdma_cm: it finds the mock HCAs and moves tagged
// messages over their RC queue pairs (on a shared receive queue) and over
// UD ones with its own reliability on top.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
)

func TestUCXListsTheMockHCAsTransports(t *testing.T) {
	testenv.Tool(t, "ucx_info")
	out := node(t, `ucx_info -d; echo "exit $?"`)
	if !strings.Contains(out, "exit 0") {
		t.Fatalf("ucx_info -d:\n%s", out)
	}
	// Each memory domain's block runs to the next.
	blocks := map[string]string{}
	for _, b := range strings.Split(out, "# Memory domain: ")[1:] {
		name, rest, _ := strings.Cut(b, "\n")
		blocks[name] = rest
	}
	for _, hca := range []string{"mlx5_0", "mlx5_3", "mlx5_6"} {
		b, ok := blocks[hca]
		if !ok {
			t.Errorf("ucx_info -d has no memory domain %s:\n%s", hca, out)
			continue
		}
		// Both verbs transports open (rc_verbs on a shared receive
		// queue); the mlx5 ones need mlx5's direct verbs, which a mock
		// HCA's provider has not.
		for _, tl := range []string{"rc_verbs", "ud_verbs"} {
			if !regexp.MustCompile(`Transport: ` + tl + `\n#\s+Device: ` + hca + `:1\n#\s+Type: network\n#\s+System device: ` + hca + ` \(\d+\)\n#\n#\s+capabilities:`).MatchString(b) {
				t.Errorf("memory domain %s:\n%s\nwant %s on %[1]s:1 with its capabilities", hca, b, tl)
			}
		}
	}
	// No kernel rdma_cm: its device fails to open, as without rdma_ucm,
	// and UCX goes on without the connection manager.
	if !strings.Contains(out, "< failed to open connection manager rdmacm >") {
		t.Errorf("ucx_info -d does not say rdmacm failed to open:\n%s", out)
	}
}

// ucx_perftest between two programs, over UD alone and over RC (with UD
// to set the connection up, as UCX's "rc" does).
func TestUCXPerftestMovesTaggedMessages(t *testing.T) {
	testenv.Tool(t, "ucx_perftest")
	for i, tls := range []string{"ud_verbs,self", "rc_verbs,ud_verbs:aux,self"} {
		// The client's output comes last, where a failure's report is
		// read first; the provider's trace says why a post failed.
		out := node(t, testenv.WaitListen+fmt.Sprintf(`export UCX_TLS=%s UCX_NET_DEVICES=mlx5_0:1 NVMOCK_TRACE=1
ucx_perftest -t tag_bw -n 500 -s 65536 -p %d > /tmp/server.out 2>&1 & srv=$!
waitlisten %[2]d; ucx_perftest -t tag_bw -n 500 -s 65536 -p %[2]d 127.0.0.1 > /tmp/client.out 2>&1; c=$?
wait $srv; s=$?; echo "== server:"; cat /tmp/server.out; echo "== client:"; cat /tmp/client.out
echo "server exit $s"; echo "client exit $c"`, tls, 18620+i))
		// "Final:   500   overhead...   bandwidth...   rate..."
		final := regexp.MustCompile(`(?m)^Final:\s+500\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+[\d.]+`)
		m := final.FindStringSubmatch(out)
		if m == nil || !strings.Contains(out, "client exit 0") || !strings.Contains(out, "server exit 0") {
			t.Errorf("ucx_perftest tag_bw with UCX_TLS=%s between two programs:\n%s", tls, out)
			continue
		}
		if m[1] == "0.00" {
			t.Errorf("ucx_perftest with UCX_TLS=%s: average bandwidth %s MB/s", tls, m[1])
		}
		// UCX makes its CQs with ibv_create_cq_ex and a channel, and
		// warns if the channel will not go after them.
		if strings.Contains(out, "ibv_destroy_comp_channel") {
			t.Errorf("ucx_perftest with UCX_TLS=%s could not destroy a completion channel:\n%s", tls, out)
		}
	}
}

// UCX's one-sided operations over rc_verbs are the HCA's: a put is RDMA
// writes and a get RDMA reads, as the provider counts them (NVMOCK_TRACE
// prints what a context sent when it closes). Its tagged rendezvous reads
// too.
func TestUCXOneSidedOperationsAreRDMA(t *testing.T) {
	testenv.Tool(t, "ucx_perftest")
	for i, c := range []struct{ test, kind string }{{"ucp_put_bw", "write"}, {"ucp_get", "read"}} {
		out := node(t, testenv.WaitListen+fmt.Sprintf(`export UCX_TLS=rc_verbs,ud_verbs:aux,self UCX_NET_DEVICES=mlx5_0:1
ucx_perftest -t %s -n 100 -s 65536 -p %d > /tmp/server.out 2>&1 & srv=$!
waitlisten %[2]d; NVMOCK_TRACE=1 ucx_perftest -t %[1]s -n 100 -s 65536 -p %[2]d 127.0.0.1 > /tmp/client.out 2>&1; c=$?
wait $srv; s=$?; echo "== server:"; cat /tmp/server.out; echo "== client:"; cat /tmp/client.out
echo "server exit $s"; echo "client exit $c"`, c.test, 18640+i))
		if !strings.Contains(out, "client exit 0") || !strings.Contains(out, "server exit 0") {
			t.Errorf("ucx_perftest -t %s between two programs:\n%s", c.test, out)
			continue
		}
		m := regexp.MustCompile(`nvmock-verbs: mlx5_0: messages sent/taken in:.* ` + c.kind + ` (\d+)/`).FindStringSubmatch(out)
		n := 0
		if m != nil {
			n, _ = strconv.Atoi(m[1])
		}
		if n < 100 { // one a message at least
			t.Errorf("ucx_perftest -t %s: the client did not send 100 or more RDMA %ss:\n%s", c.test, c.kind, out)
		}
	}
}

// Between two mock nodes, each with its own daemon, UCX connects over
// TCP and then moves tagged messages and RDMA writes through the daemons.
func TestUCXRunsBetweenTwoNodes(t *testing.T) {
	testenv.Tool(t, "ucx_perftest")
	env := "export UCX_TLS=rc_verbs,ud_verbs:aux,self UCX_NET_DEVICES=mlx5_0:1; "
	var server, client []string
	for i, test := range []string{"tag_bw", "ucp_put_bw"} {
		port := 18650 + i
		server = append(server, fmt.Sprintf("ucx_perftest -t %s -n 200 -s 65536 -p %d", test, port))
		client = append(client, fmt.Sprintf(`waitlisten %[2]d; echo '== %[1]s'; NVMOCK_TRACE=1 ucx_perftest -t %[1]s -n 200 -s 65536 -p %[2]d 127.0.0.1 2>&1; echo "exit $?"`, test, port))
	}
	out, serverOut := twoNodes(t, []string{"sh", "-c", env + strings.Join(server, " && ")},
		testenv.WaitListen+env+strings.Join(client, "\n"))
	final := regexp.MustCompile(`(?m)^Final:\s+200\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+[\d.]+`)
	parts := strings.Split(out, "== ")
	for i, kind := range []string{"send", "write"} {
		part := parts[i+1]
		m := final.FindStringSubmatch(part)
		if m == nil || !strings.Contains(part, "exit 0") || m[1] == "0.00" {
			t.Errorf("ucx_perftest from node-b to node-a:\n%s\nnode-a:\n%s", part, serverOut)
			continue
		}
		c := regexp.MustCompile(`messages sent/taken in:.* ` + kind + ` (\d+)/`).FindStringSubmatch(part)
		n := 0
		if c != nil {
			n, _ = strconv.Atoi(c[1])
		}
		if n < 200 {
			t.Errorf("node-b sent %d %s messages, want 200 or more:\n%s", n, kind, part)
		}
	}
}
