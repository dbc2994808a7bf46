//go:build integration

package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/profile"
)

// gpus is how many GPUs the tests' snapshots have.
const gpus = 8

var sanitizerFlags = []string{"-fsanitize=address,undefined", "-fno-omit-frame-pointer"}

// testDir holds the C sources; Go rejects C files in a package without cgo,
// so they sit in a folder of their own.
func testDir() string { return filepath.Join(testenv.Root(), "libnvml", "test", "c") }

// gcc compiles with warnings as errors and fails the test with gcc's output.
func gcc(t *testing.T, args ...string) {
	t.Helper()
	args = append([]string{"-std=gnu11", "-g", "-Wall", "-Wextra", "-Werror"}, args...)
	cmd := exec.Command(testenv.Tool(t, "gcc"), args...)
	cmd.Dir = t.TempDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// run runs a program with a deadline and returns its combined output and
// exit code; a program still running at the deadline fails the test.
func run(t *testing.T, timeout time.Duration, env []string, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	cmd.WaitDelay = 5 * time.Second // do not wait for orphans holding the output pipe
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s ran for %v", filepath.Base(name), time.Since(start).Round(time.Millisecond))
	if ctx.Err() != nil {
		t.Fatalf("%s %s: still running after %v; output:\n%s", name, strings.Join(args, " "), timeout, out.String())
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("run %s: %v", name, err)
	}
	return out.String(), 0
}

// buildTorture compiles the torture driver against the library in libDir.
func buildTorture(t *testing.T, libDir string, extra ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "torture")
	args := append([]string{"-O1", "-I" + testenv.NVMLHeaderDir(t), "-I" + testDir()}, extra...)
	args = append(args, "-o", bin, filepath.Join(testDir(), "torture.c"), filepath.Join(testDir(), "torture_gen.c"),
		"-L"+libDir, "-l:libnvidia-ml.so.1")
	gcc(t, args...)
	return bin
}

var (
	tortureHeader  = regexp.MustCompile(`(?m)^torture: (\d+) functions, (\d+) modes`)
	tortureSummary = regexp.MustCompile(`(?m)^torture: (\d+) calls, (\d+) violations$`)
	tortureMode    = regexp.MustCompile(`(?m)^mode ([a-z-]+): (\d+) calls:`)
	tortureSkip    = regexp.MustCompile(`(?m)^skip: ([a-z-]+): `)
)

// checkTorture asserts a clean run: exit 0, no violations, and every mode
// made a call to every function it did not skip.
func checkTorture(t *testing.T, out string, code int) {
	t.Helper()
	if code != 0 {
		t.Fatalf("torture exited %d, want 0; output:\n%s", code, out)
	}
	h := tortureHeader.FindStringSubmatch(out)
	s := tortureSummary.FindStringSubmatch(out)
	if h == nil || s == nil {
		t.Fatalf("no header or summary line (\"torture: N calls, 0 violations\"); output:\n%s", out)
	}
	if s[2] != "0" {
		t.Fatalf("torture reports %s violations; output:\n%s", s[2], out)
	}
	functions, _ := strconv.Atoi(h[1])
	modes, _ := strconv.Atoi(h[2])
	skips := map[string]int{}
	for _, m := range tortureSkip.FindAllStringSubmatch(out, -1) {
		skips[m[1]]++
	}
	ran := tortureMode.FindAllStringSubmatch(out, -1)
	if len(ran) != modes {
		t.Errorf("%d mode lines, want %d; output:\n%s", len(ran), modes, out)
	}
	for _, m := range ran {
		if n, _ := strconv.Atoi(m[2]); n != functions-skips[m[1]] {
			t.Errorf("mode %s made %d calls, want %d (%d functions, %d skipped)",
				m[1], n, functions-skips[m[1]], functions, skips[m[1]])
		}
	}
	t.Log(s[0])
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "note: ") || strings.HasPrefix(line, "skip: ") {
			t.Log(line)
		}
	}
}

// tortureRuns are the environments the torture driver runs in: the
// handle table the library validates against differs between them.
var tortureRuns = []struct {
	name, profile string
	gpus          int // 0: the profile's; the driver needs at least 2
	env           []string
}{
	{"every function survives hostile arguments with all 8 GPUs visible", "a100", 0, nil},
	{"every function survives hostile arguments with GPUs 1, 3 and 6 of 8 visible", "a100", 0,
		[]string{"NVMOCK_VISIBLE_DEVICES=1,3,6"}},
	// Grace boards and PCIe boards reach other paths: fabric, C2C, module
	// power, T.Limit; retired pages and ECC counters.
	{"every function survives hostile arguments on a Grace board", "gb200", 0, nil},
	{"every function survives hostile arguments on a PCIe board", "t4", 2, nil},
}

