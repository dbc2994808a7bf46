//go:build integration

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// execNode runs the built nvmock exec on a t4 node with a cache and a
// temporary directory of the test's own; it returns the command.
func execNode(t *testing.T, cache, tmp string, args ...string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (nvmock exec makes a mount namespace)")
	}
	bin := filepath.Join(testenv.BuildDir(), "bin", "nvmock")
	assets := filepath.Join(testenv.BuildDir(), "driver")
	if _, err := os.Stat(filepath.Join(assets, "usr", "bin", "nvidia-smi")); err != nil {
		testenv.Missing(t, "%s (run make driver)", assets)
	}
	cmd := exec.Command(bin, append([]string{"exec", "--assets", assets}, args...)...)
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+cache, "TMPDIR="+tmp)
	return cmd
}

func status(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// The command starts as a shell would start it: the caller's descriptors
// above stderr at their numbers, the shell's statuses for what cannot run,
// and none of the caller's NVMOCK_STATE. nvmock's own failures are 125.
// Found in review.
func TestExecStartsTheCommandAsAShellWould(t *testing.T) {
	cache, tmp := t.TempDir(), t.TempDir()
	t.Run("descriptor 3 reaches the command", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "three")
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd := execNode(t, cache, tmp, "--profile", "t4", "--", "sh", "-c", "echo on-three >&3")
		cmd.ExtraFiles = []*os.File{f}
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		if b, _ := os.ReadFile(out); string(b) != "on-three\n" {
			t.Errorf("fd 3 got %q", b)
		}
	})
	dir := t.TempDir()
	tool := filepath.Join(dir, "mytool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\necho mytool ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		args   []string
		env    []string
		status int
		out    string
	}{
		{"a directory is 126", []string{"--profile", "t4", "--", dir}, nil, 126, dir + ": is a directory"},
		{"a missing command is 127", []string{"--profile", "t4", "--", "no-such-tool"}, nil, 127, "no-such-tool: command not found"},
		{"a command found through . on PATH runs", []string{"--profile", "t4", "--", "mytool"}, []string{"PATH=.:/usr/bin:/bin"}, 0, "mytool ran"},
		{"the caller's NVMOCK_STATE stays outside", []string{"--profile", "t4", "--", "sh", "-c", `echo "state=[$NVMOCK_STATE]"`},
			[]string{"NVMOCK_STATE=/outside/state"}, 0, "state=[]"},
		{"an unknown profile is 125", []string{"--profile", "nosuch", "--", "true"}, nil, 125, `no built-in profile "nosuch"`},
		{"a TMPDIR that is not there is 125", []string{"--profile", "t4", "--", "true"}, []string{"TMPDIR=/nonexistent-nvmock"}, 125,
			"TMPDIR /nonexistent-nvmock is not a directory"},
		{"an InfiniBand option without InfiniBand is 125", []string{"--profile", "t4", "--ib-listen", "127.0.0.1:18700", "--", "true"}, nil, 125,
			"--ib-listen: profile t4 has no InfiniBand"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := execNode(t, cache, tmp, c.args...)
			cmd.Dir = dir
			cmd.Env = append(cmd.Env, c.env...)
			b, err := cmd.CombinedOutput()
			if status(err) != c.status || !strings.Contains(string(b), c.out) {
				t.Errorf("status %d, want %d; output %q, want it to hold %q", status(err), c.status, b, c.out)
			}
		})
	}
}

