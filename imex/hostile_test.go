//go:build integration

package imex

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
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
			{"port 0 is no port", "SERVER_PORT=0\n", "line 15: SERVER_PORT: 0 is not a port", false},
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
