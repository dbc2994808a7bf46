//go:build integration

// Package imex tests nvmock's nvidia-imex and nvidia-imex-ctl (imex.c), the
// built binary of make build, as NVIDIA's DRA driver runs them: the daemon
// with the config its compute-domain daemon renders, and the readiness
// probe nvidia-imex-ctl -c CONFIG -q, which must print READY.
package imex

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmock/nvmock/internal/testenv"
)

// Ports from the test range of this machine's suites.
const serverPort, cmdPort = 18690, 18691

// tools is one build of imex.c as the two names it answers to, and the
// environment its runs get.
type tools struct {
	daemon, ctl string
	env         []string
}

// builds runs f on make build's static binary and on the sanitized build
// (asan_test.go), so each scenario also checks for memory errors.
func builds(t *testing.T, f func(t *testing.T, b tools)) {
	t.Run("static", func(t *testing.T) { f(t, static(t)) })
	t.Run("sanitized", func(t *testing.T) { f(t, sanitized(t)) })
}

// static copies the built binary as the two names it answers to.
func static(t *testing.T) tools {
	t.Helper()
	built := filepath.Join(testenv.BuildDir(), "driver", "usr", "bin", "nvidia-imex")
	if _, err := os.Stat(built); err != nil {
		testenv.Missing(t, "%s (run make build)", built)
	}
	return named(t, built, nil)
}