// ^C at a terminal reaches the whole foreground process group, the command
// with nvmock: nvmock must not pass on a second one. Found in review.
func TestExecCtrlCReachesTheCommandOnce(t *testing.T) {
	script := testenv.Tool(t, "script")
	py := testenv.Tool(t, "python3")
	counter := filepath.Join(t.TempDir(), "count.py")
	if err := os.WriteFile(counter, []byte(`import signal, time
n = 0
def h(s, f):
    global n
    n += 1
signal.signal(signal.SIGINT, h)
print("ready", flush=True)
end = time.time() + 2
while time.time() < end:
    time.sleep(0.02)
print("total", n, flush=True)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	inner := execNode(t, t.TempDir(), t.TempDir(), "--profile", "t4", "--", py, counter)
	cmd := exec.Command(script, "-qec", strings.Join(inner.Args, " "), "/dev/null")
	cmd.Env = inner.Env
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	var seen []string
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if strings.Contains(sc.Text(), "ready") {
			break
		}
	}
	if _, err := in.Write([]byte{3}); err != nil { // ^C at the terminal
		t.Fatal(err)
	}
	total := ""
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if i := strings.Index(sc.Text(), "total "); i >= 0 {
			total = strings.TrimSpace(sc.Text()[i:])
		}
	}
	io.Copy(io.Discard, out)
	cmd.Wait()
	if total != "total 1" {
		t.Errorf("the command counted %q SIGINTs for one ^C, want total 1; it printed:\n%s", total, strings.Join(seen, "\n"))
	}
}

// What a killed run leaves (nvmock exec's temporary directory and its
// fabric's) is swept by the next run; a live run's is not. Found in review.
func TestExecSweepsWhatAKilledRunLeft(t *testing.T) {
	cache, tmp := t.TempDir(), t.TempDir()
	mk := func(name string, lock bool, age time.Duration) string {
		d := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Join(d, "overlay"), 0o755); err != nil {
			t.Fatal(err)
		}
		if lock {
			if err := os.WriteFile(filepath.Join(d, ".nvmock-lock"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		old := time.Now().Add(-age)
		os.Chtimes(d, old, old)
		return d
	}
	killed := mk("nvmock-exec-killed", true, 0)
	fabric := mk("nvmock-ibd-killed", true, 0)
	oldUnlocked := mk("nvmock-exec-old", false, time.Hour)
	young := mk("nvmock-exec-young", false, 0)
	live := mk("nvmock-exec-live", true, 0)
	f, err := os.OpenFile(filepath.Join(live, ".nvmock-lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	// h100 has InfiniBand: the run starts a fabric, which sweeps its kind.
	cmd := execNode(t, cache, tmp, "--profile", "h100", "--gpus", "1", "--", "true")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	for d, want := range map[string]bool{killed: false, fabric: false, oldUnlocked: false, young: true, live: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s: there %v, want %v", filepath.Base(d), err == nil, want)
		}
	}
}

// Without TMPDIR a run's overlay (hundreds of files written and removed
// each run) goes to a tmpfs, /dev/shm on a machine whose /tmp is on a
// disk, and is gone after; the namespace still shows the host's /dev/shm.
func TestExecWithoutTMPDIRKeepsItsOverlayInMemory(t *testing.T) {
	cmd := execNode(t, t.TempDir(), "", "--profile", "h100", "--gpus", "1", "--",
		"sh", "-c", `stat -f -c %T /dev/.nvmock/driver; grep -o 'nvmock-exec-[0-9]*' /proc/self/mountinfo | head -1; touch /dev/shm/nvmock-probe-$$ && rm /dev/shm/nvmock-probe-$$ && ibstat mlx5_0 | grep -c Active`)
	env := cmd.Env[:0]
	for _, kv := range cmd.Env {
		if !strings.HasPrefix(kv, "TMPDIR=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	out := strings.Fields(string(b))
	if len(out) != 3 || out[0] != "tmpfs" || out[2] != "1" {
		t.Fatalf("want tmpfs, the overlay's name and 1 active port; got\n%s", b)
	}
	for _, d := range []string{"/tmp", "/dev/shm"} {
		if _, err := os.Stat(filepath.Join(d, out[1])); err == nil {
			t.Errorf("%s left in %s", out[1], d)
		}
	}
}

// The cache keeps the eight PCI trees used last, however many GPU counts,
// profiles and faults made others. Found in review (it grew 20 MB a run).
func TestExecCacheKeepsTheTreesUsedLast(t *testing.T) {
	cache, tmp := t.TempDir(), t.TempDir()
	for gpus := 1; gpus <= 10; gpus++ {
		cmd := execNode(t, cache, tmp, "--profile", "l40s", "--gpus", fmt.Sprint(gpus), "--", "true")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("--gpus %d: %v\n%s", gpus, err, b)
		}
	}
	trees, _ := filepath.Glob(filepath.Join(cache, "nvmock", "pci-*"))
	var dirs []string
	for _, p := range trees {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			dirs = append(dirs, filepath.Base(p))
		}
	}
	if len(dirs) != 8 {
		t.Errorf("%d trees in the cache after 10 GPU counts, want 8: %v", len(dirs), dirs)
	}
}

// /proc/devices has the overlay's majors beside the kernel's, as the
// runtime hook gives containers (nvidia-ctk reads nvidia-caps' there); a
// machine without sysfs at /sys runs the command without the PCI tree.
// Found in review.
func TestExecShowsTheDriversMajorsAndDoesWithoutSysfs(t *testing.T) {
	cache, tmp := t.TempDir(), t.TempDir()
	cmd := execNode(t, cache, tmp, "--profile", "h100", "--gpus", "1", "--mig", "all-balanced", "--", "sh", "-c",
		`grep -c -e '^195 nvidia-frontend$' -e '^509 nvidia-caps$' -e '^  1 mem$' /proc/devices`)
	b, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(b)) != "3" {
		t.Errorf("/proc/devices: %v, %q lines of nvidia-frontend, nvidia-caps and the kernel's mem; want 3", err, b)
	}
	inner := execNode(t, cache, tmp, "--profile", "h100", "--gpus", "1", "--", "nvidia-smi", "-L")
	cmd = exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", `umount -l /sys && exec "$@"`, "sh")
	cmd.Args = append(cmd.Args, inner.Args...)
	cmd.Env = inner.Env
	b, err = cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "GPU 0: NVIDIA H100") || !strings.Contains(string(b), "/sys is not the kernel's sysfs here") {
		t.Errorf("without sysfs at /sys: %v\n%s", err, b)
	}
}

// withRealDriver runs cmd in a mount namespace of the test's own, where
// /proc/driver/nvidia shows as a loaded driver's would.
func withRealDriver(t *testing.T, cmd *exec.Cmd) ([]byte, error) {
	t.Helper()
	args := append([]string{"--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs tmpfs /proc/driver && mkdir /proc/driver/nvidia && exec "$@"`, "sh"}, cmd.Args...)
	c := exec.Command(testenv.Tool(t, "unshare"), args...)
	c.Env = cmd.Env
	return c.CombinedOutput()
}

