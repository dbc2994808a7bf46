package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// ctlNode is a state file with its snapshot beside it, as nvmock exec lays
// them out.
func ctlNode(t *testing.T, gpus string) string {
	t.Helper()
	dir := t.TempDir()
	if err := run([]string{"profile", "compile", "a100", "--gpus", gpus, "--seed", "n1", "-o", filepath.Join(dir, "snapshot")}); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	n := 0
	for _, c := range gpus {
		n = n*10 + int(c-'0')
	}
	if err := live.Create(state, n, 1); err != nil {
		t.Fatal(err)
	}
	return state
}

func ctlStatusJSON(t *testing.T, state string) Status {
	t.Helper()
	f, err := live.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b bytes.Buffer
	if err := ctlStatus(f, []string{"--json"}, &b); err != nil {
		t.Fatal(err)
	}
	var s Status
	if err := json.Unmarshal(b.Bytes(), &s); err != nil {
		t.Fatalf("status --json: %v\n%s", err, b.String())
	}
	return s
}

func TestCtlChangesTheStateAsAsked(t *testing.T) {
	state := ctlNode(t, "4")
	for _, args := range [][]string{
		{"load", "0-1", "80", "--jitter", "5"},
		{"fault", "2", "thermal"},
		{"fault", "3", "lost", "--after-calls", "100"},
		{"fault", "3", "xid", "--xid", "43", "--probability", "0.5"},
		{"xid", "1", "48"},
		{"proc", "add", "0", "1", "--memory", "20GiB", "--name", "train"},
	} {
		if err := run(append([]string{"ctl", "--state", state}, args...)); err != nil {
			t.Fatalf("ctl %v: %v", args, err)
		}
	}
	s := ctlStatusJSON(t, state)
	want := []string{
		"0 model=true load=80 jitter=5 faults=[]",
		"1 model=true load=80 jitter=5 faults=[ecc_uncorrectable/48]",
		"2 model=false load=0 jitter=0 faults=[thermal/0]",
		"3 model=false load=0 jitter=0 faults=[lost/79 xid/43]",
	}
	for i, g := range s.GPUs {
		var fs []string
		for _, f := range g.Faults {
			fs = append(fs, f.Kind+"/"+itoa(int(f.XID)))
		}
		got := itoa(g.Index) + " model=" + map[bool]string{true: "true", false: "false"}[g.Model] + " load=" + itoa(int(g.Load[0])) +
			" jitter=" + itoa(int(g.Jitter)) + " faults=[" + strings.Join(fs, " ") + "]"
		if got != want[i] {
			t.Errorf("GPU %d: %s, want %s", i, got, want[i])
		}
	}
	if f := s.GPUs[3].Faults; len(f) != 2 || f[0].Trigger != "after 100 calls" || f[1].Trigger != "probability 0.5" {
		t.Errorf("GPU 3's triggers: %+v", f)
	}
	if len(s.Processes) != 1 || s.Processes[0].UsedBytes != 20<<30 || s.Processes[0].Name != "train" {
		t.Errorf("processes %+v, want pid 1 with 20 GiB named train", s.Processes)
	}
	// Clear one kind, then everything with the load.
	if err := run([]string{"ctl", "--state", state, "clear", "3", "xid"}); err != nil {
		t.Fatal(err)
	}
	if f := ctlStatusJSON(t, state).GPUs[3].Faults; len(f) != 1 || f[0].Kind != "lost" {
		t.Errorf("after clearing xid on GPU 3: %+v", f)
	}
	// Clearing what is not there succeeds, and says so (review).
	var err error
	msg := captured(t, &os.Stderr, func() { err = run([]string{"ctl", "--state", state, "clear", "3", "xid"}) })
	if err != nil || msg != "nvmock ctl clear: no xid fault on GPUs 3, so none cleared (nvmock ctl status lists their faults)\n" {
		t.Errorf("clearing xid again: %v, said %q", err, msg)
	}
	// A kind with --load ends the load and that kind only.
	for _, args := range [][]string{{"fault", "1", "thermal"}, {"clear", "1", "thermal", "--load"}} {
		if err := run(append([]string{"ctl", "--state", state}, args...)); err != nil {
			t.Fatal(err)
		}
	}
	if g := ctlStatusJSON(t, state).GPUs[1]; g.Load != [4]uint32{} || len(g.Faults) != 1 || g.Faults[0].Kind != "ecc_uncorrectable" {
		t.Errorf("after clear 1 thermal --load: %+v, want idle with its ECC fault", g)
	}
	if err := run([]string{"ctl", "--state", state, "clear", "all", "--load"}); err != nil {
		t.Fatal(err)
	}
	// Loaded GPUs go idle from where they stand (their counters carry
	// on); the others stay on static readings.
	for _, g := range ctlStatusJSON(t, state).GPUs {
		if g.Load != [4]uint32{} || g.Jitter != 0 || len(g.Faults) != 0 {
			t.Errorf("after clear all --load: %+v", g)
		}
	}
	if err := run([]string{"ctl", "--state", state, "proc", "rm", "1"}); err != nil {
		t.Fatal(err)
	}
	if p := ctlStatusJSON(t, state).Processes; len(p) != 0 {
		t.Errorf("after proc rm: %+v", p)
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func TestCtlRejectsBadArgumentsWithOneLine(t *testing.T) {
	state := ctlNode(t, "8")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"an unknown GPU", []string{"load", "8", "50"}, "ctl load: GPU 8: the node has GPUs 0 to 7"},
		{"a GPU that is not a number", []string{"fault", "x", "lost"}, `ctl fault: GPU "x": not an index, list or range`},
		{"a bad XID", []string{"xid", "0", "999"}, `ctl xid: XID "999": not an XID (1 to 255)`},
		{"XID 0", []string{"xid", "0", "0"}, `ctl xid: XID "0": not an XID`},
		{"a probability above 1", []string{"fault", "0", "lost", "--probability", "1.5"}, `ctl fault: --probability "1.5": a probability from 0 to 1`},
		{"a negative probability", []string{"fault", "0", "lost", "--probability", "-0.1"}, `--probability "-0.1": a probability from 0 to 1`},
		{"two triggers", []string{"fault", "0", "lost", "--in", "5s", "--after-calls", "3"}, "give one trigger"},
		// Review: an empty trigger (an unset variable) fired the fault at once, node-wide.
		{"an empty call trigger", []string{"fault", "0", "lost", "--after-calls", ""}, "ctl fault: --after-calls is empty; give a value or leave the flag out"},
		{"an empty delay", []string{"fault", "0", "lost", "--in", ""}, "ctl fault: --in is empty"},
		{"an empty probability", []string{"fault", "0", "lost", "--probability", ""}, "ctl fault: --probability is empty"},
		{"an empty time", []string{"fault", "0", "lost", "--at", ""}, "ctl fault: --at is empty"},
		{"a time before 1970, which never came", []string{"fault", "0", "lost", "--at", "1960-01-01T00:00:00Z"}, `--at "1960-01-01T00:00:00Z": a time from 1970 to 2262`},
		{"a delay past 2262", []string{"fault", "0", "lost", "--in", "2500000h"}, `--in "2500000h": the time would pass 2262`},
		{"an unknown kind", []string{"fault", "0", "melted"}, `kind "melted": one of lost, ecc_uncorrectable`},
		{"an xid fault without its number", []string{"fault", "0", "xid"}, "a fault of kind xid needs --xid N"},
		{"a GPU named twice", []string{"fault", "0,0", "thermal"}, `GPU 0 is named twice in "0,0"`},
		{"no ECC errors, not the default", []string{"fault", "0", "ecc_correctable", "--count", "0"}, "--count 0: give 1 to 4294967295, or leave it out"},
		{"a count that would wrap", []string{"fault", "0", "ecc_correctable", "--count", "4294967296"}, "--count 4294967296: give 1 to"},
		{"a load above 100", []string{"load", "0", "120"}, `load "120": a whole percentage from 0 to 100`},
		{"a load between two percentages", []string{"load", "0", "50.5"}, `load "50.5": a whole percentage from 0 to 100`},
		{"a load in exponent form", []string{"load", "0", "1e2"}, `load "1e2": a whole percentage from 0 to 100`},
		{"a negative load", []string{"load", "all", "-5"}, "ctl load: argument 2, -5: no GPU, percentage, pid or count is negative"},
		{"pid 0, which would be every process", []string{"fault", "0", "lost", "--pid", "0"}, "--pid 0: not a process id (1 to 4194304)"},
		{"a pid past 32 bits", []string{"fault", "0", "lost", "--pid", "4294967296"}, "--pid 4294967296: not a process id"},
		{"a negative flag value", []string{"fault", "0", "ecc_correctable", "--count", "-1"}, `ctl fault: --count "-1": not a whole number of 0 or more`},
		{"a link on a kind without one", []string{"fault", "0", "lost", "--link", "3"}, "--link is for nvlink_down only"},
		{"an XID on a slowdown", []string{"fault", "0", "thermal", "--xid", "13"}, "--xid: a slowdown reports no XID"},
		{"a process name over two lines", []string{"proc", "add", "0", "1", "--name", "a\nb"}, `--name "a\nb": has a control character`},
		{"a process name longer than the node keeps", []string{"proc", "add", "0", "1", "--name", strings.Repeat("y", 64)}, "--name: 64 bytes; the node keeps at most 63"},
		{"a count on a kind without one", []string{"fault", "1", "thermal", "--count", "7"}, "--count is for ecc_uncorrectable and ecc_correctable only"},
		{"a probability that never fires", []string{"fault", "0", "lost", "--probability", "0"}, `--probability "0": never fires`},
		{"a probability below the draw", []string{"fault", "0", "lost", "--probability", "1e-12"}, `--probability "1e-12": never fires; the least is 1/2^32`},
		{"xid 0 given", []string{"fault", "0", "lost", "--xid", "0"}, "--xid 0: not an XID"},
		{"an unknown flag of xid", []string{"xid", "2", "79", "--bogus"}, "ctl xid: unknown flag --bogus (see nvmock ctl help)"},
		{"an unknown flag of status", []string{"status", "--bogus"}, "unknown flag --bogus (see nvmock ctl help)"},
		// Review: the last of two silently won.
		{"a flag given twice", []string{"load", "all", "50", "--jitter", "5", "--jitter", "0"}, "ctl load: --jitter is given twice; give it once"},
		{"a count given twice", []string{"fault", "3", "ecc_uncorrectable", "--count", "5", "--count=1"}, "--count is given twice"},
		// Review: an empty value was the default's, a second lost took a slot.
		{"an empty memory share", []string{"load", "0", "50", "--memory", ""}, "--memory is empty"},
		{"an empty process name", []string{"proc", "add", "0", "1", "--name", ""}, "--name is empty"},
		{"status with an argument", []string{"status", "extra"}, `"extra": status takes no argument`},
		{"a bad memory size", []string{"proc", "add", "0", "5", "--memory", "lots"}, `--memory: "lots" is not a quantity`},
		{"an unknown command", []string{"melt"}, `unknown command "melt"`},
		{"an unregistered pid", []string{"proc", "rm", "77"}, "pid 77 is not registered"},
		{"a GPU the node lacks", []string{"proc", "rm", "77", "--gpu", "9"}, "--gpu 9: the node has GPUs 0 to 7"},
		{"advancing a running clock", []string{"clock", "advance", "1s"}, "the clock runs; freeze it first"},
		{"ib on a node without InfiniBand", []string{"ib", "down", "mlx5_0"}, "ctl ib: the node of " + state + " has no InfiniBand"},
		{"ib listing on a node without InfiniBand", []string{"ib"}, "has no InfiniBand"},
		{"a link the GPU does not have", []string{"fault", "0", "nvlink_down", "--link", "40"}, "--link: 40 is not a link of GPU 0, which has NVLinks 0 to 11"},
		{"a pid that is not running", []string{"proc", "add", "0", strconv.Itoa(deadPID(t))}, "no such process here"},
		{"more memory than the GPU has", []string{"proc", "add", "0", strconv.Itoa(os.Getpid()), "--memory", "100GiB"}, "--memory 100GiB: GPU 0 has 40442 MiB for processes, 0 MiB of it in use"},
	} {
		err := run(append([]string{"ctl", "--state", state}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", c.name, err, c.want)
		}
	}
	// Nothing of that reached the state.
	for _, g := range ctlStatusJSON(t, state).GPUs {
		if g.Model || len(g.Faults) != 0 {
			t.Errorf("a rejected command changed GPU %d: %+v", g.Index, g)
		}
	}
	missing := filepath.Join(t.TempDir(), "none")
	if err := run([]string{"ctl", "--state", missing, "status"}); err == nil || !strings.Contains(err.Error(), missing+": no such file; install a node first") {
		t.Errorf("a missing state: %v", err)
	}
	t.Setenv("NVMOCK_STATE", "")
	os.Unsetenv("NVMOCK_STATE")
	live.ExecState, live.InstalledState = filepath.Join(t.TempDir(), "x"), filepath.Join(t.TempDir(), "y")
	if err := run([]string{"ctl", "status"}); err == nil || !strings.Contains(err.Error(), "no live state found") {
		t.Errorf("no state anywhere: %v", err)
	}
}

// deadPID is the pid of a process that has exited.
func deadPID(t *testing.T) int {
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

func TestCtlClockFreezesAndSteps(t *testing.T) {
	state := ctlNode(t, "1")
	for _, args := range [][]string{{"clock", "freeze", "2026-12-01T12:00:00Z"}, {"clock", "advance", "90s"}} {
		if err := run(append([]string{"ctl", "--state", state}, args...)); err != nil {
			t.Fatal(err)
		}
	}
	if s := ctlStatusJSON(t, state); s.Frozen == nil || s.Frozen.Format("15:04:05") != "12:01:30" {
		t.Errorf("frozen at %v, want 12:01:30", s.Frozen)
	}
	if err := run([]string{"ctl", "--state", state, "clock", "thaw"}); err != nil {
		t.Fatal(err)
	}
	if s := ctlStatusJSON(t, state); s.Frozen != nil {
		t.Errorf("still frozen at %v after thaw", s.Frozen)
	}
	// A fault that fired on an advanced clock stays fired when it thaws
	// (QA: the lost GPU came back, then was lost again at the real time).
	for _, args := range [][]string{{"clock", "freeze", "now"}, {"fault", "0", "lost", "--in", "10s"}, {"clock", "advance", "20s"}, {"clock", "thaw"}} {
		if err := run(append([]string{"ctl", "--state", state}, args...)); err != nil {
			t.Fatal(err)
		}
	}
	f := ctlStatusJSON(t, state).GPUs[0].Faults
	if len(f) != 1 {
		t.Fatalf("faults after thaw: %+v", f)
	}
	if at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(f[0].Trigger, "at ")); err != nil || at.After(time.Now()) {
		t.Errorf("after thaw the fault fires %q, want a time that has passed", f[0].Trigger)
	}
	// The clock is an int64 of nanoseconds since 1970 (review: a time
	// before 1970 wrapped to near 2^64, where GPM's sampling loop spun).
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"freeze", "1969-12-31T23:59:59.9Z"}, "a time from 1970 to 2262"},
		{[]string{"freeze", "2300-01-01T00:00:00Z"}, "a time from 1970 to 2262"},
		{[]string{"freeze", "2262-04-11T00:00:00Z"}, ""},
		{[]string{"advance", "200h"}, "the clock would pass 2262"},
	} {
		err := run(append([]string{"ctl", "--state", state, "clock"}, c.args...))
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("clock %v: %v, want %q", c.args, err, c.want)
		}
	}
}

