//go:build integration

package gonvml

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/profile"
)

const helperEnv = "NVMOCK_GONVML_HELPER"

// TestMain turns the test binary into the helper when re-executed by
// runHelper: in a process of its own, the library's stderr can be read.
func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "1":
		os.Exit(helperInit())
	case "events":
		os.Exit(helperEvents())
	case "read":
		os.Exit(helperRead())
	}
	os.Exit(m.Run())
}

// helperInit prints "init=<code>" and, on success, "uuid=<uuid>" per GPU.
func helperInit() int {
	lib := nvml.New(nvml.WithLibraryPath(filepath.Join(testenv.BuildDir(), "driver", "usr", "lib64", "libnvidia-ml.so.1")))
	ret := lib.Init()
	fmt.Printf("init=%d\n", int32(ret))
	if ret != nvml.SUCCESS {
		return 0
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		fmt.Fprintf(os.Stderr, "DeviceGetCount: %v\n", ret)
		return 1
	}
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			fmt.Fprintf(os.Stderr, "DeviceGetHandleByIndex(%d): %v\n", i, ret)
			return 1
		}
		u, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			fmt.Fprintf(os.Stderr, "GetUUID(%d): %v\n", i, ret)
			return 1
		}
		fmt.Printf("uuid=%s\n", u)
	}
	return 0
}

type helperResult struct {
	init   nvml.Return
	uuids  []string
	stderr string
}