// On a host with NVIDIA's kernel module the command sees the mock, not
// the host's GPUs: exec says so (it said nothing; install refuses).
func TestExecNotesARealDriver(t *testing.T) {
	cache, tmp := t.TempDir(), t.TempDir()
	plain, err := execNode(t, cache, tmp, "--profile", "t4", "--", "true").CombinedOutput()
	if err != nil || strings.Contains(string(plain), "real NVIDIA driver") {
		t.Errorf("exec on this host (no driver): %v\n%s", err, plain)
	}
	out, err := withRealDriver(t, execNode(t, cache, tmp, "--profile", "t4", "--", "true"))
	want := "nvmock exec: note: this host has a real NVIDIA driver (/proc/driver/nvidia); the command sees the mock GPUs, not its own"
	if err != nil || !strings.Contains(string(out), want) {
		t.Errorf("exec on a host with /proc/driver/nvidia: %v\n%s\nwant %q", err, out, want)
	}
}

// --real-device-numbers gives the nodes NVIDIA's numbers, as hostprep
// install does (nvidia-ctk cdi generate writes them into CDI specs), and
// refuses where a real driver would answer them. Exec had no such flag.
func TestExecGivesNVIDIAsDeviceNumbersWhenAsked(t *testing.T) {
	cache, tmp := t.TempDir(), t.TempDir()
	nodes := []string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"}
	numbers := func(args ...string) string {
		t.Helper()
		args = append(append([]string{"--profile", "t4", "--gpus", "2"}, args...), "--", "sh", "-c", `stat -c '%t:%T' "$@" && nvidia-smi -L | wc -l`, "sh")
		out, err := execNode(t, cache, tmp, append(args, nodes...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("exec %v: %v\n%s", args, err, out)
		}
		return strings.Join(strings.Fields(string(out)), " ")
	}
	if got, want := numbers(), "1:3 1:3 1:3 1:3 2"; got != want {
		t.Errorf("device numbers by default: %s, want %s (and nvidia-smi's 2 GPUs)", got, want)
	}
	if got, want := numbers("--real-device-numbers"), "c3:0 c3:1 c3:ff 1ff:0 2"; got != want {
		t.Errorf("--real-device-numbers: %s, want %s (and nvidia-smi's 2 GPUs)", got, want)
	}
	// nvidia-ctk writes the numbers into its CDI spec.
	ctk := filepath.Join(testenv.CacheDir(), "bin", "nvidia-ctk")
	if _, err := os.Stat(ctk); err != nil {
		testenv.Missing(t, "%s (run make deps)", ctk)
	}
	for _, c := range []struct {
		flags []string
		want  string
	}{{nil, `major: 1\s+minor: 3\s`}, {[]string{"--real-device-numbers"}, `major: 195\s`}} {
		spec := filepath.Join(t.TempDir(), "nvidia.yaml")
		args := append(append([]string{"--profile", "t4", "--gpus", "1"}, c.flags...), "--", ctk, "cdi", "generate", "--output", spec)
		out, err := execNode(t, cache, tmp, args...).CombinedOutput()
		data, _ := os.ReadFile(spec)
		if err != nil || !regexp.MustCompile(`- path: /dev/nvidia0\s+`+c.want).Match(data) {
			t.Errorf("nvidia-ctk cdi generate in exec %v: %v\n%s\nspec:\n%s\nwant /dev/nvidia0 with %s", c.flags, err, out, data, c.want)
		}
	}
	// Inside another exec's node, whose /proc/driver/nvidia is the mock's
	// (review: refused as a real driver).
	inner := execNode(t, cache, tmp, "--profile", "t4", "--gpus", "1", "--real-device-numbers", "--", "stat", "-c", "%t:%T", "/dev/nvidia0")
	outer := execNode(t, cache, tmp, append([]string{"--profile", "t4", "--gpus", "1", "--"}, inner.Args...)...)
	if out, err := outer.CombinedOutput(); err != nil || string(out) != "c3:0\n" {
		t.Errorf("--real-device-numbers in exec inside exec: %v, %q; want c3:0", err, out)
	}
	out, err := withRealDriver(t, execNode(t, cache, tmp, "--profile", "t4", "--real-device-numbers", "--", "true"))
	want := "nvmock: exec: --real-device-numbers: this host has a real NVIDIA driver (/proc/driver/nvidia); nodes with its numbers would open its GPUs\n"
	if status(err) != 125 || string(out) != want {
		t.Errorf("--real-device-numbers on a host with /proc/driver/nvidia: %v\n%s\nwant status 125 and %q", err, out, want)
	}
}

// A node started without a MIG layout has MIG's capability files and nodes
// from the start, as a real node has: nvidia-ctk lists a MIG device made
// later with nvidia-smi (it failed: "error getting MIG capability device
// paths"). They come from the cache, rendered once for the board.
func TestExecHasMIGCapabilitiesForInstancesMadeLater(t *testing.T) {
	ctk := filepath.Join(testenv.CacheDir(), "bin", "nvidia-ctk")
	if _, err := os.Stat(ctk); err != nil {
		testenv.Missing(t, "%s (run make deps)", ctk)
	}
	cache, tmp := t.TempDir(), t.TempDir()
	spec := filepath.Join(t.TempDir(), "nvidia.yaml")
	// h100's 1g.10gb is profile 19.
	script := `nvidia-smi -i 0 -mig 1 >/dev/null && out=$(nvidia-smi mig -i 0 -cgi 19 -C) &&
		gi=$(echo "$out" | sed -n 's/.*created GPU instance ID *\([0-9]*\).*/\1/p') && echo "gi $gi" &&
		cat /proc/driver/nvidia/capabilities/gpu0/mig/gi$gi/access /proc/driver/nvidia/capabilities/gpu0/mig/gi$gi/ci0/access &&
		"$1" cdi generate --output "$2" >/dev/null 2>&1`
	for run := 1; run <= 2; run++ {
		out, err := execNode(t, cache, tmp, "--profile", "h100", "--gpus", "2", "--", "sh", "-c", script, "sh", ctk, spec).CombinedOutput()
		var gi int
		if err != nil || func() bool { _, e := fmt.Sscanf(string(out), "gi %d", &gi); return e != nil }() {
			t.Fatalf("run %d: MIG instance made in exec: %v\n%s", run, err, out)
		}
		giMinor, ciMinor := hostprep.MIGCapMinor(0, gi, -1), hostprep.MIGCapMinor(0, gi, 0)
		data, _ := os.ReadFile(spec)
		node := regexp.MustCompile(fmt.Sprintf(`name: "?0:0"?\s+containerEdits:\s+deviceNodes:\s+- path: /dev/nvidia0\s[^-]*- path: /dev/nvidia-caps/nvidia-cap%d\s[^-]*- path: /dev/nvidia-caps/nvidia-cap%d\s`, giMinor, ciMinor))
		if !strings.Contains(string(out), fmt.Sprintf("DeviceFileMinor: %d\n", giMinor)) || !strings.Contains(string(out), fmt.Sprintf("DeviceFileMinor: %d\n", ciMinor)) || !node.Match(data) {
			t.Fatalf("run %d: GPU instance %d made in exec:\n%s\nspec:\n%s\nwant capability files of minors %d and %d, and MIG device 0:0 with their nodes", run, gi, out, data, giMinor, ciMinor)
		}
	}
	if dirs, _ := filepath.Glob(filepath.Join(cache, "nvmock", "mig-*[0-9a-f]")); len(dirs) != 1 {
		t.Errorf("MIG capability files in the cache after two runs: %v, want one rendering", dirs)
	}
	// The cache's nodes have /dev/null's numbers; NVIDIA's are made in
	// the namespace, never cached.
	minor := hostprep.MIGCapMinor(1, 13, 0)
	for _, c := range []struct {
		flags []string
		want  string
	}{{nil, "1:3"}, {[]string{"--real-device-numbers"}, fmt.Sprintf("1fd:%x", minor)}} {
		args := append(append([]string{"--profile", "h100", "--gpus", "2"}, c.flags...), "--", "stat", "-c", "%t:%T", fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor))
		if out, err := execNode(t, cache, tmp, args...).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != c.want {
			t.Errorf("capability node %d in exec %v: %v, %q; want %s", minor, c.flags, err, out, c.want)
		}
	}
}

