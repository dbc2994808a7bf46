//go:build integration

package ibshim_test

import (
	"os"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
)

// The a100 node's ConnectX-6 shows a real one's device block of
// ibv_devinfo -v, line for line: the limits, and the extended attributes
// (ODP, clock, tag matching, CQ moderation, device memory).
func TestIbvDevinfoOfAConnectX6IsARealOnes(t *testing.T) {
	b, err := os.ReadFile("testdata/connectx6-ibv_devinfo-v.txt")
	if err != nil {
		t.Fatal(err)
	}
	var capture strings.Builder
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(l, "#") {
			capture.WriteString(l)
		}
	}
	out := nodeOf(t, "a100", "ibv_devinfo -v -d mlx5_0")
	from, to := strings.Index(out, "\tmax_mr_size:"), strings.Index(out, "\tnum_comp_vectors:")
	if from < 0 || to < from {
		t.Fatalf("no device block in:\n%s", out)
	}
	// The block ends in "...131072Bytes\n\n": the blank line is
	// ibv_devinfo's, before num_comp_vectors, and not in the capture file.
	block, ok := strings.CutSuffix(out[from:to], "\n")
	if !ok || !strings.HasSuffix(block, "\n") {
		t.Fatalf("device block does not end in a blank line:\n%s", out[from:to])
	}
	if block != capture.String() {
		t.Errorf("ibv_devinfo -v differs from the real ConnectX-6's: %s", testenv.FirstDiff(capture.String(), block))
	}
}
