//go:build integration

package ibshim_test

// UCX, the communication library under Open MPI, Dask and RAPIDS, loads
// libibverbs with dlopen (out of the preload's global scope), links
// libmlx5, and probes rdma_cm: it finds the mock HCAs and moves tagged
// messages over their UD queue pairs with its own reliability on top.

import (
	"regexp"
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
		// ud_verbs opens; rc_verbs needs a shared receive queue, which
		// the mock refuses, and says so.
		if !regexp.MustCompile(`Transport: ud_verbs\n#\s+Device: `+hca+`:1\n`).MatchString(b) ||
			!strings.Contains(b, "ibv_create_srq() failed: Operation not supported") {
			t.Errorf("memory domain %s:\n%s\nwant ud_verbs on %[1]s:1, and rc_verbs failing at ibv_create_srq", hca, b)
		}
	}
	// No kernel rdma_cm: its device fails to open, as without rdma_ucm,
	// and UCX goes on without the connection manager.
	if !strings.Contains(out, "< failed to open connection manager rdmacm >") {
		t.Errorf("ucx_info -d does not say rdmacm failed to open:\n%s", out)
	}
}

func TestUCXPerftestMovesTaggedMessagesOverUD(t *testing.T) {
	testenv.Tool(t, "ucx_perftest")
	out := node(t, `export UCX_TLS=ud_verbs,self UCX_NET_DEVICES=mlx5_0:1
ucx_perftest -t tag_bw -n 500 -s 65536 -p 18620 > /tmp/server.out 2>&1 & srv=$!
sleep 1; ucx_perftest -t tag_bw -n 500 -s 65536 -p 18620 127.0.0.1; echo "client exit $?"
wait $srv; echo "server exit $?"; cat /tmp/server.out`)
	// "Final:   500   overhead...   bandwidth...   rate..."
	final := regexp.MustCompile(`(?m)^Final:\s+500\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+[\d.]+`)
	m := final.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "client exit 0") || !strings.Contains(out, "server exit 0") {
		t.Fatalf("ucx_perftest tag_bw over ud_verbs between two programs:\n%s", out)
	}
	if m[1] == "0.00" {
		t.Errorf("ucx_perftest: average bandwidth %s MB/s", m[1])
	}
}
