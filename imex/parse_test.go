//go:build integration

package imex

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
)

// The config reader runs on what the DRA driver's template, or a hand,
// writes. These tests run it, built parse-only (-DIMEX_PARSE_ONLY: the same
// read_config, no sockets) with AddressSanitizer and UBSan, over configs
// and a fuzzer's mutations: no sanitizer report, crash or hang; a refusal
// is one line naming the file; what it takes is what the grammar below
// reads.

// parser is the parse-only build, made once a process (each fuzz worker
// makes its own); TestMain removes it.
var parser = struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}{}

func parseOnly(t testing.TB) string {
	t.Helper()
	gcc := testenv.Tool(t, "gcc")
	parser.once.Do(func() {
		// The daemon and the tool are left out, hence -Wno-unused-function.
		parser.dir, parser.bin, parser.err = buildSanitized(gcc, "imex-parse", "-DIMEX_PARSE_ONLY", "-Wno-unused-function")
	})
	if parser.err != nil {
		testenv.Missing(t, "the parse-only sanitized build (gcc's libasan and libubsan): %v", parser.err)
	}
	return parser.bin
}

// parseConfig runs the parse-only build on data; ok is false for a
// refusal, whose line is checked here.
func parseConfig(t testing.TB, data []byte) (got map[string]string, ok bool) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "imexd.cfg")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, parseOnly(t), path)
	cmd.Env = append(os.Environ(), asanEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	switch ee, _ := err.(*exec.ExitError); {
	case ctx.Err() != nil:
		t.Fatalf("the parser hung on %s", showBytes(data))
	case sanitizerReport(stderr.String()):
		t.Fatalf("sanitizer on %s:\n%s", showBytes(data), stderr.String())
	case err == nil:
		got = map[string]string{}
		for _, f := range bytes.Split(stdout.Bytes(), []byte{0}) {
			if k, v, found := strings.Cut(string(f), "="); found {
				got[k] = v
			}
		}
		return got, true
	case ee == nil || ee.ExitCode() != 1:
		t.Fatalf("the parser on %s: %v\n%s", showBytes(data), err, stderr.String())
	}
	line := stderr.String()
	if !strings.HasPrefix(line, "nvidia-imex: config "+path+": line ") || strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
		t.Fatalf("the refusal of %s is not one line naming the file and line: %q", showBytes(data), line)
	}
	return nil, false
}

// wantConfig is the grammar read_config documents, read independently: what
// it takes from data, or false where it must refuse. Addresses are left to
// check, as inet_pton and netip differ at the edges.
func wantConfig(data []byte) (map[string]string, bool) {
	w := map[string]string{"nodes": "/etc/nvidia-imex/nodes_config.cfg", "bind_ip": "", "server_port": "50000",
		"cmd_enabled": "0", "cmd_ip": "", "cmd_port": "50005", "cmd_unix": "", "log_file": "", "daemonize": "1"}
	lines := strings.SplitAfter(string(data), "\n")
	for _, line := range lines {
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if strings.ContainsRune(line, 0) {
			return nil, false
		}
		s := strings.TrimLeft(line, " \t")
		if s == "" || s[0] == '#' {
			continue
		}
		k, v, found := strings.Cut(s, "=")
		if !found || k == "" || strings.IndexFunc(k, func(r rune) bool {
			return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
		}) >= 0 {
			return nil, false
		}
		port := func(name string, v string, min int) bool {
			if v == "" {
				return true
			}
			p, err := strconv.Atoi(v)
			if strings.Trim(v, "0123456789") != "" || err != nil || p < min || p > 65535 {
				return false
			}
			w[name] = strconv.Itoa(p)
			return true
		}
		text := func(name string, max int) bool {
			if len(v) > max {
				return false
			}
			w[name] = v
			return true
		}
		ok := true
		switch k {
		case "IMEX_NODE_CONFIG_FILE":
			ok = v == "" || text("nodes", 4095)
		case "SERVER_PORT":
			ok = port("server_port", v, 0)
		case "IMEX_CMD_PORT":
			ok = port("cmd_port", v, 1)
		case "IMEX_CMD_ENABLED":
			ok = v == "" || v == "0" || v == "1"
			w["cmd_enabled"] = map[bool]string{true: "1", false: "0"}[v == "1"]
		case "IMEX_CMD_UNIX_DOMAIN_PATH":
			ok = text("cmd_unix", 107)
		case "LOG_FILE_NAME":
			ok = text("log_file", 4095)
		case "DAEMONIZE": // empty: the default, 1
			ok = v == "" || v == "0" || v == "1"
			if v != "" {
				w["daemonize"] = v
			}
		case "BIND_INTERFACE_IP", "IMEX_CMD_BIND_INTERFACE_IP":
			w[k] = v // checked against what the parser took
		}
		if !ok {
			return nil, false
		}
	}
	return w, true
}

