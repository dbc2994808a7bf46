package profile

import "testing"

// Every nvmock exec and hostprep install starts by loading a profile.
func BenchmarkBuiltin(b *testing.B) {
	for b.Loop() {
		p, err := Builtin("h100")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Node(); err != nil {
			b.Fatal(err)
		}
	}
}

// Parse is what a profile file gets: every field checked and located.
func BenchmarkParse(b *testing.B) {
	data, err := builtinFS.ReadFile("builtin/h100.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Parse("h100.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}