func TestCtlApplySetsAFileOrNothing(t *testing.T) {
	state := ctlNode(t, "4")
	dir := t.TempDir()
	good := filepath.Join(dir, "live.yaml")
	os.WriteFile(good, []byte(`loads:
  - gpus: all
    percent: 30
    jitter: 5
faults:
  - gpus: "3"
    kind: ecc_uncorrectable
    in: 10m
  - gpus: 0-1
    kind: xid
    xid: 13
    probability: 0.001
`), 0o644)
	if err := run([]string{"ctl", "--state", state, "apply", good}); err != nil {
		t.Fatal(err)
	}
	s := ctlStatusJSON(t, state)
	for _, g := range s.GPUs {
		if !g.Model || g.Load[0] != 30 || g.Load[1] != 15 || g.Jitter != 5 {
			t.Errorf("GPU %d after apply: %+v", g.Index, g)
		}
	}
	if f := s.GPUs[3].Faults; len(f) != 1 || f[0].Kind != "ecc_uncorrectable" || !strings.HasPrefix(f[0].Trigger, "at ") {
		t.Errorf("GPU 3's faults: %+v", f)
	}
	if f := s.GPUs[1].Faults; len(f) != 1 || f[0].XID != 13 || f[0].Trigger != "probability 0.001" {
		t.Errorf("GPU 1's faults: %+v", f)
	}

	for _, c := range []struct{ yaml, want string }{
		{"loads:\n  - gpus: all\n    percent: 130\n", `loads[0].percent "130": a whole percentage from 0 to 100`},
		{"loads:\n  - gpus: 0-1\n    percent: 40\n  - gpus: 1\n    percent: 50\n", "loads[1].gpus: GPU 1 has a load already (loads[0])"},
		{"faults:\n  - gpus: \"9\"\n    kind: lost\n", "faults[0].gpus: GPU 9: the node has GPUs 0 to 3"},
		{"faults:\n  - gpus: all\n    kind: melted\n", `faults[0].kind: "melted" is not one of`},
		{"faults:\n  - gpus: all\n    kind: lost\n    probability: 2\n", `faults[0]: probability "2": a probability from 0 to 1`},
		{"faults:\n  - gpus: all\n    kind: lost\n    probability: 0.5\n    afterCalls: 3\n", "faults[0]: give one trigger: afterCalls, probability, at, in"},
		{"faults:\n  - gpus: all\n    kind: thermal\n    count: 7\n", "faults[0]: count is for ecc_uncorrectable and ecc_correctable only"},
		{"faults:\n  - gpus: all\n    kind: power_brake\n    xid: 13\n", "faults[0]: xid: a slowdown reports no XID"},
		{"fautls: []\n", `bad.yaml:1: unknown field "fautls"`},
		{"loads:\n  - gpus: all\n    percnt: 30\n", `bad.yaml:3: loads[0]: unknown field "percnt"`},
		{"loads:\n  - gpus: all\n    percent: high\n", `bad.yaml:2: loads[0]: percent: expected a number, got string`},
		{"faults:\n  - gpus: all\n    kind: ecc_correctable\n    count: -3\n", `faults[0]: count: expected a whole number of 0 or more, got number -3`},
		{"faults:\n  - gpus: all\n    kind: xid\n    xid: 5000000000\n", `faults[0]: xid: expected a whole number from 0 to 4294967295, got number 5000000000`},
		{"loads:\n  - gpus: \"0\"\n    percent: 5\n  - gpus: \"1\"\n    percent: [5]\n", `bad.yaml:4: loads[1]: percent: expected a number, got array`},
		{"faults:\n  - gpus: \"0\"\n    kind: nvlink_down\n    link: 12\n", "faults[0].link: 12 is not a link of GPU 0, which has NVLinks 0 to 11"},
		{"faults:\n  - gpus: \"0\"\n    kind: ecc_correctable\n    count: 0\n", "faults[0].count: 0 is out of range; give 1 to 4294967295"},
		{"loads:\n  - gpus: all\n    percent: 10\n---\nloads: []\n", "bad.yaml:5: a second YAML document"},
		{"loads:\n  - gpus: all\n    percent: .nan\n", "bad.yaml:3: loads[0].percent: not a number"},
		{"loads:\n  - gpus: all\n", "loads[0].percent: is required"},
		{"loads: []\nloads: []\n", `not valid YAML: unmarshal errors: line 2: mapping key "loads" already defined`},
		{"faults:\n  - gpus: \"0\"\n    kind: ecc_correctable\n    count: 99999999999999\n", "faults[0].count: 99999999999999 is out of range"},
		// Review: Go's type names, and values the user did not write.
		{"faults: [[1]]\n", `bad.yaml:1: faults[0]: expected an object, got array`},
		{"loads: [5]\n", `bad.yaml:1: loads[0]: expected an object, got number`},
		{"faults:\n  - kind: lost\n", "faults[0].gpus: is required (all, or GPUs such as 0,2-3)"},
		{"faults:\n  - gpus: all\n", "faults[0].kind: is required: lost, "},
		{"loads:\n  - percent: 5\n", "loads[0].gpus: is required"},
		{"faults:\n  - gpus: all\n    kind: xid\n", "faults[0].xid: kind xid needs its XID (1 to 255)"},
		{"loads:\n  - gpus: all\n    percent: 1e30\n", `loads[0].percent "1e+30": a whole percentage from 0 to 100`},
		// Review: an empty file, or one of comments, cleared the node.
		{"", "empty; to clear the loads and faults, give loads: [] and faults: []"},
		{"# nothing yet\n", "empty; to clear"},
	} {
		bad := filepath.Join(dir, "bad.yaml")
		os.WriteFile(bad, []byte(c.yaml), 0o644)
		fresh := ctlNode(t, "4")
		err := run([]string{"ctl", "--state", fresh, "apply", bad})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), bad) || strings.Contains(err.Error(), "\n") {
			t.Errorf("apply %q: %v, want one line naming %s and %q", c.yaml, err, bad, c.want)
		}
		for _, g := range ctlStatusJSON(t, fresh).GPUs {
			if g.Model || len(g.Faults) != 0 {
				t.Errorf("a rejected file changed GPU %d", g.Index)
			}
		}
	}
}

