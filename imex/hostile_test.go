//go:build integration

package imex

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Damaged configs, as a hand or a broken template writes them: each is one
// line naming the file, the line and the problem, and exit status 1, from
// the daemon and from nvidia-imex-ctl -c, never a crash or a silent
// default. A sanitizer's report fails the case (run checks).
func TestDamagedConfigsAreOneLine(t *testing.T) {
	builds(t, func(t *testing.T, b tools) {
		for _, c := range []struct {
			name, extra, want string
			daemonOnly        bool // the tool does not listen: it fails to connect
		}{
			{"a NUL byte is refused", "IMEX_CMD_PORT=18721\x00junk\n", "line 15: a NUL byte", false},
			{"a blank before the equals sign is not a key", "IMEX_CMD_PORT = 1\n", "line 15: IMEX_CMD_PORT = 1: want KEY=VALUE", false},
			{"an equals sign first has no key", "=1\n", "line 15: =1: no key before '='", false},
			{"a CR inside a port is no port", "IMEX_CMD_PORT=18721\r1\n", "line 15: IMEX_CMD_PORT: 18721\r1 is not a port", false},
			{"a line of 100 kB names its start", "X" + strings.Repeat("y", 100000) + "\n", ": Xyyyy", false},
			{"a value too long for its buffer", "LOG_FILE_NAME=/" + strings.Repeat("l", 5000) + "\n", "line 15: LOG_FILE_NAME: value too long (4095 bytes at most)", false},
			{"a socket path longer than sun_path", "IMEX_CMD_UNIX_DOMAIN_PATH=/" + strings.Repeat("s", 120) + "\n", "IMEX_CMD_UNIX_DOMAIN_PATH: value too long (107 bytes at most)", false},
			{"the command port is not 0", "IMEX_CMD_PORT=0\n", "line 15: IMEX_CMD_PORT: 0 is not a port (1 to 65535)", false},
			{"port 70000 is no port", "IMEX_CMD_PORT=70000\n", "IMEX_CMD_PORT: 70000 is not a port", false},
			{"12ab is no port", "IMEX_CMD_PORT=12ab\n", "IMEX_CMD_PORT: 12ab is not a port", false},
			{"a sign is no port", "IMEX_CMD_PORT=+18721\n", "IMEX_CMD_PORT: +18721 is not a port", false},
			{"a blank is no port", "IMEX_CMD_PORT= 18721\n", "IMEX_CMD_PORT:  18721 is not a port", false},
			{"the command service is 0 or 1", "IMEX_CMD_ENABLED=yes\n", "line 15: IMEX_CMD_ENABLED: yes is not 0 or 1", false},
			{"an address is IPv4 or IPv6", "BIND_INTERFACE_IP=300.1.1.1\n", "line 15: BIND_INTERFACE_IP: 300.1.1.1 is not an IPv4 or IPv6 address", false},
			{"a host name is no address", "IMEX_CMD_BIND_INTERFACE_IP=localhost\n", "IMEX_CMD_BIND_INTERFACE_IP: localhost is not an IPv4 or IPv6 address", false},
			{"a port taken names its keys", fmt.Sprintf("IMEX_CMD_PORT=%d\n", serverPort),
				fmt.Sprintf("IMEX_CMD_BIND_INTERFACE_IP, IMEX_CMD_PORT: listen on 127.0.0.1 port %d: Address already in use", serverPort), true},
			{"a port beyond long is no port", "IMEX_CMD_PORT=99999999999999999999999\n", "IMEX_CMD_PORT: 99999999999999999999999 is not a port", false},
		} {
			t.Run(c.name, func(t *testing.T) {
				cfg := config(t, c.extra)
				runs := [][]string{{b.daemon, "-c", cfg}, {b.ctl, "-c", cfg, "-q"}}
				if c.daemonOnly {
					runs = runs[:1]
				}
				for _, args := range runs {
					out, code := run(t, b, args[0], args[1:]...)
					if code != 1 || !strings.Contains(out, "config "+cfg+": ") || !strings.Contains(out, c.want) ||
						strings.Count(strings.TrimSuffix(out, "\n"), "\n") != 0 {
						t.Errorf("%s: exit %d, %q; want one line naming %s and %q", filepath.Base(args[0]), code, show(out), cfg, c.want)
					}
				}
			})
		}
	})
}

