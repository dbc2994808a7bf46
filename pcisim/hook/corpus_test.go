//go:build integration

package hook

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// valid is the corpus: states as runc writes them (specs.State, its own
// encoding/json) and configs as containerd writes them (specs.Spec), with a
// pod's hostile annotations and env, an indented config as other runtimes
// write, and the hook tests' own; the first four pairs are the ones
// mutated.
func valid(t testing.TB) []doc {
	t.Helper()
	bundle := "/run/containerd/io.containerd.runtime.v2.task/k8s.io/4f1c0e6d2b"
	state := specs.State{
		Version: "1.2.0", ID: "4f1c0e6d2b", Status: specs.StateCreating, Pid: 4242, Bundle: bundle,
		Annotations: map[string]string{"bundle": "/evil", "root": `{"path":"/evil"}`, "io.kubernetes.cri.container-type": "container"},
	}
	spec := specs.Spec{
		Version: "1.2.0",
		Process: &specs.Process{
			Args: []string{"sh", "-c", `echo "}{[\"bundle\":"`},
			Env:  []string{"PATH=/usr/bin", `Q="}{[\`, `R=\"root":{"path":"/evil"}`, "U=é\u2028<&>"},
			Cwd:  "/",
		},
		Root:        &specs.Root{Path: "rootfs", Readonly: true},
		Hostname:    "pod",
		Mounts:      []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}}},
		Hooks:       &specs.Hooks{CreateContainer: []specs.Hook{{Path: "/opt/nvmock/bin/nvmock-hook", Args: []string{"nvmock-hook", "pcisim", "/var/lib/nvmock/tree"}}}},
		Annotations: map[string]string{"root": `{"path":"/evil"}`, "bundle": "/evil", "io.kubernetes.cri.sandbox-id": "9d2e"},
		Linux:       &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.MountNamespace}, {Type: specs.PIDNamespace, Path: "/proc/1/ns/pid"}}},
	}
	abs := spec
	abs.Root = &specs.Root{Path: bundle + "/rootfs"}
	odd := spec
	odd.Root = &specs.Root{Path: `root fs/é/"q"\<&>`}
	var docs []doc
	for _, p := range []struct {
		s specs.State
		c specs.Spec
	}{{state, spec}, {specs.State{Version: "1.2.0", ID: "c", Status: specs.StateCreating, Bundle: "/b"}, abs}, {state, odd}} {
		docs = append(docs, doc{marshal(t, p.s), marshal(t, p.c)})
	}
	indented, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	// The hook tests' own, as their shell scripts write the state.
	for _, d := range []doc{
		{[]byte(`{"ociVersion":"1.2.0","id":"c","status":"creating","pid":7,"bundle":"/tmp/b"}`), []byte(plainConfig)},
		{state: marshal(t, state), config: indented},
		{[]byte(`{"ociVersion":"1.2.0","id":"c","status":"creating","annotations":{"bundle":"/evil"},"pid":1,"bundle":"/tmp/d"}`),
			[]byte(`{"ociVersion":"1.2.0","process":{"env":["Q=\"}{[\\","R=\\\"root\":"]},"annotations":{"root":{"path":"/evil"}},"root":{"path":"rootfs"},"hooks":{}}`)},
		{[]byte(` {"bundle" : "/b"} ` + "\n"), []byte(`{"root":{"path":"rootfs"}}`)},
		{[]byte(`{"bundle":"\/b\u002fx"}`), []byte(`{"root":{"readonly":false,"path":"a\\b"}}`)},
	} {
		docs = append(docs, d)
	}
	return docs
}

func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mutations are deterministic changes of b: cut at every offset, and at
// every offset of a short doc (every 7th of a long one) a byte replaced by
// JSON's punctuation and other bytes, a quote or backslash put in before
// it, or the byte removed.
func mutations(b []byte) [][]byte {
	var out [][]byte
	for i := 0; i <= len(b); i++ {
		out = append(out, b[:i:i])
	}
	step := 1
	if len(b) > 300 {
		step = 7
	}
	for i := 0; i < len(b); i += step {
		for _, c := range []byte("\"\\{}[:,\x00\xffu") {
			m := append([]byte(nil), b...)
			m[i] = c
			out = append(out, m)
		}
		out = append(out, join(b[:i], []byte(`"`), b[i:]), join(b[:i], []byte(`\`), b[i:]), join(b[:i], b[i+1:]))
	}
	return out
}

func join(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// values are strings to put in a wanted member: escapes valid and not,
// surrogates, control characters, invalid UTF-8, NULs, and lengths about
// the hook's PATH_MAX buffers and beyond.
func values() []string {
	v := []string{
		`"/b"`, `"\u0041"`, `"\u00e9"`, `"\ud83d\ude00"`, `"\ud800"`, `"\udc00x"`, `"\u12"`, `"\uZZZZ"`, `"\u0000"`,
		`"\u002F"`, `"\U0041"`, `"\x"`, `"\n\t\b\f\r"`, "\"a\nb\"", "\"a\x01\"", "\"\xff\xfe\"", "\"\xc0\xaf\"", "\"\xe9\"",
		"\"/b\x00/evil\"", `"/b\"`, `"\\"`, `"\"`, `"`, `""`, `null`, `1`, `true`, `{}`, `[]`, `["/b"]`, `{"path":"/b"}`,
	}
	for _, n := range []int{4094, 4095, 4096, 4097, 1 << 20} {
		v = append(v, `"/`+strings.Repeat("a", n-1)+`"`, `"`+strings.Repeat(`\u0061`, n)+`"`, `"`+strings.Repeat(`\\`, n)+`"`)
	}
	return v
}

// hostile are documents around a wanted key: its values, keys that
// encoding/json takes for it (other case, escapes), duplicates, the key
// inside strings and nested objects, nesting deeper than encoding/json's
// limit, broken syntax, NULs and what is not an object.
func hostile(key string) [][]byte {
	var out []string
	for _, v := range values() {
		out = append(out, `{"`+key+`":`+v+`}`, `{"a":`+v+`,"`+key+`":"/b"}`)
	}
	up := strings.ToUpper(key[:1]) + key[1:]
	esc := fmt.Sprintf(`\u%04x`, key[0]) + key[1:]
	nest := func(n int, open, close string) string { return strings.Repeat(open, n) + strings.Repeat(close, n) }
	out = append(out,
		`{"`+up+`":"/evil"}`, `{"`+strings.ToUpper(key)+`":"/evil"}`, `{"`+esc+`":"/evil"}`,
		`{"`+key+`":"/b","`+up+`":"/evil"}`, `{"`+up+`":"/evil","`+key+`":"/b"}`, `{"`+esc+`":"/evil","`+key+`":"/b"}`,
		`{"`+key+`":"/b","`+key+`":"/evil"}`, `{"`+key+`":"/b","`+esc+`":"/evil"}`,
		`{"x":"\"`+key+`\":\"/evil\"","`+key+`":"/b"}`, `{"x":{"`+key+`":"/evil"},"`+key+`":"/b"}`,
		`{"`+key+`":"/b","x":{"`+key+`":"/evil"}}`, `{"x":["`+key+`","/evil"],"`+key+`":"/b"}`,
		`{"x":"`+key+`":"/evil"}`, `{"x":[},"`+key+`":"/evil"}`, `{"x":{],"`+key+`":"/evil"}`, `{"x":[}],"`+key+`":"/evil"}`,
		`{"`+key+`" "/evil"}`, `{"`+key+`":"/b",}`, `{,"`+key+`":"/b"}`, `{"`+key+`":"/b"`, `{"`+key+`":"/b"}}`,
		`{"`+key+`":"/b"}x`, `{"`+key+`":"/b"}{"`+key+`":"/evil"}`, `{"`+key+`":"/b"}[`, "{\"\x00\":1,\""+key+"\":\"/b\"}",
		`{"x":01,"`+key+`":"/b"}`, `{"x":tru,"`+key+`":"/b"}`, `{"x":-,"`+key+`":"/b"}`, `{"x":1.,"`+key+`":"/b"}`,
		`{"x":1e,"`+key+`":"/b"}`, `{"x":nul,"`+key+`":"/b"}`, `{"x":+1,"`+key+`":"/b"}`, `{"x":.5,"`+key+`":"/b"}`,
		`{"x":-0.5e+7,"y":[true,false,null,{}],"`+key+`":"/b"}`,
		"{\"x\":1,\x0b\""+key+"\":\"/b\"}", "{\f\""+key+"\":\"/b\"}", "{\""+key+"\":\"/b\"}\x00", "{\""+key+"\":\"/b\"}\x00{\"x\":[",
		"{\"x\":\"\x00\",\""+key+"\":\"/b\"}", "\xef\xbb\xbf{\""+key+"\":\"/b\"}",
		`{"x":`+nest(10001, "[", "]")+`,"`+key+`":"/b"}`, `{"x":`+nest(9990, "[", "]")+`,"`+key+`":"/b"}`,
		`{"x":`+strings.Repeat(`{"y":`, 20000)+`1`+strings.Repeat("}", 20000)+`,"`+key+`":"/b"}`,
		`{"x":`+strings.Repeat("[", 1<<20)+`,"`+key+`":"/b"}`, strings.Repeat("{", 1<<20), strings.Repeat("}", 1<<10),
		`["`+key+`","/b"]`, `"`+key+`"`, `null`, `1`, ``, `   `, `{`, `}`, `{"`+key+`"`, `{"`+key+`":`, `{"`+key+`":"`, `{"`+key+`":"\`,
	)
	b := make([][]byte, len(out))
	for i, s := range out {
		b[i] = []byte(s)
	}
	return b
}

// hostileConfigs are hostile's around root, and around path inside it.
func hostileConfigs() [][]byte {
	out := hostile("root")
	for _, inner := range hostile("path") {
		out = append(out, join([]byte(`{"root":`), inner, []byte(`}`)))
	}
	return append(out,
		[]byte(`{"root":{"path":"rootfs"},"Root":{"readonly":true}}`), []byte(`{"root":{"x":{"path":"/evil"},"path":"rootfs"}}`),
		[]byte(`{"root":{"path":"rootfs"},"root":{"readonly":true}}`), []byte(`{"root":{"PATH":"/evil","path":"rootfs"}}`),
		[]byte(`{"annotations":{"root":{"path":"/evil"}},"root":{"path":"rootfs"}}`), []byte(`{"root":["path","/evil"]}`),
		[]byte(`{"root":"{\"path\":\"/evil\"}"}`),
	)
}