// The chart's values block, pasted as it is, applies too.
func TestCtlApplyTakesTheChartsLiveBlock(t *testing.T) {
	state := ctlNode(t, "2")
	file := filepath.Join(t.TempDir(), "values.yaml")
	os.WriteFile(file, []byte("live:\n  loads:\n    - gpus: all\n      percent: 40\n"), 0o644)
	if err := run([]string{"ctl", "--state", state, "apply", file}); err != nil {
		t.Fatal(err)
	}
	for _, g := range ctlStatusJSON(t, state).GPUs {
		if !g.Model || g.Load[0] != 40 {
			t.Errorf("GPU %d: %+v, want a load of 40%%", g.Index, g)
		}
	}
	// Anchors and merge keys, as YAML writers use them.
	os.WriteFile(file, []byte("faults:\n  - &f\n    gpus: \"0\"\n    kind: thermal\n  - <<: *f\n    gpus: \"1\"\n"), 0o644)
	if err := run([]string{"ctl", "--state", state, "apply", file}); err != nil {
		t.Fatal(err)
	}
	for _, g := range ctlStatusJSON(t, state).GPUs {
		if len(g.Faults) != 1 || g.Faults[0].Kind != "thermal" {
			t.Errorf("GPU %d after a merged entry: %+v", g.Index, g.Faults)
		}
	}
	// Empty values, which the chart renders as null, clear (review: every
	// pool's init container failed on them).
	for _, empty := range []string{"live:\n", "live: null\n", "null\n", "{}\n"} {
		os.WriteFile(file, []byte(empty), 0o644)
		if err := run([]string{"ctl", "--state", state, "apply", file}); err != nil {
			t.Errorf("apply %q: %v", empty, err)
		}
		for _, g := range ctlStatusJSON(t, state).GPUs {
			if g.Load != [4]uint32{} || len(g.Faults) != 0 {
				t.Errorf("apply %q left GPU %d: %+v", empty, g.Index, g)
			}
		}
	}
}