// A board with InfiniBand runs where /dev/infiniband exists (a real RDMA
// host, or here another exec's node, gb200's with 8 umad nodes): the
// overlay's nodes take its place, as the NVIDIA ones do. QA: "mkdir
// /dev/infiniband: file exists".
func TestExecReplacesTheHostsInfiniBandNodes(t *testing.T) {
	cache, tmp := t.TempDir(), t.TempDir()
	inner := execNode(t, cache, tmp, "--profile", "h100", "--gpus", "1", "--", "sh", "-c", "ls /dev/infiniband | grep -c umad")
	outer := execNode(t, cache, tmp, append([]string{"--profile", "gb200", "--gpus", "1", "--"}, inner.Args...)...)
	out, err := outer.Output()
	if err != nil || string(out) != "12\n" {
		t.Errorf("exec on h100 inside exec on gb200: %v\n%s\nwant h100's 12 umad nodes", err, out)
	}
}

// SIGUSR1 and SIGUSR2 sent to exec reach the command, as a container
// runtime passes them on (QA: they were dropped).
func TestExecPassesOnSIGUSR1(t *testing.T) {
	cache, tmp := t.TempDir(), t.TempDir()
	cmd := execNode(t, cache, tmp, "--profile", "t4", "--", "sh", "-c", `trap 'echo got-usr1; exit 4' USR1; echo ready; while :; do sleep 0.05; done`)
	sc := startReady(t, cmd)
	// Not passed on, the command would loop forever: end its group.
	stop := time.AfterFunc(20*time.Second, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer stop.Stop()
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for sc.Scan() {
		rest = append(rest, sc.Text())
	}
	if code := status(cmd.Wait()); code != 4 || !slices.Equal(rest, []string{"got-usr1"}) {
		t.Errorf("after SIGUSR1: exit %d, output %q; want 4 and got-usr1", code, rest)
	}
}

// A SIGKILL of exec itself, or of its whole process group, still ends what
// the command left running, a daemon in a session of its own included, and
// removes its temporary directory (QA: they ran on for good); also when
// exec's stderr was a pipe whose reader died with it (review: the guard's
// note would end it by SIGPIPE).
func TestExecKilledStillEndsWhatTheCommandLeft(t *testing.T) {
	for _, stderr := range []string{"a file", "a pipe whose reader is gone"} {
		t.Run(stderr, func(t *testing.T) {
			cache, tmp := t.TempDir(), t.TempDir()
			pidFile := filepath.Join(t.TempDir(), "pid")
			cmd := execNode(t, cache, tmp, "--profile", "t4", "--", "sh", "-c",
				`setsid sh -c 'echo $$ > `+pidFile+`.new; mv `+pidFile+`.new `+pidFile+`; exec sleep 1003' &
				while [ ! -e `+pidFile+` ] || [ "$(cat /proc/$(cat `+pidFile+`)/comm)" != sleep ]; do sleep 0.01; done
				echo ready; exec sleep 1004`)
			errFile, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = errFile
			var reader *os.File
			if stderr != "a file" {
				if reader, cmd.Stderr, err = os.Pipe(); err != nil {
					t.Fatal(err)
				}
			}
			startReady(t, cmd)
			daemon := readPidFile(t, pidFile)
			if reader != nil {
				reader.Close()
				cmd.Stderr.(*os.File).Close()
			}
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			for end := time.Now().Add(10 * time.Second); processAlive(daemon) && time.Now().Before(end); {
				time.Sleep(20 * time.Millisecond)
			}
			if processAlive(daemon) {
				_ = syscall.Kill(daemon, syscall.SIGKILL)
				t.Fatalf("the command's daemon (%d) still runs 10 s after exec was killed", daemon)
			}
			var left []string
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				ents, _ := os.ReadDir(tmp)
				if left = nil; len(ents) == 0 {
					break
				}
				for _, e := range ents {
					left = append(left, e.Name())
				}
			}
			if len(left) > 0 {
				t.Errorf("left in TMPDIR: %v", left)
			}
			if reader != nil {
				return
			}
			if b, _ := os.ReadFile(errFile.Name()); !strings.Contains(string(b), "exec was killed; ending") || !strings.Contains(string(b), fmt.Sprintf("%d (sleep)", daemon)) {
				t.Errorf("stderr %q, want a note naming the daemon", b)
			}
		})
	}
}