// show shortens a long output for an error.
func show(s string) string {
	if len(s) > 400 {
		return s[:400] + "..."
	}
	return s
}

// Hostile or broken clients of the command port: each connects, does its
// harm, and the DRA driver's probe must still answer READY at once, from
// a daemon with no sanitizer report (start checks its log).
func TestHostileClientsDelayNoAnswer(t *testing.T) {
	builds(t, func(t *testing.T, b tools) {
		cfg := config(t, "")
		cmd, log, done := start(t, b, cfg)
		dial := func() net.Conn {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", cmdPort))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		for _, c := range []struct {
			name string
			harm func()
		}{
			{"a megabyte in one write", func() {
				c := dial()
				c.SetWriteDeadline(time.Now().Add(2 * time.Second))
				c.Write(bytes.Repeat([]byte("status"), 1<<20/6))
			}},
			{"a close right after the request", func() { c := dial(); c.Write([]byte("status\n")); c.Close() }},
			{"a close before any byte", func() { dial().Close() }},
			{"a half-open connection", func() { c := dial(); c.(*net.TCPConn).CloseWrite() }},
			{"a request cut short", func() { c := dial(); c.Write([]byte("stat")); c.(*net.TCPConn).CloseWrite() }},
			{"binary junk", func() { dial().Write([]byte{0, 0xff, '\n', 0x80, 's', 0}) }},
			{"a reset", func() { c := dial(); c.(*net.TCPConn).SetLinger(0); c.Write([]byte("status\n")); c.Close() }},
			{"a byte every 100 ms", func() {
				c := dial()
				go func() {
					for _, ch := range []byte("status") {
						time.Sleep(100 * time.Millisecond)
						c.Write([]byte{ch})
					}
				}()
			}},
			// Review: a full table closed each newcomer, so 64 idle
			// connections, renewed every 2 s, kept the probe out.
			{"more idle connections than the table holds", func() {
				for i := 0; i < 80; i++ {
					dial()
				}
			}},
		} {
			c.harm()
			began := time.Now()
			if out, code := run(t, b, b.ctl, "-c", cfg, "-q"); out != "READY\n" || code != 0 {
				t.Errorf("after %s: exit %d, %q\n%s", c.name, code, out, log.String())
			}
			if d := time.Since(began); d > time.Second {
				t.Errorf("after %s the probe took %v", c.name, d)
			}
		}
		// A clean stop, with its leak check, after all that.
		stop(t, cmd, log, done)
	})
}

// nvidia-imex-ctl against a daemon that misbehaves (a stand-in on the
// command port): it fails with a line within its 3 s, or reads an answer
// sent in pieces; it never hangs or dies of SIGPIPE.
func TestTheControlToolSurvivesABrokenDaemon(t *testing.T) {
	builds(t, func(t *testing.T, b tools) {
		for _, c := range []struct {
			name     string
			serve    func(net.Conn)
			out      string
			exitCode int
		}{
			{"a daemon that never answers", func(c net.Conn) { time.Sleep(5 * time.Second) }, "no answer from the IMEX daemon", 1},
			{"a daemon that closes at once", func(c net.Conn) { c.(*net.TCPConn).SetLinger(0) }, "no answer from the IMEX daemon", 1},
			{"an answer in pieces", func(c net.Conn) {
				c.Write([]byte("REA"))
				time.Sleep(100 * time.Millisecond)
				c.Write([]byte("DY\n"))
			}, "READY\n", 0},
		} {
			t.Run(c.name, func(t *testing.T) {
				l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", cmdPort))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				go func() {
					if conn, err := l.Accept(); err == nil {
						c.serve(conn)
						conn.Close()
					}
				}()
				began := time.Now()
				out, code := run(t, b, b.ctl, "-i", "127.0.0.1", fmt.Sprint(cmdPort), "-q")
				if code != c.exitCode || !strings.Contains(out, c.out) {
					t.Errorf("exit %d, %q; want %d and %q", code, out, c.exitCode, c.out)
				}
				if d := time.Since(began); d > 4*time.Second {
					t.Errorf("it took %v", d)
				}
			})
		}
	})
}