func TestCtlApplyTwiceGivesOneState(t *testing.T) {
	state := ctlNode(t, "2")
	spec := filepath.Join(t.TempDir(), "live.yaml")
	os.WriteFile(spec, []byte("faults:\n  - {gpus: all, kind: thermal}\n"), 0o644)
	for i := 0; i < 3; i++ {
		if err := run([]string{"ctl", "--state", state, "fault", "0", "lost"}); err != nil {
			t.Fatal(err)
		}
		if err := run([]string{"ctl", "--state", state, "apply", spec}); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	for _, g := range ctlStatusJSON(t, state).GPUs {
		if len(g.Faults) != 1 || g.Faults[0].Kind != "thermal" {
			t.Errorf("GPU %d after three applies: %+v, want the file's one thermal fault", g.Index, g.Faults)
		}
	}
}

func TestCtlCreateMakesAStateForTheSnapshotBesideIt(t *testing.T) {
	dir := t.TempDir()
	if err := run([]string{"profile", "compile", "h100", "--gpus", "3", "--seed", "n1", "-o", filepath.Join(dir, "snapshot")}); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	if err := run([]string{"ctl", "--state", state, "create"}); err != nil {
		t.Fatal(err)
	}
	if s := ctlStatusJSON(t, state); len(s.GPUs) != 3 {
		t.Errorf("%d GPUs, want the snapshot's 3", len(s.GPUs))
	}
	lone := filepath.Join(t.TempDir(), "state")
	if err := run([]string{"ctl", "--state", lone, "create"}); err == nil || !strings.Contains(err.Error(), "no snapshot beside it") || !strings.Contains(err.Error(), "--gpus") {
		t.Errorf("create without a snapshot: %v", err)
	}
	if err := run([]string{"ctl", "--state", lone, "create", "--gpus", "2"}); err != nil {
		t.Fatal(err)
	}
	// The snapshot is the node; a file that is not a state is the user's.
	if err := run([]string{"ctl", "--state", state, "create", "--gpus", "2"}); err == nil || !strings.Contains(err.Error(), "has 3 GPUs") {
		t.Errorf("create --gpus 2 beside a 3-GPU snapshot: %v", err)
	}
	if err := run([]string{"ctl", "--state", state, "create", "again"}); err == nil || !strings.Contains(err.Error(), `unexpected argument "again"`) {
		t.Errorf("create with an argument: %v", err)
	}
	// An installed node's state of another layout: a new file would leave
	// the overlay's link on the old one (QA).
	if err := os.Truncate(lone, 1000); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(lone, lone+".overlay"); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"ctl", "--state", lone, "create", "--gpus", "2"}); err == nil || !strings.Contains(err.Error(), "reinstall the node") {
		t.Errorf("create over an installed node's state of another layout: %v", err)
	}
	notes := filepath.Join(t.TempDir(), "notes")
	if err := os.WriteFile(notes, []byte("my notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"ctl", "--state", notes, "create", "--gpus", "1"}); err == nil || !strings.Contains(err.Error(), "is not nvmock's live state") {
		t.Errorf("create over a file of notes: %v", err)
	}
	if b, _ := os.ReadFile(notes); string(b) != "my notes\n" {
		t.Errorf("the notes now read %q", b)
	}
	if err := run([]string{"ctl", "status", "--state", state}); err == nil || !strings.Contains(err.Error(), "--state goes before the command") {
		t.Errorf("--state after the command: %v", err)
	}
}

// A state of another GPU count than the snapshot beside it is one the
// library leaves unread: ctl says so rather than change it for nothing
// (review: status listed 4 of 8 GPUs, a fault on GPU 1 took).
func TestCtlRefusesAStateTheLibraryLeavesUnread(t *testing.T) {
	state := ctlNode(t, "8")
	if err := live.Create(state, 4, 1); err != nil {
		t.Fatal(err)
	}
	want := "ctl: state " + state + ": made for 4 GPUs, the snapshot " + filepath.Join(filepath.Dir(state), "snapshot") + " has 8, so the library leaves it unread; make it again (nvmock ctl create) or reinstall the node"
	for _, args := range [][]string{{"status"}, {"fault", "1", "lost"}, {"load", "0", "30"}} {
		if err := run(append([]string{"ctl", "--state", state}, args...)); err == nil || err.Error() != want {
			t.Errorf("ctl %v on a 4-GPU state beside an 8-GPU snapshot: %v\nwant %s", args, err, want)
		}
	}
	if err := run([]string{"ctl", "--state", state, "create"}); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"ctl", "--state", state, "fault", "1", "lost"}); err != nil {
		t.Errorf("after create: %v", err)
	}
}

