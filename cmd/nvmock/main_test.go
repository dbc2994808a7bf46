package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/libnvml/snapshot"
)

func TestProfileCompileWritesASnapshotForTheNode(t *testing.T) {
	out := filepath.Join(t.TempDir(), "snap")
	if err := run([]string{"profile", "compile", "a100", "--gpus", "3", "--seed", "n1", "-o", out}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := snapshot.HeaderSize + 3*snapshot.DeviceSize; len(data) < want || string(data[:8]) != "NVMOCKSS" {
		t.Fatalf("snapshot of %d bytes, want at least %d with the magic", len(data), want)
	}
	if !bytes.Contains(data, []byte(snapshot.UUID("a100", "n1", 2))) {
		t.Error("snapshot lacks GPU 2's UUID for seed n1")
	}
	// Compiling again replaces the file in one rename and leaves no temp file.
	if err := run([]string{"profile", "compile", "a100", "--seed", "n1", "-o", out}); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(out)); len(ents) != 1 {
		t.Errorf("%d files after two compiles, want 1", len(ents))
	}
}

func TestProfileCommandsRejectBadInputWithOneLine(t *testing.T) {
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := file("bad.yaml", "name: x\ngpus: 1\nbord: {}\n")
	good := file("good.yaml", "base: t4\n")
	huge := file("huge.yaml", "base: a100\ngpus: 64\n")
	// Parses, but three halves of one GPU cannot be placed.
	crowded := file("crowded.yaml", "base: a100\nname: x\nboard:\n  modes:\n    mig:\n      layout: 0=3g.20gb*3\n")
	twoDocs := file("two.yaml", "base: t4\nname: x\n---\ngpus: 5\n")
	nan := file("nan.yaml", "base: t4\nname: x\nboard:\n  power:\n    draw: -.inf\n")
	bare := file("bare.yaml", "name: t4\n")
	driverOnly := file("driver.yaml", "base: a100\ndriver:\n  cudaVersion: \"12.8\"\n")
	noIndex := file("noindex.yaml", "base: a100\ndevices:\n  - board: {thermal: {gpu: 40}}\n")
	// /var/run and /run: a CDI directory in the root under another name.
	linked := t.TempDir()
	if err := os.Mkdir(filepath.Join(linked, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(linked, "link")); err != nil {
		t.Fatal(err)
	}
	fit := "profile " + crowded + ":6: board.modes.mig.layout: mig layout \"0=3g.20gb*3\": GPU 0: 3 of 3g.20gb: a GPU holds at most 2"
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"an unknown built-in names the choices", []string{"profile", "show", "z100"}, `no built-in profile "z100"; choose one of a100`},
		{"a misspelt field names file and path", []string{"profile", "validate", bad}, "profile " + bad + ":3: bord: unknown field"},
		{"compile without -o says what is missing", []string{"profile", "compile", "a100"}, "need one NAME or FILE and -o SNAPSHOT"},
		{"an impossible GPU count names the flag", []string{"profile", "compile", "a100", "--gpus", "-2", "--seed", "s", "-o", "/dev/null"}, "--gpus -2: a node has 1 to 64 GPUs"},
		{"no GPUs at all is refused, not the profile's count", []string{"profile", "compile", "a100", "--gpus", "0", "--seed", "s", "-o", "/dev/null"}, "--gpus 0: a node has 1 to 64 GPUs"},
		{"a profile without a base says what it lacks, once", []string{"profile", "validate", bare}, "profile " + bare + ": no gpus, driver, board; start from a built-in board with base: NAME"},
		{"an endless file is not read to the end", []string{"profile", "validate", "/dev/zero"}, "/dev/zero is larger than 4 MiB"},
		{"a node name that is no host name", []string{"hostprep", "install", "--root", filepath.Join(t.TempDir(), "r"), "--node-name", "Bad Name!"}, `node name "Bad Name!": a host name has`},
		{"NaN and infinity name their field", []string{"profile", "validate", nan}, "profile " + nan + ":5: board.power.draw: not a number"},
		{"a second YAML document is not dropped", []string{"profile", "validate", twoDocs}, "profile " + twoDocs + ":4: a second YAML document; a profile is one"},
		{"a MIG layout that cannot be placed fails validate", []string{"profile", "validate", crowded}, fit},
		{"and compile", []string{"profile", "compile", crowded, "--seed", "s", "-o", "/dev/null"}, fit},
		{"and install, before anything is written", []string{"hostprep", "install", "--profile", crowded, "--root", filepath.Join(t.TempDir(), "r"), "--node-name", "n1"}, "hostprep install: " + fit},
		{"also through a symlink", []string{"hostprep", "install", "--root", filepath.Join(linked, "real", "r"), "--cdi-dir", filepath.Join(linked, "link", "r", "cdi"), "--node-name", "n1"}, "is inside the root " + filepath.Join(linked, "real", "r")},
		{"a root that is a file", []string{"hostprep", "install", "--root", bad, "--node-name", "n1"}, "the root " + bad + " is not a directory"},
		{"a CDI directory that is a file", []string{"hostprep", "install", "--root", filepath.Join(t.TempDir(), "r"), "--cdi-dir", bad, "--node-name", "n1"}, "the CDI directory " + bad + " is not a directory"},
		{"a fabric slot past the fabric names the flag", []string{"hostprep", "install", "--root", filepath.Join(t.TempDir(), "r"), "--profile", "h100", "--fabric-slots", "n1=999", "--node-name", "n1"},
			"hostprep install: --fabric-slot(s): slot 999 is outside fabric"},
		// Review: both were accepted.
		{"the CDI and NFD directories are one", []string{"hostprep", "install", "--root", filepath.Join(t.TempDir(), "r"), "--cdi-dir", filepath.Join(dir, "shared"), "--nfd-dir", filepath.Join(dir, "shared") + "/", "--node-name", "n1"},
			"the CDI directory and the NFD directory are both " + filepath.Join(dir, "shared") + "; give each its own"},
		{"a CDI directory in the root is refused", []string{"hostprep", "install", "--root", "/tmp/r", "--cdi-dir", "/tmp/r/driver", "--node-name", "n1"}, "the CDI directory /tmp/r/driver is inside the root /tmp/r; give one outside it"},
		{"a driver block without its version", []string{"profile", "validate", driverOnly}, "profile " + driverOnly + ":2: driver: gives no version; a driver block takes the place of the base's (570.148.08) whole"},
		{"an override without its GPU", []string{"profile", "validate", noIndex}, "profile " + noIndex + ":3: devices[0]: gives no index"},
		{"an unknown command is named", []string{"frobnicate"}, `unknown command "frobnicate"; see nvmock help`},
		{"version takes no argument", []string{"version", "--bogus"}, `version: unexpected argument "--bogus"`},
		{"a fabric host name that is none", []string{"exec", "--profile", "h100", "--ib-host", "bad host!", "--", "true"}, `exec: --ib-host "bad host!": a host name has`},
		{"the daemon's too", []string{"ibd", "--profile", "h100", "--host", "bad host!"}, `ibd: --host "bad host!": a host name has`},
		{"a seed for an unseeded snapshot", []string{"profile", "compile", "a100", "--unseeded", "--seed", "x", "-o", "/dev/null"}, "--seed and --unseeded: give one"},
		{"the fabric daemon needs a socket", []string{"ibd", "--profile", "h100", "--socket", ""}, "ibd: --socket is empty"},
		// Review: each said something else.
		{"an empty root is named", []string{"hostprep", "install", "--root", "", "--node-name", "n1"}, "hostprep install: --root is empty"},
		{"compile into a directory says so", []string{"profile", "compile", "a100", "--seed", "s", "-o", dir}, "write " + dir + ": it is a directory; give a file name"},
		{"assets that do not exist", []string{"exec", "--assets", filepath.Join(dir, "none"), "--", "true"}, "assets " + filepath.Join(dir, "none") + ": no such directory"},
		{"an unknown ctl command before any state", []string{"ctl", "--state", filepath.Join(dir, "none"), "bogus"}, `ctl: unknown command "bogus"`},
		// Review: an empty value (an unset variable) was the default's.
		{"an empty seed is refused", []string{"profile", "show", "h100", "--seed", ""}, "profile show: --seed is empty; give a value or leave the flag out"},
		{"an empty driver version", []string{"profile", "compile", "h100", "--driver-version", "", "-o", "/dev/null"}, "profile compile: --driver-version is empty"},
		{"an empty output", []string{"profile", "compile", "h100", "--seed", "s", "-o", ""}, "profile compile: -o is empty"},
		{"an empty state", []string{"ctl", "--state", "", "status"}, "ctl: --state is empty"},
		{"an empty profile", []string{"exec", "--profile", "", "--", "true"}, "exec: --profile is empty"},
		{"an empty profile file name", []string{"profile", "validate", ""}, "read profile: the file name is empty"},
		{"an output in no directory names no temporary file", []string{"profile", "compile", "t4", "--seed", "s", "-o", filepath.Join(dir, "none", "snap")},
			"write " + filepath.Join(dir, "none", "snap") + ": directory " + filepath.Join(dir, "none") + " does not exist"},
		{"list takes no argument", []string{"profile", "list", "extra"}, `profile list: unexpected argument "extra"`},
		// Review: each was silently the default's, or the last one's.
		{"nor does help", []string{"help", "extra"}, `help: unexpected argument "extra"`},
		{"a node given two fabric slots", []string{"hostprep", "install", "--root", filepath.Join(t.TempDir(), "r"), "--profile", "h100", "--fabric-slots", "n1=3,n1=4", "--node-name", "n1"}, "--fabric-slots: node n1 is given twice, slots 3 and 4"},
		{"a PCI tree that cannot be laid out fails validate", []string{"profile", "validate", huge}, "profile " + huge + ":2: gpus: 64 GPUs: PCI tree: its 32-bit memory"},
		{"compile over its profile", []string{"profile", "compile", good, "--seed", "s", "-o", good}, "profile compile: -o " + good + ": a file that is not a snapshot is there, and would be lost"},
		{"a flag given twice", []string{"exec", "--profile", "h100", "--profile", "a100", "--", "true"}, "exec: --profile is given twice; give it once"},
		{"-o given twice", []string{"profile", "compile", "t4", "-o", "/dev/null", "-o", "/dev/null"}, "profile compile: -o is given twice"},
		{"an empty layout", []string{"exec", "--mig", "", "--", "true"}, "exec: --mig is empty"},
		{"an empty node name", []string{"hostprep", "install", "--root", filepath.Join(t.TempDir(), "r"), "--node-name", ""}, "hostprep install: --node-name is empty"},
		{"empty assets", []string{"exec", "--assets", "", "--", "true"}, "exec: --assets is empty"},
		{"a driver of a branch nvmock does not know", []string{"profile", "compile", "a100", "--driver-version", "600.10.01", "--seed", "s", "-o", "/dev/null"},
			`driver 600.10.01 is of no branch nvmock knows the CUDA version of; give driver: {version: "600.10.01", cudaVersion: ...} in a profile file`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := run(c.args)
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got %v, want one line containing %q", err, c.want)
			}
		})
	}
}

