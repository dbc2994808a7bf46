// Package testenv finds what integration tests need (the built library, the
// real nvidia-smi, compilers) and makes snapshots for them. A missing
// prerequisite fails the test under CI=true and skips it otherwise.
package testenv

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/profile"
)

// Missing stops a test whose prerequisite is absent: a failure in CI, a skip
// (with the reason) on a developer's machine.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("prerequisite missing (CI=true): "+format, args...)
	}
	t.Skipf("prerequisite missing: "+format, args...)
}

// Root is the repository root.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func dirFromEnv(env, def string) string {
	if d := os.Getenv(env); d != "" {
		return d
	}
	return filepath.Join(Root(), def)
}

// BuildDir is where `make build` puts its outputs ($NVMOCK_BUILD).
func BuildDir() string { return dirFromEnv("NVMOCK_BUILD", "build") }

// CacheDir holds downloads such as nvidia-smi ($NVMOCK_CACHE).
func CacheDir() string { return dirFromEnv("NVMOCK_CACHE", ".cache") }

// LibDir is the directory holding libnvidia-ml.so.1 (run `make build`).
func LibDir(t testing.TB) string {
	t.Helper()
	d := filepath.Join(BuildDir(), "driver", "usr", "lib64")
	if _, err := os.Stat(filepath.Join(d, "libnvidia-ml.so.1")); err != nil {
		Missing(t, "mock library %s/libnvidia-ml.so.1 (run make build)", d)
	}
	return d
}

// NvmockBin is the built nvmock (make cli).
func NvmockBin(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(BuildDir(), "bin", "nvmock")
	if _, err := os.Stat(bin); err != nil {
		Missing(t, "nvmock %s (run make cli)", bin)
	}
	return bin
}

// Lib is the path of the built libnvidia-ml.so.1.
func Lib(t testing.TB) string {
	t.Helper()
	return filepath.Join(LibDir(t), "libnvidia-ml.so.1")
}

// NvidiaSMI is the real nvidia-smi fetched from Debian (make deps).
func NvidiaSMI(t testing.TB) string {
	t.Helper()
	p := filepath.Join(CacheDir(), "bin", "nvidia-smi")
	if _, err := os.Stat(p); err != nil {
		Missing(t, "real nvidia-smi at %s (run make deps)", p)
	}
	return p
}

// SMIVersions are the nvidia-smi releases make deps fetches from Debian.
var SMIVersions = []string{"470.256.02", "535.261.03", "550.163.01", "555.58.02"}

// SMI is one real nvidia-smi release.
type SMI struct{ Version, Path string }

// NvidiaSMIs are every real nvidia-smi make deps fetched, oldest first:
// $NVMOCK_CACHE/smi/<version>/nvidia-smi. Each missing one counts as a
// missing prerequisite.
func NvidiaSMIs(t testing.TB) []SMI {
	t.Helper()
	var out []SMI
	for _, v := range SMIVersions {
		p := filepath.Join(CacheDir(), "smi", v, "nvidia-smi")
		if _, err := os.Stat(p); err != nil {
			Missing(t, "nvidia-smi %s at %s (run make deps)", v, p)
		}
		out = append(out, SMI{v, p})
	}
	return out
}

// Tool finds a program on PATH.
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "%s not on PATH", name)
	}
	return p
}

// NVMLHeaderDir is go-nvml's pkg/nvml ($NVML_H_DIR, set by the Makefile).
func NVMLHeaderDir(t testing.TB) string {
	t.Helper()
	d := os.Getenv("NVML_H_DIR")
	if d == "" {
		out, err := exec.Command("go", "mod", "download", "-json", "github.com/NVIDIA/go-nvml").Output()
		var m struct{ Dir string }
		if err != nil || json.Unmarshal(out, &m) != nil || m.Dir == "" {
			Missing(t, "go-nvml module dir: %v", err)
		}
		d = filepath.Join(m.Dir, "pkg", "nvml")
	}
	if _, err := os.Stat(filepath.Join(d, "nvml.h")); err != nil {
		Missing(t, "nvml.h in %s", d)
	}
	return d
}

// Seed is the node seed tests compile snapshots with.
const Seed = "test-node"

// Snapshot compiles a built-in profile with n GPUs (0: the profile's count)
// into a temporary file and returns its path.
func Snapshot(t testing.TB, name string, n int) (string, *profile.Profile) {
	t.Helper()
	p, err := profile.Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		p.GPUs = n
	}
	return SnapshotOf(t, p), p
}

// SnapshotOf compiles p into a temporary file and returns its path.
func SnapshotOf(t testing.TB, p *profile.Profile) string {
	t.Helper()
	data, err := snapshot.Compile(p, snapshot.Options{Seed: Seed})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "snapshot")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Env is a clean environment for a child that uses the mock: the library
// on LD_LIBRARY_PATH, the given snapshot, and no inherited visibility
// settings or dev root that would change what it sees.
func Env(t testing.TB, snapshotPath string, extra ...string) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := cut(kv); k {
		case "LD_LIBRARY_PATH", "NVMOCK_SNAPSHOT", "NVMOCK_STATE", "NVIDIA_VISIBLE_DEVICES", "NVMOCK_VISIBLE_DEVICES", "NVMOCK_DEV_ROOT", "NVMOCK_TRACE":
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "LD_LIBRARY_PATH="+LibDir(t), "NVMOCK_DEV_ROOT="+t.TempDir())
	if snapshotPath != "" {
		env = append(env, "NVMOCK_SNAPSHOT="+snapshotPath)
	}
	return append(env, extra...)
}

func cut(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

// FirstDiff shows the first line where got differs from want, for golden
// file failures.
func FirstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("first difference at line %d:\n  want %q\n  got  %q", i+1, wl, gl)
		}
	}
	return "(no line differs)"
}

// LiveState makes a fresh live state beside a snapshot from Snapshot, where
// the library finds it, for a node of gpus GPUs, and returns it mapped for
// writing with its clock frozen at frozen (a test's clock).
func LiveState(t testing.TB, snapshotPath string, gpus int, frozen time.Time) *live.File {
	t.Helper()
	path := filepath.Join(filepath.Dir(snapshotPath), "state")
	if err := live.Create(path, gpus, 7); err != nil {
		t.Fatal(err)
	}
	f, err := live.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if !frozen.IsZero() {
		err := f.Update(func(s *live.State, _ int64) error {
			s.Header.Frozen, s.Header.FrozenNS = 1, uint64(frozen.UnixNano())
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// Exports lists a shared object's defined dynamic symbols, sorted, as nm -D
// shows them: what a program can bind to.
func Exports(t testing.TB, so string) []string {
	t.Helper()
	out, err := exec.Command(Tool(t, "nm"), "-D", "--defined-only", so).Output()
	if err != nil {
		t.Fatalf("nm %s: %v", so, err)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		got = append(got, f[len(f)-1])
	}
	slices.Sort(got)
	return got
}