// startReady starts cmd in a process group of its own and waits for its
// first line, "ready"; it returns the rest of its output.
func startReady(t *testing.T, cmd *exec.Cmd) *bufio.Scanner {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "ready" {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		t.Fatalf("the command did not start: %q", sc.Text())
	}
	return sc
}

func readPidFile(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	var pid int
	if _, serr := fmt.Sscan(string(b), &pid); err != nil || serr != nil {
		t.Fatalf("%s: no pid (%v, %v)", path, err, serr)
	}
	return pid
}

// processAlive says whether pid runs and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// A state cut short in exec, where its directory is read-only, is made
// again in place by nvmock ctl create (review: "remove ...: read-only file
// system", and advice to reinstall, which exec cannot).
func TestExecRepairsAStateCutShort(t *testing.T) {
	script := `S=/dev/.nvmock/driver/etc/nvmock/state; truncate -s 4096 $S &&
		{ nvmock ctl status 2>&1 | grep -o 'make it again (nvmock ctl create)'; } &&
		nvmock ctl create && nvmock ctl load 0 50 && nvmock ctl status | sed -n 3p | tr -s ' ' | cut -d' ' -f1-2 &&
		stat -c %s $S`
	self := filepath.Join(testenv.BuildDir(), "bin")
	cmd := execNode(t, t.TempDir(), t.TempDir(), "--profile", "t4", "--", "sh", "-c", script)
	cmd.Env = append(cmd.Env, "PATH="+self+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	want := fmt.Sprintf("make it again (nvmock ctl create)\n0 50%%\n%d\n", live.Size)
	if err != nil || string(out) != want {
		t.Errorf("exec: %v\n%s\nwant:\n%s", err, out, want)
	}
}
