//go:build integration

package hostprep_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

// nfdPCIOptions is the PCI source configuration NVIDIA's GPU operator gives
// node-feature-discovery: network and display classes, labelled by vendor.
const nfdPCIOptions = `{"sources": {"pci": {"deviceClassWhitelist": ["02", "0200", "0207", "0300", "0302"], "deviceLabelFields": ["vendor"]}}}`

// node-feature-discovery's nfd-worker (static Go, v0.20.1) labels the mock
// node from its PCI source alone, with no feature file: the GPUs' vendor,
// and Mellanox where the board's system has ConnectX NICs, which its
// custom source's built-in rule also labels RDMA capable.
func TestNFDWorkerLabelsTheNodeFromThePCITree(t *testing.T) {
	needRoot(t)
	nfd := filepath.Join(testenv.CacheDir(), "bin", "nfd-worker")
	if _, err := os.Stat(nfd); err != nil {
		testenv.Missing(t, "%s (run make deps, or hack/fetch-nfd.sh %s)", nfd, testenv.CacheDir())
	}
	// It wants a cluster even when it publishes nothing: one that is never reached.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	must(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
`), 0o600))
	for _, board := range []string{"a100", "h100", "t4"} {
		t.Run(board, func(t *testing.T) {
			res, p := installNode(t, board, 0)
			env := append(cleanEnv(), "NODE_NAME=nfd-test")
			out := string(inNode(t, res, 2*time.Minute, env, nfd, "-oneshot", "-no-publish",
				"-feature-sources=pci", "-label-sources=pci,custom", "-kubeconfig", kubeconfig, "-options", nfdPCIOptions,
				"-v", "1")) // the labels are logged at verbosity 1
			_, labels, ok := strings.Cut(out, `"feature discovery completed" labels=<`)
			if !ok {
				t.Fatalf("nfd-worker printed no labels:\n%s", out)
			}
			labels, _, _ = strings.Cut(labels, ">")
			want := map[string]bool{"feature.node.kubernetes.io/pci-10de.present": true,
				"feature.node.kubernetes.io/pci-15b3.present": hasMellanox(p),
				"rdma.capable": hasMellanox(p)} // the custom source's, prefixed when published
			for l, present := range want {
				if got := strings.Contains(labels, l+`: "true"`); got != present {
					t.Errorf("%s present: %v, want %v; labels:%s", l, got, present, labels)
				}
			}
		})
	}
}

func hasMellanox(p *profile.Profile) bool {
	if p.PCIe == nil {
		return false
	}
	for _, n := range p.PCIe.NICs {
		if strings.EqualFold(n.Vendor, "0x15b3") {
			return true
		}
	}
	return false
}
