package pcisim

import (
	"path/filepath"
	"strconv"
	"testing"
)

// The budget: rendering a board's tree takes at most 5 ms.
func BenchmarkFiles(b *testing.B) {
	n := builtinNode(b, "a100", 0)
	for b.Loop() {
		if _, err := Files(n); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRender(b *testing.B) {
	n := builtinNode(b, "a100", 0)
	dir := b.TempDir()
	i := 0
	for b.Loop() {
		if err := Render(n, filepath.Join(dir, strconv.Itoa(i))); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