// A bare name is a built-in unless a file of that name is here and no
// built-in has it; both is refused. validate reads files only.
func TestABareProfileNameIsAFileOnlyWhenNoBuiltinHasIt(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.WriteFile("t4", []byte("garbage: ["), 0o644); err != nil {
		t.Fatal(err)
	}
	mine := "base: l40s\nname: mine\n"
	if err := os.WriteFile("mine", []byte(mine), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"profile", "validate", "t4"}, "profile t4: not valid YAML"},
		{[]string{"profile", "show", "t4"}, "both a built-in profile and a file here; write ./t4 for the file"},
		{[]string{"profile", "validate", "a100"}, "open a100: no such file"},
	} {
		if err := run(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	var b bytes.Buffer
	if err := profileShow([]string{"mine", "--seed", "n1"}, &b); err != nil || !strings.Contains(b.String(), "name: mine") {
		t.Errorf("profile show mine (a file, no built-in of that name): %v\n%s", err, b.String())
	}
	// The README's profile compile gb200 -o gb200, then the built-in
	// again from here: the snapshot is no profile (review).
	if err := run([]string{"profile", "compile", "gb200", "--seed", "s", "-o", "gb200"}); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"profile", "compile", "gb200", "--seed", "s", "-o", "gb200"}); err != nil {
		t.Errorf("the built-in beside a snapshot of its name: %v", err)
	}
}

