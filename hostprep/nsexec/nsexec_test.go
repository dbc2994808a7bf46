//go:build integration

package nsexec

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/pcisim"
	"github.com/nvmock/nvmock/profile"
)

const childArg = "__nsexec-child"

// The main goroutine starts on the process's main thread, for
// probeOnOtherThread.
func init() { runtime.LockOSThread() }

// TestMain doubles as the child Run re-executes, as nvmock's main does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == childArg {
		err := Child(os.Args[2:])
		fmt.Fprintln(os.Stderr, err)
		os.Exit(StatusSetup)
	}
	probeTID = probeOnOtherThread()
	if spec := os.Getenv(nobodyHelperEnv); spec != "" {
		execAsNobody(spec) // as it ran when it was a test
	}
	os.Exit(m.Run())
}

// probeTID is the thread onOtherThread ran a function on when called from
// the main thread, which it had just freed: the goroutine onOtherThread
// starts then lands there as soon as the caller waits.
var probeTID int

func probeOnOtherThread() int {
	runtime.UnlockOSThread()
	got := make(chan int)
	onOtherThread(func() { got <- unix.Gettid() })
	return <-got
}

// The thread that makes root's namespace is never the main one: the
// process's /proc/PID/ns/mnt would then be the command's, and
// endLeftovers and the guard would end exec with the command's leftovers.
func TestNamespaceThreadIsNotTheMainThread(t *testing.T) {
	if probeTID == 0 || probeTID == os.Getpid() {
		t.Fatalf("onOtherThread ran on thread %d; the main thread is %d", probeTID, os.Getpid())
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (to create mount namespaces and device nodes)")
	}
}

// fixture renders a minimal overlay the way hostprep does: the built
// library, the real nvidia-smi, a compiled snapshot, inert device nodes
// and /proc/driver/nvidia. It returns the driver root.
func fixture(t testing.TB, dir, name string, gpus int) string {
	t.Helper()
	lib, smi := testenv.LibDir(t), testenv.NvidiaSMI(t)
	p, err := profile.Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	if gpus > 0 {
		p.GPUs = gpus
	}
	data, err := snapshot.Compile(p, snapshot.Options{Seed: testenv.Seed})
	if err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(dir, "driver")
	for _, sub := range []string{"usr/lib64", "usr/bin", "etc/nvmock", "dev", "proc/driver/nvidia/gpus"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(lib)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "libnvidia-ml.so") {
			continue
		}
		src, dst := filepath.Join(lib, e.Name()), filepath.Join(d, "usr/lib64", e.Name())
		if target, err := os.Readlink(src); err == nil {
			err = os.Symlink(target, dst)
		} else {
			err = copyFile(src, dst, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := copyFile(smi, filepath.Join(d, "usr/bin/nvidia-smi"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "etc/nvmock/snapshot"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	nodes := []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}
	for i := 0; i < p.GPUs; i++ {
		nodes = append(nodes, fmt.Sprintf("nvidia%d", i))
	}
	for _, n := range nodes {
		if err := syscall.Mknod(filepath.Join(d, "dev", n), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Fatalf("mknod: %v", err)
		}
	}
	proc := filepath.Join(d, "proc/driver/nvidia")
	if err := os.WriteFile(filepath.Join(proc, "version"), []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  fixture\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	for _, id := range snapshot.Identities(p, testenv.Seed) {
		g := filepath.Join(proc, "gpus", strings.ToLower(id.BusID[4:]))
		if err := os.MkdirAll(g, 0o555); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(g, "information"), []byte("GPU UUID: \t "+id.UUID+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	// The PCI tree beside the driver root, where hostprep renders it.
	node, err := p.Node()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sysfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := pcisim.Render(node, filepath.Join(dir, "sysfs", "sys")); err != nil {
		t.Fatal(err)
	}
	return d
}

func copyFile(src, dst string, mode os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, mode)
}

// cleanEnv is this process's environment without anything that would let
// the library be found or configured other than as on a real node.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "LD_LIBRARY_PATH", "LD_PRELOAD", "NVMOCK_SNAPSHOT", "NVMOCK_DEV_ROOT", "NVIDIA_VISIBLE_DEVICES", "NVMOCK_VISIBLE_DEVICES":
			continue
		}
		env = append(env, kv)
	}
	return env
}

type result struct {
	status         int
	err            error
	stdout, stderr string
	tmpLeft        []string
}

// run renders the fixture in a private temp dir under a test directory and
// runs args through RunRendered, as nvmock exec does.
func run(t *testing.T, name string, gpus int, userns bool, args ...string) result {
	t.Helper()
	return runIn(t, t.TempDir(), name, gpus, userns, args...)
}

// runIn is run with the temporary directory tmp.
func runIn(t *testing.T, tmp, name string, gpus int, userns bool, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	o := Options{
		Args: args, Env: cleanEnv(), Self: []string{"/proc/self/exe", childArg},
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
		TempDir: tmp, forceUserNS: userns,
	}
	status, err := RunRendered(func(dir string) (string, []Bind, error) { return fixture(t, dir, name, gpus), nil, nil }, o)
	left, _ := filepath.Glob(filepath.Join(tmp, "*"))
	return result{status, err, out.String(), errb.String(), left}
}

// hostState is what the host shows of everything the namespace covers.
func hostState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	cache, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "ld.so.cache %x\n", sha256.Sum256(cache))
	for _, d := range []string{"/dev", "/proc/driver"} {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			fmt.Fprintf(&b, "%s/%s\n", d, e.Name())
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	// Other packages' tests run at the same time and may mount inside
	// their own temporary directories; those are not the host changing.
	tests := filepath.Join(os.TempDir(), "Test")
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], tests) {
			continue
		}
		fmt.Fprintln(&b, line)
	}
	return b.String()
}

