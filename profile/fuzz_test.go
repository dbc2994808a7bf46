package profile

import (
	"strings"
	"testing"
)

// FuzzParse is FuzzProfile (hostprep) without the rendering, a hundred
// times faster: whatever a profile file holds, Parse refuses it in lines
// that all name the file, or resolves it into the node model.
func FuzzParse(f *testing.F) {
	for _, name := range Builtins() {
		data, err := builtinFS.ReadFile("builtin/" + name + ".yaml")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("base: a100\ngpus: 3\nboard:\n  modes:\n    mig:\n      layout: 0-1=all-1g.5gb;2=3g.20gb*2\n"))
	f.Add([]byte("base: h100\ninfiniband:\n  fabric:\n    nodes: 3\n    spines: 2\n"))
	f.Add([]byte("a: &x [1, 2]\nb: *x\nbase: t4\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("f.yaml", data)
		if err != nil {
			for _, l := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(l, "profile f.yaml") {
					t.Fatalf("error line does not name the file: %q", l)
				}
			}
			return
		}
		if _, err := p.Node(); err != nil {
			t.Fatalf("Parse accepted a profile Node refuses: %v", err)
		}
		if _, err := p.YAML(); err != nil {
			t.Fatalf("an accepted profile does not render as YAML: %v", err)
		}
	})
}
