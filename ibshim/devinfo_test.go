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
	var capture []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(l, "#") && l != "" {
			capture = append(capture, l)
		}
	}
	out := nodeOf(t, "a100", "ibv_devinfo -v -d mlx5_0")
	from, to := strings.Index(out, "\tmax_mr_size:"), strings.Index(out, "\tnum_comp_vectors:")
	if from < 0 || to < from {
		t.Fatalf("no device block in:\n%s", out)
	}
	// The block ends in "...131072Bytes\n\n": the blank line is
	// ibv_devinfo's, before num_comp_vectors, and not in the capture file.
	block, ok := strings.CutSuffix(out[from:to], "\n\n")
	if !ok {
		t.Fatalf("device block does not end in a blank line:\n%s", out[from:to])
	}
	got := strings.SplitAfter(block+"\n", "\n")
	got = got[:len(got)-1] // SplitAfter's empty tail
	for i := range max(len(got), len(capture)) {
		var g, r string
		if i < len(got) {
			g = got[i]
		}
		if i < len(capture) {
			r = capture[i]
		}
		if g != r {
			t.Fatalf("line %d: %q, real %q", i+1, g, r)
		}
	}
}