// ctl mig partitions the GPUs as an install layout does, and refuses one
// that does not fit without changing anything.
func TestCtlMIGPartitionsTheGPUs(t *testing.T) {
	state := ctlNode(t, "2")
	if err := run([]string{"ctl", "--state", state, "mig", "0=all-balanced;1=7g.40gb"}); err != nil {
		t.Fatal(err)
	}
	f, err := live.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	devs, err := live.Snapshot(state)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Read()
	count := func(gpu int) []string {
		var out []string
		for _, m := range s.MIGDevices(gpu, &devs[gpu]) {
			out = append(out, live.MIGNames(&devs[gpu])[m.Row])
		}
		return out
	}
	if got := strings.Join(count(0), ","); got != "3g.20gb,2g.10gb,1g.5gb,1g.5gb" {
		t.Errorf("GPU 0: %s", got)
	}
	if got := strings.Join(count(1), ","); got != "7g.40gb" {
		t.Errorf("GPU 1: %s", got)
	}
	// ctl status shows them (QA: it showed no MIG at all).
	if m := ctlStatusJSON(t, state).GPUs[1].MIG; m == nil || !m.Current || len(m.Instances) != 1 || m.Instances[0].Profile != "7g.40gb" ||
		len(m.Instances[0].CIs) != 1 || m.Instances[0].CIs[0].Slices != 7 {
		t.Errorf("ctl status's MIG of GPU 1: %+v, want one 7g.40gb with its 7-slice compute instance", m)
	}
	var b bytes.Buffer
	if err := ctlStatus(f, nil, &b); err != nil || !strings.Contains(b.String(), "1    Enabled; GI 0 7g.40gb@0 (0:7c@0)") {
		t.Errorf("ctl status: %v\n%s\nwant GPU 1's 7g.40gb", err, b.String())
	}
	gen := s.Header.Generation
	err = run([]string{"ctl", "--state", state, "mig", "1=4g.20gb,3g.20gb,1g.5gb"})
	if err == nil || !strings.Contains(err.Error(), "GPU 1: 4g.20gb, 3g.20gb, 1g.5gb do not fit: no room for 1g.5gb") {
		t.Errorf("a layout that does not fit: %v", err)
	}
	if f.Read().Header.Generation != gen {
		t.Error("a refused layout changed the state")
	}
}

// A process registered on a MIG device names its instances; one on an
// instance that is not there is refused, and a layout does not take away
// an instance a process runs on.
func TestCtlRegistersAProcessOnAMIGDevice(t *testing.T) {
	state := ctlNode(t, "2")
	ctl := func(args ...string) error { return run(append([]string{"ctl", "--state", state}, args...)) }
	if err := ctl("mig", "0=all-balanced"); err != nil {
		t.Fatal(err)
	}
	devs, err := live.Snapshot(state)
	if err != nil {
		t.Fatal(err)
	}
	f, err := live.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	migs := f.Read().MIGDevices(0, &devs[0])
	if len(migs) != 4 || migs[0].CI != 0 {
		t.Fatalf("all-balanced made %+v", migs)
	}
	gi := strconv.Itoa(migs[0].GI)
	if err := ctl("proc", "add", "0", "1", "--gi", gi, "--memory", "1GiB"); err != nil {
		t.Fatal(err)
	}
	p := ctlStatusJSON(t, state).Processes
	if len(p) != 1 || p[0].MIG == nil || *p[0].MIG != (live.MIGRef{GI: migs[0].GI, CI: 0}) || p[0].UsedBytes != 1<<30 {
		t.Fatalf("processes %+v, want pid 1 on GPU instance %s, compute instance 0", p, gi)
	}
	self := strconv.Itoa(os.Getpid())
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"proc", "add", "0", self, "--gi", gi, "--memory", "41GiB"}, "--memory 41GiB: GPU 0's GPU instance " + gi + " has "},
		{[]string{"proc", "add", "0", self, "--gi", "14"}, "ctl proc: GPU 0 has no GPU instance 14 (nvidia-smi mig -lgi lists them)"},
		{[]string{"proc", "add", "0", self, "--gi", "15"}, "GPU 0 has no GPU instance 15"},
		{[]string{"proc", "add", "0", self, "--gi", gi, "--ci", "3"}, "GPU 0: GPU instance " + gi + " has no compute instance 3"},
		{[]string{"proc", "add", "0", self, "--gi", gi, "--ci", "8"}, "has no compute instance 8"},
		{[]string{"proc", "add", "0", self, "--gi", gi, "--ci", "-5"}, "--ci -5: not a compute instance id"},
		{[]string{"proc", "add", "1", self, "--gi", gi}, "GPU 1 is not in MIG mode, so it has no GPU instance " + gi},
		{[]string{"proc", "add", "0", self, "--ci", "1"}, "--ci needs --gi"},
		{[]string{"proc", "add", "0", self}, "GPU 0 is in MIG mode: a process runs on one of its MIG devices"},
		{[]string{"mig", "0=all-1g.5gb"}, "GPU 0: process 1 runs on its MIG device " + gi + "/0 (nvmock ctl proc rm 1 --gpu 0)"},
	} {
		if err := ctl(c.args...); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ctl %v: %v, want one line with %q", c.args, err, c.want)
		}
	}
	// The layout the GPU has already is done, busy or not (mig-parted
	// reapplies its config so).
	if err := ctl("mig", "0=all-balanced"); err != nil {
		t.Errorf("ctl mig 0=all-balanced over itself, a process on a MIG device: %v", err)
	}
	if p := ctlStatusJSON(t, state).Processes; len(p) != 1 {
		t.Errorf("processes after the same layout again: %+v", p)
	}
	// A whole-GPU process keeps its GPU out of MIG mode, as it keeps the
	// library's mode change pending.
	if err := ctl("proc", "add", "1", "1", "--memory", "1GiB"); err != nil {
		t.Fatal(err)
	}
	want := "GPU 1: process 1 runs on it, so MIG mode cannot be turned on (nvmock ctl proc rm 1 --gpu 1)"
	if err := ctl("mig", "1=7g.40gb"); err == nil || !strings.HasSuffix(err.Error(), ": "+want) {
		t.Errorf("a layout over a busy GPU: %v, want %q", err, want)
	}
	if err := ctl("proc", "rm", "1"); err != nil {
		t.Fatal(err)
	}
	// A process that has exited holds nothing, as the library sees it.
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	if err := ctl("proc", "add", "0", strconv.Itoa(sleep.Process.Pid), "--gi", gi); err != nil {
		t.Fatal(err)
	}
	sleep.Process.Kill()
	sleep.Wait()
	if err := ctl("mig", "0=all-1g.5gb"); err != nil {
		t.Errorf("the layout once the processes are gone: %v", err)
	}
	if p := ctlStatusJSON(t, state).Processes; len(p) != 0 {
		t.Errorf("the exited process is still registered: %+v", p)
	}
}