// IMEX_CMD_UNIX_DOMAIN_PATH naming a file that is not a socket: refused,
// and the file left alone (the daemon used to delete whatever was there).
func TestTheSocketPathDeletesNoFile(t *testing.T) {
	builds(t, func(t *testing.T, b tools) {
		file := filepath.Join(t.TempDir(), "precious")
		if err := os.WriteFile(file, []byte("keep\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := config(t, "IMEX_CMD_UNIX_DOMAIN_PATH="+file+"\n")
		want := "config " + cfg + ": IMEX_CMD_UNIX_DOMAIN_PATH: " + file + " exists and is not a socket"
		if out, code := run(t, b, b.daemon, "-c", cfg); code != 1 || !strings.Contains(out, want) {
			t.Errorf("exit %d, %q; want %q", code, out, want)
		}
		if data, err := os.ReadFile(file); err != nil || string(data) != "keep\n" {
			t.Errorf("the file after: %q, %v", data, err)
		}
	})
}

// Out of file descriptors (a pod's low limit), queued connections do not
// make the daemon spin, and the probe still gets its answer: the oldest
// client goes to make room.
func TestFewDescriptorsDelayNoAnswer(t *testing.T) {
	builds(t, func(t *testing.T, b tools) {
		cfg := config(t, "")
		cmd, log, _ := startUnder(t, b, cfg, "prlimit", "--nofile=16:16")
		for i := 0; i < 24; i++ {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", cmdPort))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
		}
		before := cpuTicks(t, cmd.Process.Pid)
		time.Sleep(time.Second)
		if used := cpuTicks(t, cmd.Process.Pid) - before; used > 30 {
			t.Errorf("with its descriptors used up the daemon took %d of 100 CPU ticks in a second\n%s", used, log.String())
		}
		if out, code := run(t, b, b.ctl, "-c", cfg, "-q"); out != "READY\n" || code != 0 {
			t.Errorf("with its descriptors used up: exit %d, %q\n%s", code, out, log.String())
		}
	})
}

// cpuTicks is a process's user and system time, in clock ticks.
func cpuTicks(t *testing.T, pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return utime + stime
}

// The nodes file as the DRA driver's daemon rewrites it: CRLF blank lines
// are no node, and one gone at SIGUSR1 is said in the log.
func TestTheNodesFileOnReload(t *testing.T) {
	builds(t, func(t *testing.T, b tools) {
		cfg := config(t, "")
		nodes := filepath.Join(filepath.Dir(cfg), "nodes.cfg")
		if err := os.WriteFile(nodes, []byte("10.0.0.1\r\n\r\n10.0.0.2\r\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd, log, _ := start(t, b, cfg)
		if !strings.Contains(log.String(), "ready: 2 node(s)") {
			t.Errorf("two nodes and a CRLF blank line:\n%s", log.String())
		}
		if err := os.Remove(nodes); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		want := "SIGUSR1: node config file " + nodes + ": No such file or directory"
		for deadline := time.Now().Add(5 * time.Second); !strings.Contains(log.String(), want); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after SIGUSR1 with the nodes file gone, the log lacks %q:\n%s", want, log.String())
			}
		}
	})
}

// As NVIDIA documents its daemon: a log file it cannot open means the
// console, and the peers' port may be 0 (any free one).
func TestWhatTheDaemonTakesAsNVIDIAsDoes(t *testing.T) {
	builds(t, func(t *testing.T, b tools) {
		missing := filepath.Join(t.TempDir(), "gone", "imex.log")
		cfg := config(t, "LOG_FILE_NAME="+missing+"\nSERVER_PORT=0\n")
		_, log, _ := start(t, b, cfg)
		if !strings.Contains(log.String(), "warning: log file "+missing+": No such file or directory; logging to stderr") ||
			!strings.Contains(log.String(), "server port 0") {
			t.Errorf("a log file in a missing directory and server port 0:\n%s", log.String())
		}
		if out, code := run(t, b, b.ctl, "-c", cfg, "-q"); out != "READY\n" || code != 0 {
			t.Errorf("nvidia-imex-ctl -q: exit %d, %q", code, out)
		}
	})
}