func TestHelpIsAnAnswerNotAnError(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string // lines of the help, in order
	}{
		{[]string{"version", "-h"}, []string{"Usage: nvmock version"}},
		{[]string{"profile", "show", "--help"}, []string{"Usage: nvmock profile show NAME|FILE [flags]", "  -driver-version string"}},
		{[]string{"profile", "compile", "-h"}, []string{"Usage: nvmock profile compile NAME|FILE -o SNAPSHOT [flags]", "  -o string"}},
		{[]string{"profile", "validate", "--help"}, []string{"Usage: nvmock profile validate FILE"}},
		{[]string{"profile", "list", "--help"}, []string{"Usage: nvmock profile list"}},
	} {
		var err error
		out := captured(t, &os.Stdout, func() { err = run(c.args) })
		if err != nil {
			t.Errorf("%v: %v, want the help and no error", c.args, err)
		}
		rest := out
		for _, line := range c.want {
			i := strings.Index(rest, line+"\n")
			if i < 0 {
				t.Errorf("%v: the help lacks %q (or has it out of order):\n%s", c.args, line, out)
				break
			}
			rest = rest[i+len(line):]
		}
	}
}

// captured runs fn and returns what it printed on *f (&os.Stdout,
// &os.Stderr).
func captured(t *testing.T, f **os.File, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := *f
	*f = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	fn()
	*f = saved
	w.Close()
	return string(<-done)
}