// ibNode renders an h100 node named n1, with InfiniBand, and returns its
// live state's path.
func ibNode(t *testing.T) string {
	t.Helper()
	o := hostprep.Options{Profile: testenv.Profile(t, "h100", 8), NodeName: "n1", Assets: testenv.FakeDriverAssets(t), PlainDevFiles: true}
	ov, err := hostprep.Render(filepath.Join(t.TempDir(), "ov"), o)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(ov.Dir, hostprep.StatePath)
}

// ctl ib's own mistakes are refused before anything is written; the
// fabric's (an Ethernet port) by the model.
func TestCtlIBRejectsBadArgumentsWithOneLine(t *testing.T) {
	state := ibNode(t)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"an unknown command", []string{"ib", "melt"}, `ctl ib: unknown command "melt"; use down HCA, up HCA`},
		{"down without an HCA", []string{"ib", "down"}, "ctl ib: use ib down HCA"},
		{"errors without counters", []string{"ib", "errors", "mlx5_0"}, "use ib errors HCA COUNTER:N,..."},
		{"an unknown counter", []string{"ib", "errors", "mlx5_0", "x:1"}, `"x" is neither down nor an error counter`},
		{"down through errors", []string{"ib", "errors", "mlx5_0", "down"}, `"down": down is its own command (ib down mlx5_0)`},
		{"an Ethernet port", []string{"ib", "down", "mlx5_2"}, "the node has no InfiniBand HCA mlx5_2 (Ethernet ports are in no fabric)"},
		{"clear with two HCAs", []string{"ib", "clear", "mlx5_0", "mlx5_1"}, "use ib clear [HCA]"},
		{"up on an HCA the node lacks", []string{"ib", "up", "mlx5_99"}, "the node has no InfiniBand HCA mlx5_99"},
		{"clear on an HCA the node lacks", []string{"ib", "clear", "mlx5_99"}, "the node has no InfiniBand HCA mlx5_99"},
		{"a counter given twice", []string{"ib", "errors", "mlx5_0", "symbol_error:1,symbol_error:2"}, "symbol_error is given twice"},
	} {
		err := run(append([]string{"ctl", "--state", state}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", c.name, err, c.want)
		}
	}
	if faults, err := hostprep.IBFaults(state); err != nil || len(faults) != 0 {
		t.Errorf("after rejected commands: faults %v, %v; want none", faults, err)
	}
}

// Faults given for one port in several flags make one fault, which ctl ib
// up and errors then change (they changed the first of three, and the
// port stayed down).
func TestFaultsForOnePortMakeOneThatCtlChanges(t *testing.T) {
	var flags faultFlags
	for _, f := range []string{"mlx5_0=symbol_error:5", "mlx5_0=down", "mlx5_0=link_downed:2", "n2/mlx5_0=down"} {
		if err := flags.Set(f); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, ft := range flags {
		got = append(got, ft.String())
	}
	if want := []string{"mlx5_0=down,symbol_error:5,link_downed:2", "n2/mlx5_0=down"}; !slices.Equal(got, want) {
		t.Errorf("--ib-fault flags made %q, want %q", got, want)
	}
	// Two values of one counter leave which is meant open, as in one flag.
	if err := flags.Set("mlx5_0=symbol_error:1"); err == nil || !strings.Contains(err.Error(), "symbol_error of mlx5_0 is given twice") {
		t.Errorf("a counter given again in another flag: %v", err)
	}
	if err := flags.Set("/mlx5_0=down"); err == nil || !strings.Contains(err.Error(), "no node name before /") {
		t.Errorf("--ib-fault /mlx5_0=down: %v, want no node name", err)
	}

	state := ibNode(t)
	// A file an older install wrote, with the port listed three times.
	old := []fabric.Fault{{HCA: "mlx5_0", Counters: map[string]uint64{"symbol_error": 1}}, {HCA: "mlx5_0", Down: true}, {HCA: "mlx5_0", Down: true}}
	if err := hostprep.SetIBFaults(state, old); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"ib", "errors", "mlx5_0", "link_downed:2"}, {"ib", "up", "mlx5_0"}} {
		if err := run(append([]string{"ctl", "--state", state}, args...)); err != nil {
			t.Fatalf("ctl %v: %v", args, err)
		}
	}
	faults, err := hostprep.IBFaults(state)
	if err != nil || len(faults) != 1 || faults[0].String() != "mlx5_0=symbol_error:1,link_downed:2" {
		t.Errorf("after ctl ib errors and up: %v, %v; want mlx5_0=symbol_error:1,link_downed:2 alone", faults, err)
	}
	// A fault naming this node (the chart gives each node the fleet's) is
	// this node's: ctl ib down finds it (it added a second one, whose
	// link_downed:1 undid the first's 3); another node's stays as it was.
	named := []fabric.Fault{{Node: "n1", HCA: "mlx5_3", Down: true, Counters: map[string]uint64{"link_downed": 3}}, {Node: "n2", HCA: "mlx5_3", Down: true}}
	if err := hostprep.SetIBFaults(state, named); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"ctl", "--state", state, "ib", "down", "mlx5_3"}); err != nil {
		t.Fatal(err)
	}
	faults, err = hostprep.IBFaults(state)
	var got2 []string
	for _, ft := range faults {
		got2 = append(got2, ft.String())
	}
	if want := []string{"mlx5_3=down,link_downed:3", "n2/mlx5_3=down"}; err != nil || !slices.Equal(got2, want) {
		t.Errorf("ctl ib down over a fault naming this node: %q, %v; want %q", got2, err, want)
	}
}

