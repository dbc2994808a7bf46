package hostprep_test

import (
	"github.com/nvmock/nvmock/internal/testenv"

	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/profile"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const node = "hostprep-test-node"

// needRoot stops a test that creates device nodes when it cannot.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (CAP_MKNOD) to create device nodes")
	}
}

// realAssets is the built driver tree (make build, hack/package-driver.sh).
func realAssets(t testing.TB) string {
	t.Helper()
	d := filepath.Join(testenv.BuildDir(), "driver")
	if _, err := os.Stat(filepath.Join(d, "usr", "lib64", "libnvidia-ml.so.1")); err != nil {
		testenv.Missing(t, "mock library %s/usr/lib64/libnvidia-ml.so.1 (run make build)", d)
	}
	if _, err := os.Stat(filepath.Join(d, "usr", "bin", "nvidia-smi")); err != nil {
		testenv.Missing(t, "%s/usr/bin/nvidia-smi (run make build, or hack/package-driver.sh build .cache/bin/nvidia-smi)", d)
	}
	return d
}

// site is one place install writes to, in a test's temporary directory.
type site struct {
	root, cdi, nfd, proc string
}

func newSite(t *testing.T) site {
	d := t.TempDir()
	return site{
		root: filepath.Join(d, "var", "lib", "nvmock"),
		cdi:  filepath.Join(d, "run", "cdi"),
		nfd:  filepath.Join(d, "etc", "features.d"),
		proc: filepath.Join(d, "proc"),
	}
}

func (s site) options(p *profile.Profile, assets string) hostprep.InstallOptions {
	return hostprep.InstallOptions{
		Render:   hostprep.Options{Profile: p, NodeName: node, Assets: assets},
		Root:     s.root,
		CDIDir:   s.cdi,
		NFDDir:   s.nfd,
		ProcRoot: s.proc,
	}
}

func install(t *testing.T, o hostprep.InstallOptions) *hostprep.Result {
	t.Helper()
	res, err := hostprep.Install(o)
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	return res
}

// tree lists every path under the dirs with its mode, size and mtime.
func tree(t *testing.T, dirs ...string) map[string]string {
	t.Helper()
	return walk(t, true, dirs...)
}

// sameTree reports what changed between two trees, and what appeared
// (called so).
func sameTree(t *testing.T, before, after map[string]string, appeared string) {
	t.Helper()
	for p, v := range before {
		if after[p] != v {
			t.Errorf("%s: %s -> %s", p, v, after[p])
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s %s", p, appeared)
		}
	}
}

// contents is tree without directories' mtimes, which move when a temporary
// file comes and goes.
func contents(t *testing.T, dirs ...string) map[string]string {
	t.Helper()
	return walk(t, false, dirs...)
}

func walk(t *testing.T, dirTimes bool, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			if fi.IsDir() && !dirTimes {
				out[p] = fi.Mode().String()
				return nil
			}
			out[p] = fmt.Sprintf("%v size %d mtime %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		must(t, os.WriteFile(p, got, 0o644))
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test ./hostprep -update)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}
