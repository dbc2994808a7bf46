//go:build integration

package hostprep_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

// The labels install applies (and writes for NFD) are the ones the real
// gpu-feature-discovery gives the same node, for every built-in board and
// for a name with characters a label cannot hold.
func TestInstalledLabelsAreTheOnesGFDGives(t *testing.T) {
	needRoot(t)
	gfd := nvidiaTool(t, "gpu-feature-discovery")
	hot, err := profile.Parse("hot.yaml", []byte("base: h100\nname: hot\ngpus: 2\nboard:\n  productName: \"NVIDIA H100 (hot) 80GB/HBM3, rev.2_b\"\n"))
	must(t, err)
	profiles := []*profile.Profile{hot}
	for _, name := range profile.Builtins() {
		profiles = append(profiles, testenv.Profile(t, name, 2))
	}
	for _, p := range profiles {
		t.Run(p.Name, func(t *testing.T) {
			res := install(t, newSite(t).options(p, realAssets(t)))
			out := filepath.Join(t.TempDir(), "labels")
			log := runTool(t, 2*time.Minute, toolEnv(res), gfd, "--oneshot", "--no-timestamp", "--output-file", out,
				"--machine-type-file", filepath.Join(t.TempDir(), "absent"))
			got := readLabels(t, out)
			for k, v := range hostprep.Labels(p) {
				if k == "nvidia.com/gpu.present" {
					continue // NFD's PCI source, not GFD, sets it on a real node
				}
				if got[k] != v {
					t.Errorf("%s=%q; gpu-feature-discovery gives %q", k, v, got[k])
				}
			}
			// The NFD file, read as NFD reads it, against GFD itself
			// (review: it was compared with the function that wrote it).
			nfd := readLabels(t, res.NFDFile)
			if len(nfd) != len(hostprep.Labels(p)) {
				t.Errorf("NFD file %s has %d labels, want %d", res.NFDFile, len(nfd), len(hostprep.Labels(p)))
			}
			for k, v := range nfd {
				if k != "nvidia.com/gpu.present" && got[k] != v {
					t.Errorf("NFD file %s: %s=%q; gpu-feature-discovery gives %q", res.NFDFile, k, v, got[k])
				}
			}
			if t.Failed() {
				t.Logf("gpu-feature-discovery said:\n%s", log)
			}
		})
	}
}