// ctl ib commands run at once all count: each reads, changes and writes
// the faults under the state's lock (they read the faults before it, and
// the last writer won).
func TestCtlIBCommandsAtOnceAllCount(t *testing.T) {
	state := ibNode(t)
	var hcas []string
	err := hostprep.UpdateIBFaults(state, func(f *fabric.Fabric, faults []fabric.Fault) ([]fabric.Fault, error) {
		for _, s := range f.Subnets {
			for name := range s.LocalCAs(f.Local) {
				hcas = append(hcas, name)
			}
		}
		return faults, nil
	})
	if err != nil || len(hcas) < 4 {
		t.Fatalf("the node's HCAs: %v, %v", hcas, err)
	}
	errs := make(chan error, len(hcas))
	for _, h := range hcas {
		go func() { errs <- run([]string{"ctl", "--state", state, "ib", "down", h}) }()
	}
	for range hcas {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	faults, err := hostprep.IBFaults(state)
	if err != nil || len(faults) != len(hcas) {
		t.Errorf("after %d ib down at once: %v, %v; want every HCA down", len(hcas), faults, err)
	}
}

// ctl status shows the settings nvidia-smi changed (the library writes
// them; here the state is written as it does), and only those.
func TestCtlStatusShowsTheSettingsNvidiaSMIChanged(t *testing.T) {
	state := ctlNode(t, "3")
	f, err := live.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Update(func(s *live.State, _ int64) error {
		s.GPUs[0].CfgSet, s.GPUs[0].PowerLimitMW, s.GPUs[0].Timeslice = live.CfgPowerLimit|live.CfgTimeslice, 250000, 3
		s.GPUs[2].CfgSet, s.GPUs[2].Persistence, s.GPUs[2].ComputeMode = live.CfgPersistence|live.CfgComputeMode|live.CfgAccounting, 0, 3
		s.GPUs[2].Accounting = 1
		s.GPUs[2].CfgSet |= live.CfgDrain
		s.GPUs[2].Drain = 1
		s.GPUs[1].CfgSet, s.GPUs[1].GpmStream, s.GPUs[1].ECCPending = live.CfgGpmStream|live.CfgECCPending, 1, 0
		g := &s.GPUs[1]
		g.CfgSet |= live.CfgGPULocked | live.CfgMemLocked | live.CfgAppClocks
		g.GPULockedMin, g.GPULockedMax, g.MemLockedMin, g.MemLockedMax, g.AppClockMem, g.AppClockGfx = 1000, 1400, 1215, 1215, 1215, 1095
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := ctlStatus(f, nil, &b); err != nil {
		t.Fatal(err)
	}
	want := "GPU  SETTINGS (nvidia-smi -pm, -c, -pl, -e, -am, -lgc, -lmc, -ac, gpm -s, compute-policy, drain; until reinstalled)\n0    power limit 250.00 W, timeslice Long\n" +
		"1    ECC Disabled at next boot, GPM streaming Enabled, GPU clocks locked 1000-1400 MHz, memory clocks locked 1215-1215 MHz, applications clocks memory 1215 MHz, graphics 1095 MHz\n" +
		"2    persistence Disabled, compute mode Exclusive_Process, accounting Enabled, draining (left out of new processes)\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("ctl status:\n%s\nwant a part:\n%s", b.String(), want)
	}
	s := ctlStatusJSON(t, state)
	if g := s.GPUs[0].Settings; g == nil || g.PowerLimitMW == nil || *g.PowerLimitMW != 250000 || g.Timeslice != "Long" || g.Persistence != nil || g.ComputeMode != "" || g.GPMStream != nil {
		t.Errorf("GPU 0 settings %+v, want only the power limit and the timeslice", g)
	}
	if g := s.GPUs[1].Settings; g == nil || g.GPMStream == nil || !*g.GPMStream || g.ECCPending == nil || *g.ECCPending || g.Persistence != nil || g.PowerLimitMW != nil || g.Timeslice != "" {
		t.Errorf("GPU 1 settings %+v, want only GPM streaming, ECC pending and clocks", g)
	} else if g.LockedGPUClocks == nil || *g.LockedGPUClocks != [2]uint32{1000, 1400} || g.LockedMemoryClocks == nil || *g.LockedMemoryClocks != [2]uint32{1215, 1215} ||
		g.ApplicationsClocks == nil || *g.ApplicationsClocks != [2]uint32{1215, 1095} {
		t.Errorf("GPU 1 clock settings %v %v %v", g.LockedGPUClocks, g.LockedMemoryClocks, g.ApplicationsClocks)
	}
	if g := s.GPUs[2].Settings; g == nil || g.Persistence == nil || *g.Persistence || g.ComputeMode != "Exclusive_Process" || g.Accounting == nil || !*g.Accounting || !g.Draining {
		t.Errorf("GPU 2 settings %+v", g)
	}
}

// ctl status says when nvidia-smi -r last reset a GPU (the library writes
// it; here the state is written as it does), so a test can tell that its
// remediation reset the GPU it meant.
func TestCtlStatusShowsWhenAGPUWasReset(t *testing.T) {
	state := ctlNode(t, "2")
	f, err := live.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := time.Date(2026, 12, 6, 21, 0, 0, 5, time.UTC)
	if err := f.Update(func(s *live.State, _ int64) error { s.GPUs[1].ResetNS = uint64(at.UnixNano()); return nil }); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := ctlStatus(f, nil, &b); err != nil {
		t.Fatal(err)
	}
	if want := "GPU  LAST RESET (nvidia-smi -r)\n1    2026-12-06T21:00:00.000000005Z\n"; !strings.Contains(b.String(), want) {
		t.Errorf("ctl status:\n%s\nwant a part:\n%s", b.String(), want)
	}
	s := ctlStatusJSON(t, state)
	if s.GPUs[0].ResetAt != nil || s.GPUs[1].ResetAt == nil || !s.GPUs[1].ResetAt.Equal(at) {
		t.Errorf("resetAt: GPU 0 %v, GPU 1 %v; want none and %v", s.GPUs[0].ResetAt, s.GPUs[1].ResetAt, at)
	}
}

// A process that exited holds no memory: status stops listing it at once,
// and a new one may take its memory (review: the check counted it until
// the next write).
func TestAnExitedProcessFreesItsMemory(t *testing.T) {
	state := ctlNode(t, "2")
	ctl := func(args ...string) error { return run(append([]string{"ctl", "--state", state}, args...)) }
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	if err := ctl("proc", "add", "0", strconv.Itoa(sleep.Process.Pid), "--memory", "39GiB"); err != nil {
		t.Fatal(err)
	}
	// A zombie's GPU context ended with it, before its parent reaps it
	// (review: it stayed listed with its memory).
	sleep.Process.Kill()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(sleep.Process.Pid) + "/stat"); strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed process is no zombie in 10 s")
		}
	}
	if p := ctlStatusJSON(t, state).Processes; len(p) != 0 {
		t.Errorf("status lists the exited process, a zombie: %+v", p)
	}
	sleep.Wait()
	if p := ctlStatusJSON(t, state).Processes; len(p) != 0 {
		t.Errorf("status lists the exited process: %+v", p)
	}
	if err := ctl("proc", "add", "0", strconv.Itoa(os.Getpid()), "--memory", "30GiB"); err != nil {
		t.Errorf("30 GiB once the 39 GiB process exited: %v", err)
	}
}

