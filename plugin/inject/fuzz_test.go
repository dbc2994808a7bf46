package inject

import (
	"slices"
	"strings"
	"testing"
)

// FuzzDecide feeds what a pod controls (its annotations and its
// environment) to the decision on an 8-GPU node with MIG devices: whatever
// it writes, the plugin answers without panicking, with an error of one
// line, and within the invariants every answer keeps.
func FuzzDecide(f *testing.F) {
	for _, s := range [][3]string{
		{"all", "", ""}, {"2", "", ""}, {"0,3", "", ""}, {"none", "void", ""},
		{"", "GPU-0", ""}, {"", "1:0,MIG-00000001-0000-5000-8000-000000000000", "/x.so"},
		{"", "0,0,0", ""}, {"-1", "all,none", ""}, {"9999999999999999999", "", ""},
		{"", "nvidia.com/gpu=all", ""}, {" 1 , 2 ", " ", ":"},
	} {
		f.Add(s[0], s[1], s[2], "")
	}
	f.Fuzz(func(t *testing.T, gpus, visible, preload, ib string) {
		node := migNode()
		node.InUse = []int{1, 0, 2, 0, 0, 1, 0, 0}
		p := pod("ml", GPUsAnnotation, gpus, InfiniBandAnnotation, ib)
		if gpus == "" {
			delete(p.Annotations, GPUsAnnotation)
		}
		c := ctr
		if visible != "" {
			c = withEnv(c, VisibleDevicesEnv+"="+visible)
		}
		if preload != "" {
			c = withEnv(c, "LD_PRELOAD="+preload)
		}
		a, ok, err := Decide(testConfig, node, p, c)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error of more than one line: %q", err)
			}
			return
		}
		checkInvariants(t, node, a, ok)
		for _, w := range a.Warnings {
			if strings.Contains(w, "\n") {
				t.Errorf("warning of more than one line: %q", w)
			}
		}
		seen := map[int]bool{}
		for _, g := range a.GPUs {
			if g < 0 || g >= len(node.GPUs) || seen[g] {
				t.Fatalf("GPUs %v: out of range or repeated", a.GPUs)
			}
			seen[g] = true
		}
		for _, k := range a.MIG {
			if k < 0 || k >= len(node.MIG) || !slices.Contains(a.GPUs, node.MIG[k].GPU) {
				t.Fatalf("MIG %v without its GPU in %v", a.MIG, a.GPUs)
			}
		}
	})
}