func TestCommandsSeeTheMockWhereARealNodeHasIt(t *testing.T) {
	needRoot(t)
	python := testenv.Tool(t, "python3")
	dlopen := `import ctypes
l = ctypes.CDLL("libnvidia-ml.so.1")
n = ctypes.c_uint()
print(l.nvmlInit_v2(), l.nvmlDeviceGetCount_v2(ctypes.byref(n)), n.value)`
	tests := []struct {
		name    string
		profile string
		gpus    int
		userns  bool
		args    []string
		want    []string // lines of stdout that must appear
		lines   int      // if non-zero, the number of stdout lines
	}{
		{"nvidia-smi -L lists the h100 profile's eight GPUs", "h100", 0, false,
			[]string{"nvidia-smi", "-L"}, []string{"GPU 0: NVIDIA H100 80GB HBM3", "GPU 7: NVIDIA H100 80GB HBM3"}, 8},
		{"two GPUs rendered are two GPUs listed", "h100", 2, false,
			[]string{"nvidia-smi", "-L"}, []string{"GPU 1: NVIDIA H100 80GB HBM3"}, 2},
		{"the command's environment names no library path", "h100", 0, false,
			[]string{"sh", "-c", `echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH NVMOCK_SNAPSHOT=$NVMOCK_SNAPSHOT"`}, []string{"LD_LIBRARY_PATH= NVMOCK_SNAPSHOT="}, 1},
		{"python ctypes dlopens libnvidia-ml.so.1 by name", "h100", 0, false,
			[]string{python, "-c", dlopen}, []string{"0 0 8"}, 1},
		{"the dev nodes and proc files exist and the rest of /dev works", "a100", 3, false,
			[]string{"sh", "-c", `ls /dev/nvidia0 /dev/nvidiactl && test -c /dev/nvidia2 && ! test -e /dev/nvidia3 &&
cat /proc/driver/nvidia/version && ls /proc/driver/nvidia/gpus | wc -l &&
echo x > /dev/null && head -c 4 /dev/zero | wc -c && test -c /dev/pts/ptmx &&
touch /dev/shm/nsexec-probe && rm /dev/shm/nsexec-probe && python3 -c 'import pty, os; pty.openpty()' && echo all-ok`},
			[]string{"/dev/nvidia0", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  fixture", "3", "4", "all-ok"}, 0},
		{"unprivileged: a user namespace shows the same GPUs", "h100", 0, true,
			[]string{"nvidia-smi", "-L"}, []string{"GPU 7: NVIDIA H100 80GB HBM3"}, 8},
		{"unprivileged: nodes are /dev/null bind mounts and /dev/null works", "h100", 1, true,
			[]string{"sh", "-c", `stat -c %t:%T /dev/nvidia0 && echo x > /dev/null && cat /proc/driver/nvidia/version >/dev/null && echo ok`},
			[]string{"1:3", "ok"}, 2},
	}
	before := hostState(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := run(t, tc.profile, tc.gpus, tc.userns, tc.args...)
			t.Logf("%v; stderr: %q", time.Since(start), r.stderr)
			if r.err != nil || r.status != 0 {
				t.Fatalf("status %d, %v; stdout %q", r.status, r.err, r.stdout)
			}
			got := strings.Split(strings.TrimSpace(r.stdout), "\n")
			for _, w := range tc.want {
				found := false
				for _, l := range got {
					found = found || strings.HasPrefix(l, w)
				}
				if !found {
					t.Errorf("no line starting %q in\n%s", w, r.stdout)
				}
			}
			if tc.lines != 0 && len(got) != tc.lines {
				t.Errorf("%d lines, want %d:\n%s", len(got), tc.lines, r.stdout)
			}
			if len(r.tmpLeft) != 0 {
				t.Errorf("temp dir left behind: %v", r.tmpLeft)
			}
		})
	}
	if after := hostState(t); after != before {
		t.Errorf("the host changed:\n--- before\n%s\n--- after\n%s", before, after)
	}
}