// checkConfig compares the parser with wantConfig on data.
func checkConfig(t testing.TB, data []byte) {
	t.Helper()
	got, ok := parseConfig(t, data)
	want, wok := wantConfig(data)
	if !ok {
		if wok && want["BIND_INTERFACE_IP"] == "" && want["IMEX_CMD_BIND_INTERFACE_IP"] == "" {
			t.Fatalf("the parser refused %s, which the grammar reads as %v", showBytes(data), want)
		}
		return // refused: by the grammar, or at an address netip may take
	}
	if !wok {
		t.Fatalf("the parser took %s, which the grammar refuses: %v", showBytes(data), got)
	}
	for _, a := range [][2]string{{"bind_ip", "BIND_INTERFACE_IP"}, {"cmd_ip", "IMEX_CMD_BIND_INTERFACE_IP"}} {
		v := want[a[1]]
		delete(want, a[1])
		if v == "" {
			continue
		}
		addr, err := netip.ParseAddr(v)
		if err != nil || addr.Zone() != "" {
			t.Fatalf("the parser took %s=%q, which is no address: %v", a[1], v, err)
		}
		want[a[0]] = addr.String()
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("on %s\nthe parser took %v\nthe grammar reads %v", showBytes(data), got, want)
	}
}

func showBytes(b []byte) string {
	if len(b) > 300 {
		return fmt.Sprintf("%q... (%d bytes)", b[:300], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// seeds are configs as the DRA driver renders them, NVIDIA's documented
// keys, and the damage hostile_test.go names.
var seeds = []string{
	"LOG_LEVEL=4\nLOG_FILE_NAME=\nDAEMONIZE=0\nBIND_INTERFACE_IP=\nSERVER_PORT=50000\nIMEX_NODE_CONFIG_FILE=/imexd/nodes_config.cfg\n" +
		"IMEX_CMD_ENABLED=1\nIMEX_CMD_BIND_INTERFACE_IP=10.1.2.3\nIMEX_CMD_PORT=50005\nIMEX_CMD_UNIX_DOMAIN_PATH=\n",
	"# comment\r\n  IMEX_CMD_ENABLED=1\r\nIMEX_CMD_BIND_INTERFACE_IP=fd00::2\r\nIMEX_CMD_UNIX_DOMAIN_PATH=/run/imex.sock\r\n",
	"SERVER_PORT=1\nSERVER_PORT=65535\nBIND_INTERFACE_IP=::ffff:1.2.3.4\n",
	"IMEX_CMD_PORT = 1\n", "=1\n", "IMEX_CMD_PORT=1\x00\n", "SERVER_PORT=0\n", "SERVER_PORT=70000\n", "SERVER_PORT=12ab\n",
	"IMEX_CMD_ENABLED=yes\n", "BIND_INTERFACE_IP=300.1.1.1\n", "GARBAGE\n", "SERVER_PORT=18720\r1\n",
	"LOG_FILE_NAME=" + strings.Repeat("l", 4096) + "\n", "IMEX_CMD_UNIX_DOMAIN_PATH=/" + strings.Repeat("s", 106) + "\n",
	"IMEX_CMD_UNIX_DOMAIN_PATH=/" + strings.Repeat("s", 107) + "\n", "# " + strings.Repeat("x", 9000) + "\nSERVER_PORT=2",
	"DAEMONIZE=1\n", "DAEMONIZE=\n", "DAEMONIZE=0\nDAEMONIZE=yes\n",
}

func TestTheParserReadsTheGrammar(t *testing.T) {
	for _, s := range seeds {
		checkConfig(t, []byte(s))
	}
}

// FuzzConfig mutates the seeds; make fuzz runs it.
func FuzzConfig(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkConfig(t, data)
	})
}
