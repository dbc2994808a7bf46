//go:build integration

package test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

var frozenAt = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// monitorNode is a two-GPU a100 node whose GPU 0 is under load with one
// registered process (a sleeping child); it returns the snapshot and pid.
// Its clock is frozen unless frozen is zero.
func monitorNode(t *testing.T, frozen time.Time) (string, int) {
	t.Helper()
	snap, _ := testenv.Snapshot(t, "a100", 2)
	f := testenv.LiveState(t, snap, 2, frozen)
	boards, err := live.Boards(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "120")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	err = f.Update(func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 60, Memory: 30}, now)
		return s.AddProcess(live.Process{PID: uint32(sleeper.Process.Pid), GPU: 0, Type: 1, UsedBytes: 3 << 30, Name: "trainer", PIDNS: live.PIDNamespace()}, now)
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap, sleeper.Process.Pid
}

func monitor(t *testing.T, parts ...string) string {
	t.Helper()
	p := filepath.Join(append([]string{testenv.CacheDir(), "monitors"}, parts...)...)
	if _, err := os.Stat(p); err != nil {
		testenv.Missing(t, "%s (run make deps, or hack/fetch-monitors.sh)", p)
	}
	return p
}

// gpustat, the Python monitor on pynvml, shows the load and the process.
func TestGpustatShowsTheLoadAndTheProcess(t *testing.T) {
	snap, pid := monitorNode(t, frozenAt)
	python, env := pynvmlEnv(t, snap)
	gpustat := monitor(t, "gpustat", "usr", "lib", "python3", "dist-packages")
	for i, kv := range env {
		if strings.HasPrefix(kv, "PYTHONPATH=") {
			env[i] = kv + ":" + gpustat
		}
	}
	cmd := exec.Command(python, "-m", "gpustat", "--json")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpustat --json: %v\n%s", err, out)
	}
	var doc struct {
		GPUs []struct {
			Index     int              `json:"index"`
			Util      int              `json:"utilization.gpu"`
			MemUsed   int              `json:"memory.used"`
			Processes []map[string]any `json:"processes"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || len(doc.GPUs) != 2 {
		t.Fatalf("gpustat --json: %v\n%s", err, out)
	}
	g0, g1 := doc.GPUs[0], doc.GPUs[1]
	if g0.Util != 60 || len(g0.Processes) != 1 || g0.Processes[0]["pid"] != float64(pid) || g0.Processes[0]["gpu_memory_usage"] != float64(3072) {
		t.Errorf("gpustat GPU 0: utilization %d, processes %v; want 60 and pid %d with 3072 MiB", g0.Util, g0.Processes, pid)
	}
	if g0.MemUsed-g1.MemUsed != 3072 || len(g1.Processes) != 0 || g1.Util != 0 {
		t.Errorf("gpustat: GPU 0 uses %d MiB against GPU 1's %d, GPU 1 has %v at %d %%", g0.MemUsed, g1.MemUsed, g1.Processes, g1.Util)
	}
}

// nvtop, the terminal monitor that dlopens the library and calls the
// unversioned (v1) process lists, shows the process in its list.
func TestNvtopListsTheProcess(t *testing.T) {
	snap, pid := monitorNode(t, frozenAt)
	nvtop := monitor(t, "nvtop", "usr", "bin", "nvtop")
	script := testenv.Tool(t, "script")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A terminal for it: script; SIGINT after 3 s ends it as q would.
	cmd := exec.CommandContext(ctx, "timeout", "-s", "INT", "3", script, "-q", "-c", nvtop+" -d 5", "/dev/null")
	cmd.Env = testenv.Env(t, snap, "TERM=xterm", "HOME="+t.TempDir(), "COLUMNS=160", "LINES=40")
	out, _ := cmd.CombinedOutput()
	text := regexp.MustCompile(`\x1b\[[0-9;?]*[a-zA-Z]|\x1b[()][0-9A-Z]`).ReplaceAllString(string(out), " ")
	if !strings.Contains(text, strconv.Itoa(pid)) || !strings.Contains(text, "trainer") && !strings.Contains(text, "sleep") {
		t.Errorf("nvtop's screen lacks pid %d and its name:\n%s", pid, text)
	}
	t.Logf("nvtop: %s", around(text, strconv.Itoa(pid)))
	if !strings.Contains(text, "A100") {
		t.Errorf("nvtop's screen lacks the GPU:\n%s", text)
	}
}

// nvitop (trixie's, on trixie's pynvml 12.550) shows each GPU's load and
// memory, and the process with its memory and utilization.
func TestNvitopShowsTheLoadAndTheProcess(t *testing.T) {
	// The wall clock: nvitop asks for process samples since a second ago.
	snap, pid := monitorNode(t, time.Time{})
	python, env := pynvmlEnv(t, snap)
	nvitop := monitor(t, "nvitop", "usr", "lib", "python3", "dist-packages")
	pynvml := monitor(t, "pynvml12", "usr", "lib", "python3", "dist-packages")
	for i, kv := range env {
		if strings.HasPrefix(kv, "PYTHONPATH=") {
			env[i] = "PYTHONPATH=" + nvitop + ":" + pynvml // its pynvml, not bookworm's
		}
	}
	cmd := exec.Command(python, "-m", "nvitop", "--once")
	cmd.Env = append(env, "TERM=xterm", "COLUMNS=160", "LINES=50", "HOME="+t.TempDir(), "PYTHONIOENCODING=utf-8")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nvitop --once: %v\n%s", err, out)
	}
	text := string(out)
	// Each GPU's second line: temperature, P-state, power, memory, utilization.
	rows := regexp.MustCompile(`(?m)^│ N/A +\d+C +P0 +\d+W / 400W │ +(\S+) / 40\.00GiB │ +(\d+)% `).FindAllStringSubmatch(text, -1)
	if len(rows) != 2 || rows[0][1] != "3072MiB" || rows[0][2] != "60" || rows[1][2] != "0" {
		t.Errorf("nvitop's GPU rows %q, want GPU 0 at 3072MiB and 60%%, GPU 1 at 0%%:\n%s", rows, text)
	}
	proc := regexp.MustCompile(`(?m)^│ +0 +` + strconv.Itoa(pid) + ` C +\S+ +3072MiB +60 +30 `)
	if !proc.MatchString(text) {
		t.Errorf("nvitop lists no process %d on GPU 0 with 3072MiB, 60 %%SM and 30 %%GMBW:\n%s", pid, text)
	}
}

// around is the text near the first s, for logs.
func around(text, s string) string {
	i := strings.Index(text, s)
	if i < 0 {
		return ""
	}
	return strings.Join(strings.Fields(text[max(0, i-80):min(len(text), i+80)]), " ")
}