func TestExitStatusPassesThrough(t *testing.T) {
	needRoot(t)
	tests := []struct {
		name    string
		args    []string
		want    int
		wantErr bool
	}{
		{"an exit status is the command's", []string{"sh", "-c", "exit 7"}, 7, false},
		{"success is zero", []string{"true"}, 0, false},
		{"a signal n is 128+n", []string{"sh", "-c", "kill -TERM $$"}, 128 + 15, false},
		{"a missing command is 127 and an error", []string{"no-such-command-nvmock"}, StatusNotFound, true},
		{"a file that is not a program is 126 and an error", []string{"/etc/hostname"}, StatusNotRunnable, true},
	}
	for _, tc := range tests {
		for _, userns := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, user namespace %v", tc.name, userns), func(t *testing.T) {
				r := run(t, "t4", 0, userns, tc.args...)
				if r.status != tc.want {
					t.Errorf("status %d (%v), want %d; stderr %q", r.status, r.err, tc.want, r.stderr)
				}
				if tc.wantErr != (r.err != nil) {
					t.Errorf("error %v for status %d", r.err, r.status)
				}
				if len(r.tmpLeft) != 0 {
					t.Errorf("temp dir left behind: %v", r.tmpLeft)
				}
			})
		}
	}
}

// A signal that comes while the node is being set up ends the run before
// the command starts, with 128+n, as it ended the child that did the setup
// (review: the thread started the command, which never saw a terminal's
// ^C). The setup is made slow by an ldconfig that sleeps first, with no
// loader cache yet.
func TestASignalDuringTheSetupEndsTheRunBeforeTheCommand(t *testing.T) {
	needRoot(t)
	ldconfig, err := findLdconfig()
	must(t, err)
	bin := t.TempDir()
	must(t, os.WriteFile(filepath.Join(bin, "ldconfig"), []byte("#!/bin/sh\nsleep 1\nexec "+ldconfig+" \"$@\"\n"), 0o755))
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	for _, userns := range []bool{false, true} {
		t.Run(fmt.Sprintf("user namespace %v", userns), func(t *testing.T) {
			t.Setenv("XDG_CACHE_HOME", t.TempDir())
			var out, errb bytes.Buffer
			sigs := make(chan os.Signal, 4)
			o := Options{
				Args: []string{"sh", "-c", "echo ran"}, Env: cleanEnv(), Self: []string{"/proc/self/exe", childArg},
				Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
				TempDir: t.TempDir(), forceUserNS: userns, Signals: sigs,
			}
			rendered := make(chan struct{})
			go func() {
				<-rendered
				time.Sleep(300 * time.Millisecond) // into ldconfig's second
				sigs <- syscall.SIGINT
			}()
			status, err := RunRendered(func(dir string) (string, []Bind, error) {
				defer close(rendered)
				return fixture(t, dir, "t4", 0), nil, nil
			}, o)
			if status != 128+2 || out.String() != "" {
				t.Errorf("status %d (%v), stdout %q, stderr %q; want 130 and no command run", status, err, out.String(), errb.String())
			}
		})
	}
}

// SIGTERM sent to the process running the command reaches the command, and
// the temp dir still goes.
func TestSIGTERMReachesTheCommand(t *testing.T) {
	needRoot(t)
	pr, pw := io.Pipe()
	var errb bytes.Buffer
	tmp := t.TempDir()
	o := Options{
		Args: []string{"sh", "-c", `trap 'echo got-term; exit 3' TERM; echo ready; while :; do sleep 0.05; done`},
		Env:  cleanEnv(), Self: []string{"/proc/self/exe", childArg},
		Stdin: strings.NewReader(""), Stdout: pw, Stderr: &errb, TempDir: tmp,
	}
	type res struct {
		status int
		err    error
	}
	done := make(chan res, 1)
	go func() {
		s, err := RunRendered(func(dir string) (string, []Bind, error) { return fixture(t, dir, "t4", 0), nil, nil }, o)
		pw.Close()
		done <- res{s, err}
	}()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("command did not start: %q, stderr %q", sc.Text(), errb.String())
	}
	start := time.Now()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for sc.Scan() {
		rest = append(rest, sc.Text())
	}
	r := <-done
	t.Logf("SIGTERM to exit: %v", time.Since(start))
	if r.status != 3 || r.err != nil || strings.Join(rest, "\n") != "got-term" {
		t.Errorf("status %d, %v, output %q; want 3 after got-term", r.status, r.err, rest)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "*")); len(left) != 0 {
		t.Errorf("temp dir left behind: %v", left)
	}
}
