//go:build integration

package nsexec

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
)

// Files bound over the driver root's (the assets nvmock exec no longer
// copies) are what the command runs, where PATH finds them and at the
// driver's fixed place, and it cannot write them: a write would change the
// user's assets, not a copy of its run.
func TestBoundFilesAreWhatRunsAndCannotBeWritten(t *testing.T) {
	needRoot(t)
	smi, err := os.ReadFile(testenv.NvidiaSMI(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, userns := range []bool{false, true} {
		t.Run(fmt.Sprintf("user namespace %v", userns), func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "nvidia-smi")
			if err := os.WriteFile(src, smi, 0o755); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			o := Options{
				Args: []string{"sh", "-c", `nvidia-smi -L
for f in "$(command -v nvidia-smi)" ` + NamespaceDriver + `/usr/bin/nvidia-smi; do
	if echo x >> "$f"; then echo "wrote $f"; fi
done`},
				Env: cleanEnv(), Self: []string{"/proc/self/exe", childArg},
				Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
				TempDir: t.TempDir(), forceUserNS: userns,
			}
			status, err := RunRendered(func(dir string) (string, []Bind, error) {
				d := fixture(t, dir, "t4", 0)
				// An empty file where the asset shows, as hostprep leaves it.
				if err := os.WriteFile(filepath.Join(d, "usr", "bin", "nvidia-smi"), nil, 0o755); err != nil {
					return "", nil, err
				}
				return d, []Bind{{Src: src, Dst: "usr/bin/nvidia-smi"}}, nil
			}, o)
			if status != 0 || err != nil || !strings.Contains(out.String(), "GPU 0: Tesla T4") {
				t.Errorf("status %d (%v); want 0 and the T4 listed\nstdout %s\nstderr %s", status, err, out.String(), errb.String())
			}
			if strings.Contains(out.String(), "wrote") || strings.Count(errb.String(), "Read-only file system") != 2 {
				t.Errorf("the command could write the bound file, or failed otherwise:\nstdout %s\nstderr %s", out.String(), errb.String())
			}
			if b, err := os.ReadFile(src); err != nil || !bytes.Equal(b, smi) {
				t.Errorf("the bound file changed (%v)", err)
			}
		})
	}
}
