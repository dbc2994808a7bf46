package hostprep

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
)

// glibc's own ldconfig reads the cache back: every soname with its path, in
// ldconfig's order.
func TestLoaderCacheIsReadByLdconfig(t *testing.T) {
	ldconfig := "/sbin/ldconfig"
	if _, err := os.Stat(ldconfig); err != nil {
		testenv.Missing(t, "glibc's ldconfig at /sbin/ldconfig")
	}
	f := filepath.Join(t.TempDir(), "ld.so.cache")
	libs := map[string]string{
		"libnvidia-ml.so.1":  "/usr/lib64/libnvidia-ml.so.1",
		"libnvidia-ml.so":    "/usr/lib64/libnvidia-ml.so",
		"libcuda.so.1":       "/usr/lib64/libcuda.so.1",
		"libnvidia-ml.so.10": "/usr/lib64/libnvidia-ml.so.10",
	}
	if err := os.WriteFile(f, LoaderCache(libs), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ldconfig, "-p", "-C", f).CombinedOutput()
	if err != nil {
		t.Fatalf("ldconfig -p -C: %v\n%s", err, out)
	}
	want := `4 libs found in cache ` + "`" + f + `'
	libnvidia-ml.so.10 (libc6,x86-64) => /usr/lib64/libnvidia-ml.so.10
	libnvidia-ml.so.1 (libc6,x86-64) => /usr/lib64/libnvidia-ml.so.1
	libnvidia-ml.so (libc6,x86-64) => /usr/lib64/libnvidia-ml.so
	libcuda.so.1 (libc6,x86-64) => /usr/lib64/libcuda.so.1
`
	if got := string(out); strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("ldconfig -p says:\n%s\nwant:\n%s", got, want)
	}
}
