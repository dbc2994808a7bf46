package hostprep_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/profile"
)

// FuzzProfile writes profile files: each is refused in lines that all name
// the file, or it renders a whole overlay. The node model is checked once,
// at parsing, so nothing that renders from an accepted profile may fail.
func FuzzProfile(f *testing.F) {
	for _, name := range profile.Builtins() {
		data, err := os.ReadFile(filepath.Join("..", "profile", "builtin", name+".yaml"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		f.Add([]byte("base: " + name + "\ngpus: 1\n"))
	}
	f.Add([]byte("base: a100\nboard:\n  modes:\n    mig:\n      layout: all-1g.5gb\n"))
	f.Add([]byte("base: h100\ninfiniband:\n  fabric:\n    nodes: 2\n"))
	f.Add([]byte("base: t4\ntopology:\n  busIds: [\"0000:3b:00.0\"]\ngpus: 1\n"))
	assets := testenv.FakeDriverAssets(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := profile.Parse("f.yaml", data)
		if err != nil {
			for _, l := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(l, "profile f.yaml") {
					t.Fatalf("error line does not name the file: %q", l)
				}
			}
			return
		}
		if err := live.FitMIGLayout(p); err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("MIG layout error of more than one line: %q", err)
			}
			return
		}
		if _, err := hostprep.Render(filepath.Join(memDir(t), "ov"), hostprep.Options{Profile: p, NodeName: "node-0", Assets: assets}); err != nil {
			t.Fatalf("an accepted profile does not render: %v", err)
		}
	})
}

// memDir is a temporary directory in memory where there is one: an
// overlay's ten thousand files take 2 to 3 s on this VM's ext4, 0.2 s on
// tmpfs.
func memDir(t *testing.T) string {
	d, err := os.MkdirTemp("/dev/shm", "nvmock-fuzz-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