func TestTorture(t *testing.T) {
	bin := buildTorture(t, testenv.LibDir(t))
	for _, tt := range tortureRuns {
		t.Run(tt.name, func(t *testing.T) {
			snap, _ := testenv.Snapshot(t, tt.profile, tt.gpus)
			out, code := run(t, 2*time.Minute, testenv.Env(t, snap, tt.env...), bin)
			checkTorture(t, out, code)
		})
	}
}

// makefileVar reads a simple `NAME := value` line from the Makefile, so the
// sanitizer build uses the library's real flags.
func makefileVar(t *testing.T, name string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + `\s*:?=\s*(.*)$`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("Makefile: no %s := line", name)
	}
	return strings.Fields(string(m[1]))
}

// buildSanitizedLib builds libnvidia-ml.so.1 from libnvml/*.c as the
// Makefile does, plus AddressSanitizer and UBSan, and returns its directory.
func buildSanitizedLib(t *testing.T) string {
	t.Helper()
	return buildLibWith(t, sanitizerFlags...)
}

// buildLibWith builds libnvidia-ml.so.1 from libnvml/*.c as the Makefile
// does, plus the given flags, and returns its directory.
func buildLibWith(t *testing.T, flags ...string) string {
	t.Helper()
	// The built-in default, compiled as `nvmock profile compile a100 --unseeded` does.
	p, err := profile.Builtin("a100")
	if err != nil {
		t.Fatal(err)
	}
	def, err := snapshot.Compile(p, snapshot.Options{Unseeded: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	defPath := filepath.Join(dir, "default.snapshot")
	if err := os.WriteFile(defPath, def, 0o644); err != nil {
		t.Fatal(err)
	}
	srcs, err := filepath.Glob(filepath.Join(testenv.Root(), "libnvml", "*.c"))
	if err != nil || len(srcs) == 0 {
		t.Fatalf("no libnvml/*.c under %s: %v", testenv.Root(), err)
	}
	args := append(makefileVar(t, "CFLAGS_LIB"), flags...)
	args = append(args, "-I"+testenv.NVMLHeaderDir(t), "-I"+filepath.Join(testenv.Root(), "libnvml"),
		fmt.Sprintf("-DNVMOCK_DEFAULT_SNAPSHOT=%q", defPath),
		"-shared", "-Wl,-soname,libnvidia-ml.so.1", "-Wl,-z,defs", "-Wl,--no-undefined",
		"-o", filepath.Join(dir, "libnvidia-ml.so.1"))
	args = append(args, srcs...)
	gcc(t, append(args, "-lpthread", "-ldl", "-lm")...)
	return dir
}

func TestTortureASan(t *testing.T) {
	libDir := buildSanitizedLib(t)
	bin := buildTorture(t, libDir, sanitizerFlags...)
	for _, tt := range tortureRuns {
		t.Run(tt.name, func(t *testing.T) {
			snap, _ := testenv.Snapshot(t, tt.profile, tt.gpus)
			env := func(leaks int) []string {
				return testenv.Env(t, snap, append([]string{
					"LD_LIBRARY_PATH=" + libDir, // later entries win over Env's
					fmt.Sprintf("ASAN_OPTIONS=detect_leaks=%d:halt_on_error=1", leaks),
					"UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1",
				}, tt.env...)...)
			}
			out, code := run(t, 5*time.Minute, env(1), bin)
			if strings.Contains(out, "LeakSanitizer has encountered a fatal error") {
				// LeakSanitizer needs ptrace; some sandboxes forbid it.
				t.Log("LeakSanitizer cannot run here (no ptrace); running again with detect_leaks=0")
				out, code = run(t, 5*time.Minute, env(0), bin)
			}
			for _, bad := range []string{"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"} {
				if strings.Contains(out, bad) {
					t.Fatalf("sanitizer report (%q); output:\n%s", bad, out)
				}
			}
			checkTorture(t, out, code)
		})
	}
}

// expected is what every GPU of a profile reports through the getters the
// fork tests call; memory is nvmlMemory_t v1, where used includes reserved.
type expected struct {
	Name        string `json:"name"`
	UUID        string `json:"uuid"`
	Total       uint64 `json:"total"`
	Used        uint64 `json:"used"`
	Free        uint64 `json:"free"`
	Temperature uint32 `json:"temperature"`
}

func expect(t *testing.T, p *profile.Profile) []expected {
	t.Helper()
	if p.Board.Thermal.GPU == nil {
		t.Fatalf("profile %s has no GPU temperature to check", p.Name)
	}
	m := p.Board.Memory
	used := uint64(m.Reserved + m.Used)
	var gs []expected
	for _, id := range snapshot.Identities(p, testenv.Seed) {
		gs = append(gs, expected{
			Name:        p.Board.ProductName,
			UUID:        id.UUID,
			Total:       uint64(m.Total),
			Used:        used,
			Free:        uint64(m.Total) - used,
			Temperature: *p.Board.Thermal.GPU,
		})
	}
	return gs
}

func TestForkC(t *testing.T) {
	const children, calls, timeoutS = 20, 1000000, 30
	bin := filepath.Join(t.TempDir(), "fork")
	gcc(t, "-O2", "-I"+testenv.NVMLHeaderDir(t), "-o", bin, filepath.Join(testDir(), "fork.c"), "-ldl", "-lpthread")
	snap, p := testenv.Snapshot(t, "a100", gpus)
	g := expect(t, p)[0]

	tests := []struct {
		name  string
		flags []string
		live  bool
	}{
		{"children of a threaded parent re-initialise and read every GPU", nil, false},
		{"children forked while a thread uses event sets can still use event sets", []string{"-events"}, false},
		// Faults that leave memory and temperature as they are, and XIDs
		// published all the while: readers in every child go through the
		// seqlock and the fault path while a writer is busy.
		{"with live state written all the while", []string{"-events"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.live {
				f := testenv.LiveState(t, snap, gpus, time.Time{})
				err := f.Update(func(s *live.State, now int64) error {
					if err := s.AddFault(1, live.Fault{Kind: live.FaultNvlinkDown}, now); err != nil {
						return err
					}
					return s.AddFault(2, live.Fault{Kind: live.FaultSBE, Count: 5, Trigger: live.TriggerProbability, Param: 1 << 31}, now)
				})
				if err != nil {
					t.Fatal(err)
				}
				stop := make(chan struct{})
				done := make(chan int)
				go func() {
					n := 0
					for {
						select {
						case <-stop:
							done <- n
							return
						case <-time.After(5 * time.Millisecond):
						}
						if err := f.Update(func(s *live.State, now int64) error { return s.XID(n%gpus, 13, now) }); err != nil {
							t.Error(err)
						}
						n++
					}
				}()
				defer func() { close(stop); t.Logf("%d XIDs published while the children ran", <-done) }()
			}
			args := append(append([]string{}, tt.flags...), strconv.Itoa(children), strconv.Itoa(calls), strconv.Itoa(gpus),
				strconv.FormatUint(g.Total, 10), strconv.FormatUint(g.Used, 10),
				strconv.FormatUint(uint64(g.Temperature), 10), strconv.Itoa(timeoutS))
			out, code := run(t, 2*timeoutS*time.Second, testenv.Env(t, snap), bin, args...)
			want := fmt.Sprintf("fork: %d children x %d calls ok", children, calls)
			if code != 0 || !strings.Contains(out, want) {
				t.Fatalf("fork %s: exit %d, want 0 and %q; output:\n%s", strings.Join(args, " "), code, want, out)
			}
			t.Log(strings.TrimSpace(out))
		})
	}
}

func TestForkPynvml(t *testing.T) {
	const workers, calls = 8, 20000
	pydir := filepath.Join(testenv.CacheDir(), "pynvml", "usr", "lib", "python3", "dist-packages")
	if _, err := os.Stat(filepath.Join(pydir, "pynvml.py")); err != nil {
		if _, err2 := os.Stat(filepath.Join(pydir, "pynvml", "__init__.py")); err2 != nil {
			testenv.Missing(t, "pynvml in %s (run make deps or hack/fetch-pynvml.sh)", pydir)
		}
	}
	// Debian's interpreter, not a pyenv one earlier on PATH: pynvml is Debian's.
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		testenv.Missing(t, "%s: %v", python, err)
	}
	for _, withLive := range []bool{false, true} {
		t.Run(map[bool]string{false: "static", true: "with live state"}[withLive], func(t *testing.T) {
			snap, p := testenv.Snapshot(t, "a100", gpus)
			if withLive {
				// Faults that leave the readings the script checks as they
				// are: the fault path runs in every worker.
				f := testenv.LiveState(t, snap, gpus, time.Time{})
				err := f.Update(func(s *live.State, now int64) error {
					if err := s.XID(1, 74, now); err != nil {
						return err
					}
					return s.AddFault(3, live.Fault{Kind: live.FaultSBE, Count: 7}, now)
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			cfg, err := json.Marshal(map[string]any{"workers": workers, "calls": calls, "timeout": 120, "gpus": expect(t, p)})
			if err != nil {
				t.Fatal(err)
			}
			env := testenv.Env(t, snap, "PYTHONPATH="+pydir, "PYTHONDONTWRITEBYTECODE=1", "PYTHONNOUSERSITE=1")
			out, code := run(t, 3*time.Minute, env, python, filepath.Join(testenv.Root(), "libnvml", "test", "testdata", "pynvml_fork.py"), string(cfg))
			want := fmt.Sprintf("x %d calls: %d calls, 0 problems", calls, workers*calls)
			if code != 0 || !strings.Contains(out, want) {
				t.Fatalf("pynvml_fork.py: exit %d, want 0 and %q; output:\n%s", code, want, out)
			}
			t.Log(strings.TrimSpace(out))
		})
	}
}
