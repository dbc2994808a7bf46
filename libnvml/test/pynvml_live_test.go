//go:build integration

package test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// pynvmlEnv is Debian's python3 with the fetched pynvml, on a snapshot.
func pynvmlEnv(t *testing.T, snap string) (python string, env []string) {
	t.Helper()
	pydir := filepath.Join(testenv.CacheDir(), "pynvml", "usr", "lib", "python3", "dist-packages")
	if _, err := os.Stat(filepath.Join(pydir, "pynvml.py")); err != nil {
		if _, err2 := os.Stat(filepath.Join(pydir, "pynvml", "__init__.py")); err2 != nil {
			testenv.Missing(t, "pynvml in %s (run make deps or hack/fetch-pynvml.sh)", pydir)
		}
	}
	python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		testenv.Missing(t, "%s: %v", python, err)
	}
	return python, testenv.Env(t, snap, "PYTHONPATH="+pydir, "PYTHONDONTWRITEBYTECODE=1", "PYTHONNOUSERSITE=1")
}

// Several pynvml processes at once read the state one writer set, and one
// waiting for events receives an XID injected while it waits.
func TestPynvmlProcessesShareTheLiveState(t *testing.T) {
	snap, _ := testenv.Snapshot(t, "a100", 4)
	f := testenv.LiveState(t, snap, 4, time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	boards, err := live.Boards(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	pid := sleeper.Process.Pid
	err = f.Update(func(s *live.State, now int64) error {
		s.SetLoad(boards[0], 0, live.Loads{GPU: 65}, now)
		s.Header.FrozenNS += uint64(20 * time.Second)
		if err := s.AddProcess(live.Process{PID: uint32(pid), GPU: 0, Type: 1, UsedBytes: 3 << 30, Name: "trainer", PIDNS: live.PIDNamespace()}, now); err != nil {
			return err
		}
		return s.AddFault(1, live.Fault{Kind: live.FaultLost}, now)
	})
	if err != nil {
		t.Fatal(err)
	}
	g := f.Read().GPUs[0]
	tempMC, _ := boards[0].At(65, g.Temp0MC, g.Energy0MJ, int64(20*time.Second))
	want := fmt.Sprintf("util=65 temp=%d power=%d procs=%d:3072:trainer gpu1_lost=yes\n", (tempMC+500)/1000, uint32(boards[0].PowerMW(65)+0.5), pid)

	python, env := pynvmlEnv(t, snap)
	script := filepath.Join(testenv.Root(), "libnvml", "test", "testdata", "pynvml_live.py")
	var wg sync.WaitGroup
	outs := make([]string, 4)
	for i := range outs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cmd := exec.Command(python, script, "read")
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil {
				out = append(out, err.Error()...)
			}
			outs[i] = string(out)
		}(i)
	}
	wg.Wait()
	for i, out := range outs {
		if out != want {
			t.Errorf("pynvml process %d: %q, want %q", i, out, want)
		}
	}

	if err := f.Update(func(s *live.State, _ int64) error { s.Header.Frozen = 0; return nil }); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, script, "events")
	cmd.Env = env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("pynvml events: %q, want ready", lines.Text())
	}
	if err := f.Update(func(s *live.State, now int64) error { return s.XID(3, 31, now) }); err != nil {
		t.Fatal(err)
	}
	if !lines.Scan() || lines.Text() != "event gpu=3 type=0x8 data=31" {
		t.Errorf("pynvml events: %q, want XID 31 on GPU 3", lines.Text())
	}
}

// pynvml's GPM (an older header: 98 metrics) reads the load through two
// samples; an A100 says it has none.
func TestPynvmlReadsGPM(t *testing.T) {
	for _, c := range []struct{ profile, want string }{
		{"h100", "gpu0=70,35,err3 gpu1=0,0,err3\n"},
		{"a100", "gpu0=none gpu1=none\n"},
	} {
		t.Run(c.profile, func(t *testing.T) {
			snap, _ := testenv.Snapshot(t, c.profile, 2)
			f := testenv.LiveState(t, snap, 2, time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
			boards, err := live.Boards(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Update(func(s *live.State, now int64) error {
				s.SetLoad(boards[0], 0, live.Loads{GPU: 70, Memory: 35}, now)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			python, env := pynvmlEnv(t, snap)
			cmd := exec.Command(python, filepath.Join(testenv.Root(), "libnvml", "test", "testdata", "pynvml_gpm.py"))
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil || string(out) != c.want {
				t.Errorf("pynvml GPM: %v\n%s\nwant %q", err, out, c.want)
			}
		})
	}
}
