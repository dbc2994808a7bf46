package nsexec

import (
	"slices"
	"testing"
)

func TestCommandEnvPutsTheOverlayFirstAndDropsRedirections(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{"PATH gets the overlay's bin in front",
			[]string{"HOME=/root", "PATH=/usr/bin:/bin"},
			[]string{"HOME=/root", "PATH=/ov/usr/bin:/usr/bin:/bin"}},
		{"variables pointing the library elsewhere go; visibility stays",
			[]string{"NVMOCK_SNAPSHOT=/x", "NVMOCK_DEV_ROOT=/y", "NVIDIA_VISIBLE_DEVICES=1", "PATH=/bin"},
			[]string{"NVIDIA_VISIBLE_DEVICES=1", "PATH=/ov/usr/bin:/bin"}},
		{"no PATH gets the usual one",
			[]string{"A=b"},
			[]string{"A=b", "PATH=/ov/usr/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CommandEnv(tc.in, "/ov/usr/bin"); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
