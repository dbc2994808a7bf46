//go:build integration

package hook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
)

// The hook's JSON reader runs as root on what a pod's creator partly
// writes (annotations, env, paths). These tests run it, built parse-only
// (-DHOOK_PARSE_ONLY: the same parsing, no mounts) with AddressSanitizer
// and UBSan, over valid states and configs, their mutations, and a fuzzer's
// inputs: no sanitizer report, crash or hang, and what it extracts is what
// encoding/json (runc's decoder) reads, or nothing.

// doc is one run's input: a container's state and a bundle's config.json.
type doc struct{ state, config []byte }

// parser is the parse-only build, made once a process (each fuzz worker
// makes its own).
var parser = struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}{}

// TestMain removes the parse-only build.
func TestMain(m *testing.M) {
	code := m.Run()
	if parser.dir != "" {
		os.RemoveAll(parser.dir)
	}
	os.Exit(code)
}

// parseHook builds hook.c parse-only with the sanitizers, once a process.
func parseHook(t testing.TB) string {
	t.Helper()
	gcc := testenv.Tool(t, "gcc")
	parser.once.Do(func() {
		if parser.dir, parser.err = os.MkdirTemp("", "nvmock-hook-parse"); parser.err != nil {
			return
		}
		parser.bin = filepath.Join(parser.dir, "nvmock-hook-parse")
		src := filepath.Join(testenv.Root(), "pcisim", "hook", "hook.c")
		// The mounting half is unused here, hence -Wno-unused-function.
		out, err := exec.Command(gcc, "-g", "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
			"-DHOOK_PARSE_ONLY", "-Wall", "-Wextra", "-Werror", "-Wno-unused-function", "-o", parser.bin, src).CombinedOutput()
		if err != nil {
			parser.err = fmt.Errorf("gcc: %w\n%s", err, out)
		}
	})
	if parser.err != nil {
		t.Fatal(parser.err)
	}
	return parser.bin
}

// parsed is what the hook extracted from one doc: bundle, root.path and
// rootfs, each absent when refused.
type parsed map[string]string

// parse runs the parse-only hook on docs and returns what it extracted
// from each. A sanitizer report, a signal or a hang fails the test, naming
// the doc (found by running the docs alone).
func parse(t testing.TB, docs []doc) []parsed {
	t.Helper()
	bin, dir := parseHook(t), t.TempDir()
	var args []string
	for i, d := range docs {
		s, c := filepath.Join(dir, fmt.Sprint(i, ".state")), filepath.Join(dir, fmt.Sprint(i, ".json"))
		if err := os.WriteFile(s, d.state, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(c, d.config, 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, s, c)
	}
	var out []parsed
	for len(out) < len(docs) {
		n := min(len(docs)-len(out), 500)
		got, err := run(bin, args[2*len(out):2*(len(out)+n)])
		if err != nil && n > 1 {
			for i := len(out); i < len(out)+n; i++ {
				if _, err1 := run(bin, args[2*i:2*i+2]); err1 != nil {
					t.Fatalf("state %s\nconfig %s\n%v", show(docs[i].state), show(docs[i].config), err1)
				}
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, got...)
		// The hook dies on a path too long for it or a NUL byte (that
		// doc's answer: a refusal); the run's other docs go again.
		if len(got) < n {
			out = append(out, parsed{})
		}
	}
	return out
}

// run runs the hook once on pairs of files; an error is a sanitizer's, a
// signal's or a hang's. It returns what the hook printed before it stopped.
func run(bin string, args []string) ([]parsed, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	// Exit status 66 for a report: 1 is a refusal. No leak check: die
	// leaves slurp's buffers, as the hook does.
	cmd.Env = append(os.Environ(), "ASAN_OPTIONS=detect_leaks=0:exitcode=66", "UBSAN_OPTIONS=print_stacktrace=1:exitcode=66")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("the hook hung: %v", ctx.Err())
	}
	if msg := stderr.String(); strings.Contains(msg, "Sanitizer") || strings.Contains(msg, "runtime error") {
		return nil, fmt.Errorf("sanitizer:\n%s", msg)
	}
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
		return nil, fmt.Errorf("the hook: %v\n%s", err, stderr.String())
	}
	var out []parsed
	p := parsed{}
	for _, f := range bytes.Split(stdout.Bytes(), []byte{0}) {
		if name, value, ok := strings.Cut(string(f), "="); ok {
			p[name] = value
		} else if string(f) == "end" {
			out, p = append(out, p), parsed{}
		}
	}
	return out, nil
}

