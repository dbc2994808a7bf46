package profile

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ParseGPUs reads "all", "3", "0,3" or "0-3" against a node of n GPUs.
func ParseGPUs(s string, n int) ([]int, error) {
	if s == "all" {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, fmt.Errorf("GPU %q: not an index, list or range (all, 3, 0,3, 0-3)", part)
		}
		for i := a; i <= b; i++ {
			if i >= n {
				return nil, fmt.Errorf("GPU %d: the node has GPUs 0 to %d", i, n-1)
			}
			if slices.Contains(out, i) {
				return nil, fmt.Errorf("GPU %d is named twice in %q", i, s)
			}
			out = append(out, i)
		}
	}
	return out, nil
}
