package pcisim

import (
	"path/filepath"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

func builtinNode(t testing.TB, name string, gpus int) *profile.Node {
	t.Helper()
	return testenv.Node(t, name, gpus)
}

func render(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "sys")
	if err := Render(builtinNode(t, name, 0), dir); err != nil {
		t.Fatal(err)
	}
	return dir
}
