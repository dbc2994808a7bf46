//go:build integration

package ibshim_test

import (
	"os"
	"strings"
	"testing"
)

// The a100 node's ConnectX-6 shows a real one's device block of
// ibv_devinfo -v, line for line: the limits, and the extended attributes
// (ODP, clock, tag matching, CQ moderation, device memory).
func TestIbvDevinfoOfAConnectX6IsARealOnes(t *testing.T) {
	b, err := os.ReadFile("testdata/connectx6-ibv_devinfo-v.txt")
	if err != nil {
		t.Fatal(err)
	}
	var real []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(l, "#") && l != "" {
			real = append(real, l)
		}
	}
	out := nodeOf(t, "a100", "ibv_devinfo -v -d mlx5_0")
	from, to := strings.Index(out, "\tmax_mr_size:"), strings.Index(out, "\tnum_comp_vectors:")
	if from < 0 || to < from {
		t.Fatalf("no device block in:\n%s", out)
	}
	got := strings.SplitAfter(strings.TrimSuffix(out[from:to], "\n"), "\n")
	for i := range max(len(got), len(real)) {
		var g, r string
		if i < len(got) {
			g = got[i]
		}
		if i < len(real) {
			r = real[i]
		}
		if g != r {
			t.Fatalf("line %d: %q, real %q", i+1, g, r)
		}
	}
}
