//go:build integration

package gen

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

// TestLibraryExportsExactlyTheGeneratedList compares the built library's
// dynamic symbols with exports_gen.txt: none missing (go-nvml programs die
// with exit 127 on a missing one), none extra.
func TestLibraryExportsExactlyTheGeneratedList(t *testing.T) {
	got := testenv.Exports(t, testenv.Lib(t))
	want, err := os.ReadFile("../exports_gen.txt")
	if err != nil {
		t.Fatal(err)
	}
	if g, w := strings.Join(got, "\n")+"\n", string(want); g != w {
		gs, ws := map[string]bool{}, map[string]bool{}
		for _, s := range got {
			gs[s] = true
		}
		for _, s := range strings.Fields(w) {
			ws[s] = true
			if !gs[s] {
				t.Errorf("missing export %s", s)
			}
		}
		for _, s := range got {
			if !ws[s] {
				t.Errorf("unexpected export %s", s)
			}
		}
	}
}

func TestLibraryIsSmallWithTheRealSonameAndLinkChain(t *testing.T) {
	dir := testenv.LibDir(t)
	real, err := filepath.EvalSymlinks(filepath.Join(dir, "libnvidia-ml.so"))
	if err != nil {
		t.Fatal(err)
	}
	// nvidia-ctk looks for libnvidia-ml.so.<the version NVML reports>.
	p, err := profile.Builtin("a100")
	if err != nil {
		t.Fatal(err)
	}
	if want := "libnvidia-ml.so." + p.Driver.Version; filepath.Base(real) != want {
		t.Errorf("libnvidia-ml.so resolves to %s, want %s (the default profile's driver)", real, want)
	}
	if l, _ := os.Readlink(filepath.Join(dir, "libnvidia-ml.so")); l != "libnvidia-ml.so.1" {
		t.Errorf("libnvidia-ml.so -> %q, want libnvidia-ml.so.1", l)
	}
	st, err := os.Stat(real)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > 2<<20 {
		t.Errorf("library is %d bytes; the limit is 2 MiB", st.Size())
	}
	out, err := exec.Command(testenv.Tool(t, "readelf"), "-d", real).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "Library soname: [libnvidia-ml.so.1]") {
		t.Errorf("SONAME is not libnvidia-ml.so.1:\n%s", out)
	}
	// No Go runtime and nothing beyond libc: safe in forked children.
	for _, bad := range []string{"libgo", "runtime", "libstdc++"} {
		if strings.Contains(string(out), bad) {
			t.Errorf("library depends on %s", bad)
		}
	}
}