// show quotes an input, shortened.
func show(b []byte) string {
	if len(b) > 300 {
		return fmt.Sprintf("%q... (%d bytes)", b[:300], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// want is what encoding/json reads from d as runc's specs.State and
// specs.Spec declare the members (exact names preferred, else any case;
// the last of duplicates), absent on an error or a missing member; rootfs
// is root.path on the bundle the hook read (its stand-in if none).
func want(d doc, got parsed) parsed {
	p := parsed{}
	var s struct {
		Bundle *string `json:"bundle"`
	}
	if json.Unmarshal(d.state, &s) == nil && s.Bundle != nil {
		p["bundle"] = *s.Bundle
	}
	var c struct {
		Root *struct {
			Path *string `json:"path"`
		} `json:"root"`
	}
	if json.Unmarshal(d.config, &c) == nil && c.Root != nil && c.Root.Path != nil {
		path := *c.Root.Path
		p["root.path"], p["rootfs"] = path, path
		if !strings.HasPrefix(path, "/") {
			bundle, ok := got["bundle"]
			if !ok {
				bundle = "/bundle"
			}
			p["rootfs"] = bundle + "/" + path
		}
	}
	return p
}

// check compares what the hook extracted with what encoding/json reads:
// each value the hook took must be that, and for a valid doc (mustRead)
// every value must be there. It says whether they agree.
func check(t testing.TB, d doc, got parsed, mustRead bool) bool {
	t.Helper()
	w, ok := want(d, got), true
	for _, k := range []string{"bundle", "root.path", "rootfs"} {
		g, gok := got[k]
		v, wok := w[k]
		switch {
		case gok && (!wok || g != v):
			t.Errorf("%s: the hook read %q, encoding/json %q (present: %v)\nstate %s\nconfig %s", k, g, v, wok, show(d.state), show(d.config))
			ok = false
		case mustRead && !gok:
			t.Errorf("%s: the hook refused a valid doc (encoding/json reads %q)\nstate %s\nconfig %s", k, v, show(d.state), show(d.config))
			ok = false
		}
	}
	return ok
}

// Valid states and configs, as runtimes write them, are read as
// encoding/json reads them.
func TestTheHookReadsValidStatesAndConfigsAsEncodingJSON(t *testing.T) {
	docs := valid(t)
	for i, got := range parse(t, docs) {
		check(t, docs[i], got, true)
	}
}

// Mutations of valid docs never crash or overrun the hook, and what it
// reads from them is what encoding/json reads, or nothing.
func TestTheHookReadsMutatedDocsSafelyAndRightOrNotAtAll(t *testing.T) {
	var states, configs [][]byte
	for _, d := range valid(t)[:4] {
		states = append(states, mutations(d.state)...)
		configs = append(configs, mutations(d.config)...)
	}
	states, configs = append(states, hostile("bundle")...), append(configs, hostileConfigs()...)
	docs := make([]doc, max(len(states), len(configs)))
	for i := range docs {
		docs[i] = doc{states[i%len(states)], configs[i%len(configs)]}
	}
	bad := 0
	for i, got := range parse(t, docs) {
		if !check(t, docs[i], got, false) {
			if bad++; bad == 20 {
				t.Fatal("and more")
			}
		}
	}
	t.Logf("%d docs", len(docs))
}

// FuzzHookJSON runs the hook's reader on a fuzzer's states and configs,
// seeded with the valid docs.
func FuzzHookJSON(f *testing.F) {
	for _, d := range valid(f) {
		f.Add(d.state, d.config)
	}
	f.Fuzz(func(t *testing.T, state, config []byte) {
		d := doc{state, config}
		check(t, d, parse(t, []doc{d})[0], false)
	})
}
