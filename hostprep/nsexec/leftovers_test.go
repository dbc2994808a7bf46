//go:build integration

package nsexec

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Processes the command leaves running end with it, as a container's do
// with its first process: one on SIGTERM, one that ignores SIGTERM by
// SIGKILL after the grace. The command's status stays its own, and a
// process outside the namespace is left alone.
func TestProcessesTheCommandLeftRunningEndWithIt(t *testing.T) {
	needRoot(t)
	for _, userns := range []bool{false, true} {
		t.Run(map[bool]string{false: "as root", true: "in a user namespace"}[userns], func(t *testing.T) {
			outsider := exec.Command("sleep", "1002")
			if err := outsider.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = outsider.Process.Kill(); _ = outsider.Wait() }()

			dir := t.TempDir()
			var notes []string
			var errb bytes.Buffer
			o := Options{
				Args: []string{"sh", "-c", `sleep 1000 & echo $! > ` + dir + `/term
					sh -c 'trap "" TERM; echo $$ > ` + dir + `/kill.new; mv ` + dir + `/kill.new ` + dir + `/kill; exec sleep 1001' &
					while [ ! -e ` + dir + `/kill ]; do sleep 0.01; done
					while [ "$(cat /proc/$(cat ` + dir + `/kill)/comm)" != sleep ]; do sleep 0.01; done
					exit 5`},
				Env: cleanEnv(), Self: []string{"/proc/self/exe", childArg},
				Stdin: strings.NewReader(""), Stdout: &errb, Stderr: &errb,
				TempDir: t.TempDir(), forceUserNS: userns,
				Note: func(s string) { notes = append(notes, s) },
			}
			start := time.Now()
			status, err := RunRendered(func(d string) (string, []Bind, error) { return fixture(t, d, "t4", 0), nil, nil }, o)
			took := time.Since(start)
			if status != 5 || err != nil {
				t.Fatalf("status %d, %v; want the command's 5\n%s", status, err, errb.String())
			}
			for _, name := range []string{"term", "kill"} {
				pid := readPid(t, filepath.Join(dir, name))
				if alive(pid) {
					t.Errorf("the %s process (%d) is still running after the command ended", name, pid)
				}
			}
			if !alive(outsider.Process.Pid) {
				t.Errorf("a process outside the namespace (%d) was ended", outsider.Process.Pid)
			}
			var ending []string
			for _, n := range notes {
				if strings.Contains(n, "left running") {
					ending = append(ending, n)
				}
			}
			if len(ending) != 1 || !strings.Contains(ending[0], "ending 2 process(es) the command left running") ||
				strings.Count(ending[0], "(sleep)") != 2 {
				t.Errorf("notes %q, want one naming the two sleeps", notes)
			}
			if took < leftoverGrace {
				t.Errorf("ended in %v: the one ignoring SIGTERM had no grace (%v)", took, leftoverGrace)
			}
		})
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// alive says whether pid is a process that has not exited (a zombie has).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// A namespace that is held keeps its name, so the leftovers of a command
// whose namespace died never take in another exec's: the kernel gives a
// freed namespace's inode number to the next one made (QA: one exec ended
// another's processes, and a CI run's).
func TestAHeldNamespaceIsNeverAnotherExecs(t *testing.T) {
	needRoot(t)
	inNewNS := func(args ...string) *exec.Cmd {
		c := exec.Command(args[0], args[1:]...)
		c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	for round := 0; round < 5; round++ {
		first := inNewNS("sleep", "0.2")
		ns, f := holdMountNS("/proc/" + strconv.Itoa(first.Process.Pid) + "/ns/mnt")
		if f == nil {
			t.Fatal("cannot hold the first command's namespace")
		}
		_ = first.Wait()
		time.Sleep(100 * time.Millisecond) // the kernel frees a namespace after its last task
		other := inNewNS("sleep", "30")
		endLeftovers(ns, nil)
		_ = other.Process.Kill()
		_ = other.Wait()
		f.Close()
		if ws := other.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: another command's process was ended as the first's leftover (%s)", round, ns)
		}
	}
}