// named copies bin as nvidia-imex and nvidia-imex-ctl in a directory of the
// test's.
func named(t *testing.T, bin string, env []string) tools {
	t.Helper()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	d := t.TempDir()
	b := tools{daemon: filepath.Join(d, "nvidia-imex"), ctl: filepath.Join(d, "nvidia-imex-ctl"), env: env}
	for _, p := range []string{b.daemon, b.ctl} {
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// config writes a daemon config with the keys the DRA driver's template
// sets, and a nodes file of two DNS names, as its compute-domain daemon
// writes them.
func config(t *testing.T, extra string) string {
	t.Helper()
	d := t.TempDir()
	nodes := filepath.Join(d, "nodes.cfg")
	if err := os.WriteFile(nodes, []byte("compute-domain-daemon-0\ncompute-domain-daemon-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`# rendered for the test
LOG_LEVEL=4
LOG_FILE_NAME=
DAEMONIZE=0
BIND_INTERFACE_IP=
SERVER_PORT=%d
IMEX_NODE_CONFIG_FILE=%s
IMEX_WAIT_FOR_QUORUM=RECOVERY
IMEX_ENABLE_AUTH_ENCRYPTION=0
IMEX_CMD_ENABLED=1
IMEX_CMD_BIND_INTERFACE_IP=127.0.0.1
IMEX_CMD_PORT=%d
IMEX_CMD_UNIX_DOMAIN_PATH=
IMEX_NODE_DISCONNECTED_GRACE_TIME=-1
%s`, serverPort, nodes, cmdPort, extra)
	path := filepath.Join(d, "imexd.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// start runs the daemon until the test ends, and waits until it listens;
// done gives its exit.
// A sanitizer's report in its log fails the test.
func start(t *testing.T, b tools, cfg string) (cmd *exec.Cmd, log *testenv.SyncBuffer, done <-chan error) {
	t.Helper()
	return startUnder(t, b, cfg)
}

// startUnder is start with the daemon run by a wrapper that execs it
// (prlimit, say).
func startUnder(t *testing.T, b tools, cfg string, wrapper ...string) (cmd *exec.Cmd, log *testenv.SyncBuffer, done <-chan error) {
	t.Helper()
	log = &testenv.SyncBuffer{}
	argv := append(slices.Clone(wrapper), b.daemon, "-c", cfg)
	cmd = exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), b.env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if sanitizerReport(log.String()) {
			t.Errorf("the daemon's log has a sanitizer's report:\n%s", log.String())
		}
	})
	// The daemon says ready once it listens, on whichever address.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(log.String(), "ready:"); {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon is not ready after 10 s:\n%s", log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd, log, exited
}

// run runs a build's daemon or ctl to its end; a sanitizer's report fails
// the test.
func run(t *testing.T, b tools, bin string, args ...string) (string, int) {
	t.Helper()
	// A daemon that takes a bad config and runs would hang the test.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), b.env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %q: still running after 20 s:\n%s", filepath.Base(bin), args, out)
	}
	if sanitizerReport(string(out)) {
		t.Fatalf("%s %q: a sanitizer's report:\n%s", filepath.Base(bin), args, out)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

func TestTheDaemonAnswersTheDRADriversProbeUntilItStops(t *testing.T) {
	builds(t, func(t *testing.T, b tools) {
		cfg := config(t, "")
		cmd, log, done := start(t, b, cfg)
		if out, code := run(t, b, b.ctl, "-c", cfg, "-q"); out != "READY\n" || code != 0 {
			t.Errorf("nvidia-imex-ctl -c CONFIG -q: exit %d, %q; want READY", code, out)
		}
		if out, code := run(t, b, b.ctl, "-i", "127.0.0.1", fmt.Sprint(cmdPort), "-q"); out != "READY\n" || code != 0 {
			t.Errorf("nvidia-imex-ctl -i IP PORT -q: exit %d, %q", code, out)
		}
		// The compute-domain daemon sends SIGUSR1 when the nodes change.
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		if out, code := run(t, b, b.ctl, "-c", cfg, "-q"); out != "READY\n" || code != 0 {
			t.Errorf("after SIGUSR1: exit %d, %q", code, out)
		}
		// A peer may connect to the server port.
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", serverPort)); err != nil {
			t.Errorf("the server port: %v", err)
		} else {
			c.Close()
		}
		// The domain's status is not modelled: said, not invented.
		if out, code := run(t, b, b.ctl, "-c", cfg, "-N"); code == 0 || !strings.Contains(out, "not modelled") {
			t.Errorf("nvidia-imex-ctl -N: exit %d, %q; want an error saying it is not modelled", code, out)
		}

		stop(t, cmd, log, done)
		if !strings.Contains(log.String(), "2 node(s) in") || !strings.Contains(log.String(), "SIGUSR1") {
			t.Errorf("the daemon's log:\n%s\nwant its nodes and the SIGUSR1 reload", log.String())
		}
		if out, code := run(t, b, b.ctl, "-c", cfg, "-q"); code == 0 || strings.Contains(out, "READY") {
			t.Errorf("nvidia-imex-ctl -q with the daemon stopped: exit %d, %q; want a failure", code, out)
		}
	})
}

// The DRA driver binds the command service to its pod's IP, which is IPv6
// in an IPv6 cluster.
// -p and --port take the place of SERVER_PORT, as NVIDIA documents them.
func TestThePortOptionOverridesTheConfig(t *testing.T) {
	builds(t, func(t *testing.T, b tools) {
		for i, opt := range []string{"-p", "--port"} {
			port := serverPort + 2 + i
			log := &testenv.SyncBuffer{}
			cmd := exec.Command(b.daemon, "-c", config(t, ""), opt, fmt.Sprint(port))
			cmd.Env = append(os.Environ(), b.env...)
			cmd.Stdout, cmd.Stderr = log, log
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			want := fmt.Sprintf("server port %d,", port)
			for end := time.Now().Add(10 * time.Second); !strings.Contains(log.String(), want); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(end) {
					cmd.Process.Kill()
					t.Fatalf("%s %d: no %q after 10 s:\n%s", opt, port, want, log.String())
				}
			}
			if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
				t.Errorf("%s %d: %v", opt, port, err)
			} else {
				c.Close()
			}
			stop(t, cmd, log, done)
		}
	})
}

func TestTheDaemonListensOnIPv6(t *testing.T) {
	builds(t, func(t *testing.T, b tools) {
		cfg := config(t, "IMEX_CMD_BIND_INTERFACE_IP=::1\n")
		_, log, _ := start(t, b, cfg)
		if out, code := run(t, b, b.ctl, "-c", cfg, "-q"); out != "READY\n" || code != 0 {
			t.Errorf("nvidia-imex-ctl -c CONFIG -q on ::1: exit %d, %q\n%s", code, out, log.String())
		}
		if out, code := run(t, b, b.ctl, "-i", "::1", fmt.Sprint(cmdPort), "-q"); out != "READY\n" || code != 0 {
			t.Errorf("nvidia-imex-ctl -i ::1 PORT -q: exit %d, %q", code, out)
		}
	})
}

func TestTheControlToolTakesAUnixSocket(t *testing.T) {
	builds(t, func(t *testing.T, b tools) {
		sock := filepath.Join(t.TempDir(), "imex.sock")
		start(t, b, config(t, "IMEX_CMD_UNIX_DOMAIN_PATH="+sock+"\n"))
		if out, code := run(t, b, b.ctl, "-u", sock, "-q"); out != "READY\n" || code != 0 {
			t.Errorf("nvidia-imex-ctl -u PATH -q: exit %d, %q", code, out)
		}
	})
}

// Bad input: one line naming the file and what is wrong, exit 1.
func TestBadConfigsAreOneLine(t *testing.T) {
	builds(t, func(t *testing.T, b tools) {
		missing := filepath.Join(t.TempDir(), "none.cfg")
		noNodes := config(t, "IMEX_NODE_CONFIG_FILE=/nonexistent/nodes.cfg\n")
		badPort := config(t, "IMEX_CMD_PORT=70000\n")
		noEquals := config(t, "GARBAGE\n")
		// A commented line longer than any buffer stays a comment.
		longComment := config(t, "# "+strings.Repeat("x", 9000)+"IMEX_CMD_PORT=1\nGARBAGE\n")
		daemon, ctl := b.daemon, b.ctl
		for _, c := range []struct {
			bin  string
			args []string
			want string
		}{
			{daemon, []string{"-c", missing}, "config file " + missing},
			{daemon, []string{"-c", noNodes}, "node config file /nonexistent/nodes.cfg"},
			{daemon, []string{"-c", badPort}, "IMEX_CMD_PORT: 70000 is not a port"},
			{daemon, []string{"-c", noEquals}, "GARBAGE: want KEY=VALUE"},
			{daemon, []string{"--nonsense"}, "unknown argument --nonsense"},
			{daemon, []string{"-c"}, "-c needs a value"},
			{daemon, []string{"-c", config(t, ""), "--port"}, "--port needs a value"},
			{daemon, []string{"-c", config(t, ""), "-p", "65536"}, "-p: 65536 is not a port"},
			{daemon, []string{"-c", longComment}, "GARBAGE: want KEY=VALUE"},
			{daemon, []string{"-c", t.TempDir()}, "Is a directory"},
			{daemon, []string{"-c", config(t, "DAEMONIZE=true\n")}, "DAEMONIZE: true is not 0 or 1"},
			// A value is shown cut, not a megabyte line (QA).
			{daemon, []string{"-c", config(t, "SERVER_PORT="+strings.Repeat("9", 100000)+"\n")}, "SERVER_PORT: " + strings.Repeat("9", 80) + " is not a port"},
			{ctl, []string{"-i", "127.0.0.1", "0", "-q"}, "-i IP PORT: 0 is not a port"},
			{ctl, []string{"-c", missing, "-q"}, "config file " + missing},
			{ctl, []string{"-c", noEquals, "-i", "127.0.0.1", "1", "-q"}, "only one of -i, -u, or -c"},
		} {
			out, code := run(t, b, c.bin, c.args...)
			if code != 1 || !strings.Contains(out, c.want) || strings.Count(strings.TrimSpace(out), "\n") != 0 {
				t.Errorf("%s %v: exit %d, %q; want one line with %q", filepath.Base(c.bin), c.args, code, out, c.want)
			}
		}
	})
}

// DAEMONIZE=1, NVIDIA's default, runs the daemon on in a session of its
// own once it listens, holding none of the caller's files, so systemctl
// start and a shell return (QA: it stayed in the foreground; review: it
// kept the caller's descriptors above stderr).
func TestTheDaemonDetachesAsNVIDIAsDefaultAsks(t *testing.T) {
	builds(t, func(t *testing.T, b tools) {
		for _, v := range []string{"1", "not given"} {
			cfg := config(t, "DAEMONIZE=1\n")
			if v != "1" {
				data, err := os.ReadFile(cfg)
				if err != nil {
					t.Fatal(err)
				}
				data = []byte(strings.ReplaceAll(string(data), "DAEMONIZE=0\n", ""))
				if err := os.WriteFile(cfg, []byte(strings.ReplaceAll(string(data), "DAEMONIZE=1\n", "")), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// The sanitizers' reports go to files: the daemon's stderr is
			// /dev/null once it detaches.
			reports := t.TempDir()
			var env []string
			for _, e := range b.env {
				if strings.HasPrefix(e, "ASAN_OPTIONS=") || strings.HasPrefix(e, "UBSAN_OPTIONS=") {
					e += ":log_path=" + filepath.Join(reports, "report")
				}
				env = append(env, e)
			}
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(b.daemon, "-c", cfg)
			cmd.Env = append(os.Environ(), env...)
			cmd.ExtraFiles = []*os.File{w} // a file of the caller's, at 3
			out, err := cmd.CombinedOutput()
			w.Close()
			pid := findDaemon(t, b.daemon, cfg)
			if pid == 0 {
				t.Fatalf("DAEMONIZE=%s: no daemon running after nvidia-imex returned (%v):\n%s", v, err, out)
			}
			if err != nil || !strings.Contains(string(out), "ready:") {
				t.Errorf("DAEMONIZE=%s: nvidia-imex returned %v, %q; want 0 once ready", v, err, out)
			}
			r.SetReadDeadline(time.Now().Add(2 * time.Second))
			if n, err := r.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Errorf("DAEMONIZE=%s: the caller's pipe at fd 3: read %d, %v; want EOF (the daemon keeps none of the caller's files)", v, n, err)
			}
			r.Close()
			if out, code := run(t, b, b.ctl, "-c", cfg, "-q"); out != "READY\n" || code != 0 {
				t.Errorf("DAEMONIZE=%s: nvidia-imex-ctl -q: exit %d, %q", v, code, out)
			}
			if sid, err := unix.Getsid(pid); err != nil || sid != pid {
				t.Errorf("DAEMONIZE=%s: the daemon's session %d (%v), want its own (%d)", v, sid, err, pid)
			}
			if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			for end := time.Now().Add(10 * time.Second); !exited(pid); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(end) {
					syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("DAEMONIZE=%s: the daemon still runs 10 s after SIGTERM", v)
				}
			}
			if ents, _ := os.ReadDir(reports); len(ents) > 0 {
				data, _ := os.ReadFile(filepath.Join(reports, ents[0].Name()))
				t.Errorf("DAEMONIZE=%s: a sanitizer's report:\n%s", v, data)
			}
		}
	})
}

// exited says whether pid has closed its files: it is gone or a zombie.
// An exiting process's cmdline reads empty before its sockets close, so
// findDaemon said none ran while its port was still bound (CI: the next
// daemon's listen failed, "Address already in use").
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// findDaemon is the pid of bin -c cfg, 0 if none runs (a zombie is none).
func findDaemon(t *testing.T, bin, cfg string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	want := bin + "\x00-c\x00" + cfg + "\x00"
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && string(b) == want {
			return pid
		}
	}
	return 0
}

// Clients that connect and say nothing hold up no one: the DRA driver's
// probe answers at once beside them (review: five idle connections made
// it wait 10 s, its timeout). A request in flight when SIGUSR1 comes is
// still answered.
func TestIdleClientsAndSignalsDelayNoAnswer(t *testing.T) {
	builds(t, func(t *testing.T, b tools) {
		cfg := config(t, "")
		cmd, log, _ := start(t, b, cfg)
		for i := 0; i < 5; i++ {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", cmdPort))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
		}
		began := time.Now()
		if out, code := run(t, b, b.ctl, "-c", cfg, "-q"); out != "READY\n" || code != 0 {
			t.Errorf("with idle clients: exit %d, %q", code, out)
		}
		if d := time.Since(began); d > time.Second {
			t.Errorf("with five idle clients the probe took %v", d)
		}
		slow, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", cmdPort))
		if err != nil {
			t.Fatal(err)
		}
		defer slow.Close()
		time.Sleep(100 * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if _, err := slow.Write([]byte("status\n")); err != nil {
			t.Fatal(err)
		}
		slow.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 16)
		if n, err := slow.Read(buf); err != nil || string(buf[:n]) != "READY\n" {
			t.Errorf("a request across SIGUSR1: %q %v\n%s", buf[:n], err, log.String())
		}
	})
}

// A daemon whose parent started it with SIGTERM blocked (a shell's trap,
// a supervisor's own mask) still stops on it.
func TestTheDaemonStopsWhenStartedWithSignalsBlocked(t *testing.T) {
	builds(t, func(t *testing.T, b tools) {
		block := `import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
os.execv(sys.argv[1], sys.argv[1:])`
		cmd, log, done := startUnder(t, b, config(t, ""), "python3", "-c", block)
		stop(t, cmd, log, done)
	})
}

// stop sends the daemon SIGTERM and wants a clean exit within 10 s.
func stop(t *testing.T, cmd *exec.Cmd, log *testenv.SyncBuffer, done <-chan error) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the daemon on SIGTERM: %v\n%s", err, log.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the daemon did not stop on SIGTERM\n%s", log.String())
	}
}