// ctl status says a fault is one process's (it read as node-wide), and
// XID 74, an NVLink error, needs a GPU with NVLink, as nvlink_down does.
func TestCtlStatusNamesAFaultsProcessAndXID74NeedsNVLink(t *testing.T) {
	state := ctlNode(t, "2")
	if err := run([]string{"ctl", "--state", state, "fault", "0", "thermal", "--pid", "1234"}); err != nil {
		t.Fatal(err)
	}
	f, err := live.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b bytes.Buffer
	if err := ctlStatus(f, nil, &b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "thermal for pid 1234 only") {
		t.Errorf("ctl status:\n%s\nwant the fault's pid", b.String())
	}

	dir := t.TempDir()
	if err := run([]string{"profile", "compile", "t4", "--gpus", "1", "--seed", "n1", "-o", filepath.Join(dir, "snapshot")}); err != nil {
		t.Fatal(err)
	}
	t4 := filepath.Join(dir, "state")
	if err := run([]string{"ctl", "--state", t4, "create"}); err != nil {
		t.Fatal(err)
	}
	err = run([]string{"ctl", "--state", t4, "xid", "0", "74"})
	if want := "XID 74 (NVLink error): GPU 0 has no NVLink"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("XID 74 on a T4: %v, want %q", err, want)
	}
	// Not a --link it was not given (review).
	err = run([]string{"ctl", "--state", t4, "fault", "0", "nvlink_down"})
	if want := "ctl fault: nvlink_down: GPU 0 has no NVLink"; err == nil || err.Error() != want {
		t.Errorf("nvlink_down on a T4: %v, want %q", err, want)
	}
	// A T4 retires pages: no row remapper to fail (QA: taken, and shown
	// nowhere). XID 63 records a retirement there.
	for _, c := range []struct{ args []string }{{[]string{"fault", "0", "remap_failure"}}, {[]string{"xid", "0", "64"}}} {
		err = run(append([]string{"ctl", "--state", t4}, c.args...))
		if want := "GPU 0 retires pages; it has no row remapper to fail"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ctl %s on a T4: %v, want %q", strings.Join(c.args, " "), err, want)
		}
	}
	// An uncorrectable fault reporting another XID still counts its error
	// (QA: only XID 48 did); XID 63 counts none.
	for _, args := range [][]string{{"fault", "0", "ecc_uncorrectable", "--xid", "13"}, {"fault", "0", "ecc_uncorrectable", "--xid", "63"}} {
		if err := run(append([]string{"ctl", "--state", t4}, args...)); err != nil {
			t.Fatal(err)
		}
	}
	if fs := ctlStatusJSON(t, t4).GPUs[0].Faults; len(fs) != 2 || fs[0].Count != 1 || fs[1].Count != 0 {
		t.Errorf("ECC faults with XIDs 13 and 63: %+v, want counts 1 and 0", fs)
	}
}

// ctl COMMAND --help shows that command's part of the help (it showed the
// whole of it); an unknown command, the whole.
func TestCtlCommandHelpIsItsOwn(t *testing.T) {
	for _, c := range []struct{ name, has, lacks string }{
		{"load", "load GPUS PERCENT", "fault GPUS"},
		{"proc", "proc rm PID", "mig LAYOUT"},
		{"clock", "clock advance DURATION", "status [--json]"},
	} {
		got := ctlSubUsage(c.name)
		if !strings.HasPrefix(got, "Usage: nvmock ctl [--state PATH] "+c.name) || !strings.Contains(got, c.has) || strings.Contains(got, c.lacks) {
			t.Errorf("ctl %s --help:\n%s", c.name, got)
		}
	}
	if ctlSubUsage("melt") != ctlUsage {
		t.Error("an unknown command's help is not the whole help")
	}
}

// An encoder load on a board without NVENC (A100: its whole-GPU MIG
// profile lists no encoder) is refused, as a real one reports 0% whatever
// runs; an L40S, with encoders, takes it. Review: nvtop showed an A100
// encoding.
func TestAnEncoderLoadNeedsAnEncoder(t *testing.T) {
	a100 := ctlNode(t, "2")
	err := run([]string{"ctl", "--state", a100, "load", "all", "50", "--encoder", "30"})
	if err == nil || !strings.Contains(err.Error(), "--encoder: GPU 0 has no video encoder (NVENC)") {
		t.Errorf("an encoder load on an A100: %v", err)
	}
	spec := filepath.Join(t.TempDir(), "load.yaml")
	if err := os.WriteFile(spec, []byte("loads:\n  - {gpus: all, percent: 50, encoder: 30}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"ctl", "--state", a100, "apply", spec}); err == nil || !strings.Contains(err.Error(), "loads[0].encoder: GPU 0 has no video encoder") {
		t.Errorf("ctl apply of an encoder load on an A100: %v", err)
	}
	dir := t.TempDir()
	if err := run([]string{"profile", "compile", "l40s", "--seed", "n1", "-o", filepath.Join(dir, "snapshot")}); err != nil {
		t.Fatal(err)
	}
	l40s := filepath.Join(dir, "state")
	if err := live.Create(l40s, 1, 1); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"ctl", "--state", l40s, "load", "0", "50", "--encoder", "30"}); err != nil {
		t.Errorf("an encoder load on an L40S: %v", err)
	}
}

// A GPU with ECC off takes no ECC fault, no ECC XID and no remap failure,
// by ctl or by a live file; its neighbour with ECC on does. QA: XID 48 on
// a GPU with ECC off made its device plugin mark it unhealthy.
func TestECCFaultsNeedECC(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(prof, []byte("base: h100\nname: eccoff\ngpus: 2\ndevices:\n  - index: 1\n    board:\n      modes:\n        ecc: {current: false, pending: false, default: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"profile", "compile", prof, "--seed", "n1", "-o", filepath.Join(dir, "snapshot")}); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	if err := run([]string{"ctl", "--state", state, "create"}); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dir, "live.yaml")
	if err := os.WriteFile(spec, []byte("faults:\n  - {gpus: \"1\", kind: remap_failure}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fault", "1", "ecc_uncorrectable"}, "ecc_uncorrectable: GPU 1 has ECC off (board.modes.ecc.current), so it detects no ECC errors"},
		{[]string{"fault", "1", "xid", "--xid", "95"}, "XID 95 (uncontained ECC error): GPU 1 has ECC off"},
		{[]string{"xid", "1", "48"}, "XID 48 (double-bit ECC error): GPU 1 has ECC off"},
		{[]string{"apply", spec}, "faults[0]: remap_failure: GPU 1 has ECC off"},
	} {
		err := run(append([]string{"ctl", "--state", state}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ctl %s: %v, want %q", strings.Join(c.args, " "), err, c.want)
		}
	}
	for _, args := range [][]string{{"fault", "0", "ecc_uncorrectable"}, {"xid", "0", "48"}, {"fault", "1", "thermal"}} {
		if err := run(append([]string{"ctl", "--state", state}, args...)); err != nil {
			t.Errorf("ctl %s: %v", strings.Join(args, " "), err)
		}
	}
}

// A condition given twice (overlapping entries of a file, a range over a
// GPU that has it) is on once; only a request that changes nothing is an
// error (review: the whole apply failed, and the chart's live init
// container with it).
func TestAConditionGivenTwiceIsOnOnce(t *testing.T) {
	state := ctlNode(t, "2")
	file := filepath.Join(t.TempDir(), "live.yaml")
	os.WriteFile(file, []byte("faults:\n  - {gpus: all, kind: thermal}\n  - {gpus: \"1\", kind: thermal}\n"), 0o644)
	if err := run([]string{"ctl", "--state", state, "apply", file}); err != nil {
		t.Fatalf("apply of overlapping entries: %v", err)
	}
	if err := run([]string{"ctl", "--state", state, "fault", "0", "lost"}); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"ctl", "--state", state, "fault", "0-1", "lost"}); err != nil {
		t.Errorf("a range over a GPU lost already: %v", err)
	}
	if err := run([]string{"ctl", "--state", state, "fault", "1", "lost"}); err == nil || !strings.Contains(err.Error(), "GPU 1: lost is on already") {
		t.Errorf("lost again on GPU 1 alone: %v, want it said that nothing changed", err)
	}
	for _, g := range ctlStatusJSON(t, state).GPUs {
		if len(g.Faults) != 2 {
			t.Errorf("GPU %d: faults %+v, want thermal and lost once each", g.Index, g.Faults)
		}
	}
}