func TestProfileShowListsTheGPUsOfThisNode(t *testing.T) {
	var b bytes.Buffer
	if err := profileShow([]string{"a100", "--gpus", "2", "--seed", "n1"}, &b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"productName: NVIDIA A100-SXM4-40GB", snapshot.UUID("a100", "n1", 1), "bus 00000000:0F:00.0"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("show output lacks %q:\n%s", want, b.String())
		}
	}
}

// A --mig layout takes the place of the profile's own, which is not
// checked against --gpus then.
func TestAGivenMIGLayoutReplacesTheProfiles(t *testing.T) {
	file := filepath.Join(t.TempDir(), "lay.yaml")
	if err := os.WriteFile(file, []byte("base: a100\nboard: {modes: {mig: {layout: \"7=all-1g.5gb\"}}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, migGiven := range []bool{false, true} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		lf := loadFlags{migGiven: migGiven}
		lf.add(fs)
		if err := fs.Parse([]string{"--gpus", "2", "--seed", "s"}); err != nil {
			t.Fatal(err)
		}
		p, _, err := lf.load(file)
		switch {
		case migGiven && err != nil:
			t.Errorf("with --mig: %v", err)
		case migGiven && p.Board.Modes.MIG.Layout != "":
			t.Errorf("with --mig the profile's layout %q stayed", p.Board.Modes.MIG.Layout)
		case !migGiven && (err == nil || !strings.Contains(err.Error(), "GPU 7: the node has GPUs 0 to 1")):
			t.Errorf("without --mig: %v", err)
		}
	}
}

// $NODE_NAME names the node in its fabric when --ib-host does not: a
// value no host name has is refused as the flag's is (review: a newline
// split the node's description in two).
func TestABadNodeNameIsNotTheFabricsHostName(t *testing.T) {
	t.Setenv("NODE_NAME", "bad\nname")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", "--profile", "h100", "--", "true"}, `exec: $NODE_NAME "bad\nname", the node's fabric host name without --ib-host: a host name has`},
		{[]string{"ibd", "--profile", "h100"}, `ibd: $NODE_NAME "bad\nname", the node's fabric host name without --host`},
	} {
		if err := run(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("nvmock %s: %v, want %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}