// runHelper runs helperInit in a new process on snapshotPath, with a
// clean environment (testenv.Env) plus extra.
func runHelper(t *testing.T, snapshotPath string, extra ...string) helperResult {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = testenv.Env(t, snapshotPath, append([]string{helperEnv + "=1"}, extra...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("helper process failed (%v), so the library crashed or the helper broke:\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	} else if err != nil {
		t.Fatal(err)
	}
	r := helperResult{init: -1, stderr: stderr.String()}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "init="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("helper printed %q", line)
			}
			r.init = nvml.Return(n)
		} else if v, ok := strings.CutPrefix(line, "uuid="); ok {
			r.uuids = append(r.uuids, v)
		}
	}
	if r.init == -1 {
		t.Fatalf("helper printed no init= line:\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	return r
}

func TestIdentityDiffersBetweenNodes(t *testing.T) {
	p, err := profile.Builtin("a100")
	if err != nil {
		t.Fatal(err)
	}
	seeds := []string{"node-a", "node-b"}
	paths := make([]string, len(seeds))
	for k, seed := range seeds {
		data, err := snapshot.Compile(p, snapshot.Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		paths[k] = filepath.Join(t.TempDir(), seed+".snapshot")
		if err := os.WriteFile(paths[k], data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	inProcess := make([][]visibleGPU, len(seeds))
	for k, seed := range seeds {
		t.Run("seed "+seed+" gives its derived identities", func(t *testing.T) {
			cleanEnv(t, paths[k])
			lib := newLib(t)
			start(t, lib)
			inProcess[k] = visible(t, lib)
			for i, g := range inProcess[k] {
				if want := nodeGPU(p, seed, i); g != want {
					t.Errorf("GPU %d = %+v, want %+v", i, g, want)
				}
			}
		})
	}

	t.Run("two seeds give disjoint UUIDs and serials", func(t *testing.T) {
		owner := map[string]string{}
		for k, gpus := range inProcess {
			for i, g := range gpus {
				for _, id := range []string{g.UUID, g.Serial} {
					if prev, dup := owner[id]; dup {
						t.Errorf("%s of seed %s GPU %d is also %s", id, seeds[k], i, prev)
					}
					owner[id] = fmt.Sprintf("seed %s GPU %d", seeds[k], i)
				}
			}
		}
	})

	t.Run("one seed gives the same UUIDs in two processes", func(t *testing.T) {
		first := runHelper(t, paths[0])
		second := runHelper(t, paths[0])
		for _, r := range []helperResult{first, second} {
			checkRet(t, "helper Init", r.init, nvml.SUCCESS)
		}
		var want []string
		for _, g := range inProcess[0] {
			want = append(want, g.UUID)
		}
		if fmt.Sprint(first.uuids) != fmt.Sprint(second.uuids) || fmt.Sprint(first.uuids) != fmt.Sprint(want) {
			t.Errorf("UUIDs differ between processes:\n first  %v\n second %v\n in-process %v", first.uuids, second.uuids, want)
		}
	})
}

func TestBuiltinDefaultDerivesIdentityAtInit(t *testing.T) {
	libDir := testenv.LibDir(t)
	// <driver root>/usr/lib64 -> <driver root>/etc/nvmock/snapshot would replace the default.
	installed := filepath.Join(filepath.Dir(filepath.Dir(libDir)), "etc", "nvmock", "snapshot")
	if _, err := os.Stat(installed); err == nil {
		testenv.Missing(t, "%s exists, so the library loads it instead of its built-in default; remove it to run this test", installed)
	}
	p, err := profile.Builtin("a100")
	if err != nil {
		t.Fatal(err)
	}

	initDefault := func(t *testing.T, seed string) []visibleGPU {
		t.Helper()
		cleanEnv(t, "")
		if seed == "" {
			unsetenv(t, "NODE_NAME")
		} else {
			t.Setenv("NODE_NAME", seed)
		}
		lib := newLib(t)
		start(t, lib)
		v, ret := lib.SystemGetDriverVersion()
		check(t, "SystemGetDriverVersion", v, ret, p.Driver.Version)
		gpus := visible(t, lib)
		if len(gpus) != p.GPUs {
			t.Fatalf("the default shows %d GPUs, want %d", len(gpus), p.GPUs)
		}
		for i := range gpus {
			d, _ := lib.DeviceGetHandleByIndex(i)
			name, ret := d.GetName()
			check(t, fmt.Sprintf("GPU %d GetName", i), name, ret, p.Board.ProductName)
		}
		return gpus
	}

	byNode := map[string][]visibleGPU{}
	for _, seed := range []string{"node-a", "node-b"} {
		t.Run("NODE_NAME="+seed+" derives its identities", func(t *testing.T) {
			gpus := initDefault(t, seed)
			for i, g := range gpus {
				if want := nodeGPU(p, seed, i); g != want {
					t.Errorf("GPU %d = %+v, want %+v", i, g, want)
				}
			}
			byNode[seed] = gpus
		})
	}
	t.Run("node-a and node-b share no UUID", func(t *testing.T) {
		a := map[string]bool{}
		for _, g := range byNode["node-a"] {
			a[g.UUID] = true
		}
		for i, g := range byNode["node-b"] {
			if a[g.UUID] {
				t.Errorf("node-b GPU %d has node-a's UUID %s", i, g.UUID)
			}
		}
	})
	t.Run("without NODE_NAME the seed is the machine id", func(t *testing.T) {
		unsetenv(t, "NODE_NAME")
		seed, err := snapshot.NodeSeed()
		if err != nil {
			testenv.Missing(t, "no machine id here: %v", err)
		}
		for i, g := range initDefault(t, "") {
			if want := nodeGPU(p, seed, i); g != want {
				t.Errorf("GPU %d = %+v, want %+v", i, g, want)
			}
		}
	})
}

func TestCorruptSnapshotFailsInit(t *testing.T) {
	goodPath, _ := testenv.Snapshot(t, "a100", 0)
	good, err := os.ReadFile(goodPath)
	if err != nil {
		t.Fatal(err)
	}
	versionOff := -1
	for _, f := range snapshot.HeaderLayout {
		if f.Go == "Version" {
			versionOff = int(f.Offset)
		}
	}
	if versionOff < 0 {
		t.Fatal("snapshot.HeaderLayout has no Version field")
	}
	patched := func(edit func([]byte) []byte) func(t *testing.T, dir string) string {
		return func(t *testing.T, dir string) string {
			path := filepath.Join(dir, "snapshot")
			if err := os.WriteFile(path, edit(bytes.Clone(good)), 0o644); err != nil {
				t.Fatal(err)
			}
			return path
		}
	}

	cases := []struct {
		name    string
		make    func(t *testing.T, dir string) string
		problem string // in the stderr line
	}{
		{"a path that does not exist", func(t *testing.T, dir string) string { return filepath.Join(dir, "absent") }, "no such file"},
		{"an empty file", patched(func([]byte) []byte { return nil }), "empty"},
		{"a file with bad magic", patched(func(b []byte) []byte { copy(b, "NOTASNAP"); return b }), "magic"},
		{"a snapshot of another layout version", patched(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[versionOff:], snapshot.Version+1)
			return b
		}), "version"},
		{"a file truncated mid-device", patched(func(b []byte) []byte { return b[:snapshot.HeaderSize+snapshot.DeviceSize/2] }), "truncated"},
		{"a file cut inside the header", patched(func(b []byte) []byte { return b[:snapshot.HeaderSize/2] }), "truncated"},
		{"a file with bytes after its end", patched(func(b []byte) []byte { return append(b, 0) }), "padded"},
		{"a directory", func(t *testing.T, dir string) string { return dir }, "not a regular"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.make(t, t.TempDir())
			r := runHelper(t, path)
			checkRet(t, "Init", r.init, nvml.ERROR_UNKNOWN)
			if len(r.uuids) > 0 {
				t.Errorf("Init fell back to a snapshot with %d GPUs", len(r.uuids))
			}
			line, rest, _ := strings.Cut(r.stderr, "\n")
			if rest != "" || !strings.HasSuffix(r.stderr, "\n") {
				t.Errorf("stderr is not exactly one line:\n%s", r.stderr)
			}
			if !strings.Contains(line, path) || !strings.Contains(strings.ToLower(line), c.problem) {
				t.Errorf("stderr line %q does not name the file %s and the problem (%q)", line, path, c.problem)
			}
		})
	}
}
