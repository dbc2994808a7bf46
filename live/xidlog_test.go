package live_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	. "github.com/nvmock/nvmock/live"
)

// xidNode is an h100 node of two GPUs: its state and snapshot devices.
func xidNode(t testing.TB) (*File, []snapshot.Device) {
	t.Helper()
	snap, _ := testenv.Snapshot(t, "h100", 2)
	path := filepath.Join(filepath.Dir(snap), "state")
	if err := Create(path, 2, 1); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	devs, err := Snapshot(path)
	if err != nil {
		t.Fatal(err)
	}
	return f, devs
}

func change(t testing.TB, f *File, fn func(s *State) error) {
	t.Helper()
	if err := f.Update(func(s *State, _ int64) error { return fn(s) }); err != nil {
		t.Fatal(err)
	}
}

func cstr(b []byte) string { s, _, _ := strings.Cut(string(b), "\x00"); return s }

// startXIDLog runs an XIDLog of f's state to out until the test ends.
func startXIDLog(t testing.TB, f *File, out string) {
	t.Helper()
	runXIDLog(t, &XIDLog{State: f.Path, Out: out}, true)
}

// runXIDLog runs x until the test ends or the returned stop is called,
// waiting for it to start if wait is set.
func runXIDLog(t testing.TB, x *XIDLog, wait bool) (stop func()) {
	t.Helper()
	quit, done, started := make(chan struct{}), make(chan error, 1), make(chan struct{})
	x.Logf, x.Started = t.Logf, func() { close(started) }
	go func() { done <- x.Run(quit) }()
	if wait {
		select {
		case <-started:
		case err := <-done:
			t.Fatalf("xidlog: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("xidlog did not start in 10 s")
		}
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		close(quit)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("xidlog: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("xidlog did not stop in 5 s")
		}
	}
	t.Cleanup(stop)
	return stop
}

// logLines waits until out has at least n lines (10 s at most), then a
// little for any more, and returns them.
func logLines(t *testing.T, out string, n int) []string {
	t.Helper()
	read := func() []string {
		b, _ := os.ReadFile(out)
		if len(b) == 0 {
			return nil
		}
		return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	for end := time.Now().Add(10 * time.Second); len(read()) < n && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
	}
	time.Sleep(300 * time.Millisecond) // and nothing more comes
	return read()
}

// xidsIn are the XID numbers of a log's lines, in order.
func xidsIn(lines []string) []string {
	var out []string
	for _, l := range lines {
		if _, rest, ok := strings.Cut(l, "): "); ok && strings.HasPrefix(l, "NVRM: Xid") {
			n, _, _ := strings.Cut(rest, ",")
			out = append(out, n)
		}
	}
	return out
}

// pciTag is how the driver names a GPU in its lines.
func pciTag(d *snapshot.Device) string {
	return fmt.Sprintf("PCI:%04x:%02x:%02x", d.PCIDomain, d.PCIBus, d.PCIDevice)
}

func TestXIDLogWritesEachXIDOnceAfterItsGPUsUUID(t *testing.T) {
	f, devs := xidNode(t)
	out := filepath.Join(t.TempDir(), "kern.log")
	startXIDLog(t, f, out)
	now := time.Now().UnixNano()
	change(t, f, func(s *State) error {
		if err := s.XID(0, 13, now); err != nil {
			return err
		}
		if err := s.XID(1, 79, now); err != nil {
			return err
		}
		// Due in 200 ms: logged then, by the follower's own wake-up.
		return s.AddFault(0, Fault{Kind: FaultNvlinkDown, Count: 3, Trigger: TriggerAt, Param: uint64(now + 2e8)}, now)
	})
	g0, g1 := pciTag(&devs[0]), pciTag(&devs[1])
	want := []string{
		"NVRM: GPU at " + g0 + ": " + cstr(devs[0].UUID[:]),
		"NVRM: GPU Board Serial Number: " + cstr(devs[0].Serial[:]),
		"NVRM: Xid (" + g0 + "): 13, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Illegal Instruction Parameter",
		"NVRM: GPU at " + g1 + ": " + cstr(devs[1].UUID[:]),
		"NVRM: GPU Board Serial Number: " + cstr(devs[1].Serial[:]),
		"NVRM: Xid (" + g1 + "): 79, GPU has fallen off the bus.", // h100's driver is 580: no pid
		"NVRM: GPU " + strings.TrimPrefix(g1, "PCI:") + ".0: GPU has fallen off the bus.",
		"NVRM: GPU " + strings.TrimPrefix(g1, "PCI:") + ".0: GPU serial number is " + cstr(devs[1].Serial[:]) + ".",
		"NVRM: Xid (" + g0 + "): 74, NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
	}
	got := logLines(t, out, len(want))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestXIDLogRefusesAnOutputThatIsNotALog(t *testing.T) {
	for _, c := range []struct{ out, want string }{
		{"/dev/null", "/dev/null: a device other than the kernel log (/dev/kmsg is char 1:11)"},
		{t.TempDir(), "not a file, a pipe or the kernel log"},
		{filepath.Join(t.TempDir(), "no", "log"), "no such file or directory"},
		{"", "no output given"},
	} {
		err := (&XIDLog{State: "unused", Out: c.out}).Run(nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("out %s: %v, want %q", c.out, err, c.want)
		}
	}
}

func TestXIDLogWritesTheKernelLogAsTheDriverDoes(t *testing.T) {
	k := testenv.OpenKmsg(t)
	f, devs := xidNode(t)
	startXIDLog(t, f, "/dev/kmsg")
	change(t, f, func(s *State) error { return s.XID(1, 48, time.Now().UnixNano()) })
	want := "NVRM: Xid (" + pciTag(&devs[1]) + "): 48, An uncorrectable double bit error (DBE)"
	prio, text := k.Until(t, want, 10*time.Second)
	// Warning, as the driver's lines; the kernel gives what userspace
	// writes the user facility (1), never the kernel's.
	if prio != 1<<3|4 || !strings.HasPrefix(text, want) {
		t.Fatalf("record <%d> %q, want <12> starting %q", prio, text, want)
	}
	// A burst past the kernel's 10 records a file in 5 s is logged whole.
	change(t, f, func(s *State) error {
		for range 12 {
			s.Publish(0, EventXID, 43, time.Now().UnixNano())
		}
		return nil
	})
	for range 12 {
		k.Until(t, "NVRM: Xid ("+pciTag(&devs[0])+"): 43, Ch 00000018", 10*time.Second)
	}
}

// node-problem-detector's kernel monitor (the kmsg plugin, v0.8.20) with
// rules as NVIDIA GPU nodes use them: an event for every XID, and a node
// condition for XID 79.
func TestNodeProblemDetectorSeesTheXIDs(t *testing.T) {
	k := testenv.OpenKmsg(t)
	npd := filepath.Join(testenv.CacheDir(), "bin", "node-problem-detector")
	if _, err := os.Stat(npd); err != nil {
		testenv.Missing(t, "%s (run make deps, or hack/fetch-npd.sh %s)", npd, testenv.CacheDir())
	}
	f, devs := xidNode(t)
	bus := pciTag(&devs[1]) // no character a pattern reads otherwise
	dir := t.TempDir()
	cfg := filepath.Join(dir, "kernel-monitor.json")
	if err := os.WriteFile(cfg, []byte(`{
	"plugin": "kmsg", "logPath": "/dev/kmsg", "lookback": "1s", "bufferSize": 10, "source": "kernel-monitor",
	"conditions": [{"type": "GPUFellOffTheBus", "reason": "GPUIsOnTheBus", "message": "the GPU is on the bus"}],
	"rules": [
		{"type": "temporary", "reason": "NVRMXid", "pattern": "NVRM: Xid \\(`+bus+`\\): \\d+,.*"},
		{"type": "permanent", "condition": "GPUFellOffTheBus", "reason": "Xid79", "pattern": "NVRM: Xid \\(`+bus+`\\): 79,.*"}
	]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	const addr = "127.0.0.1:18735"
	cmd := exec.Command(npd, "--config.system-log-monitor="+cfg, "--enable-k8s-exporter=false",
		"--prometheus-address=127.0.0.1", "--prometheus-port=18735", "--port=0", "--hostname-override=mock")
	logf, err := os.Create(filepath.Join(dir, "npd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("node-problem-detector's log:\n%s", b)
		}
	})
	metrics := func() string {
		r, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return ""
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return string(b)
	}
	// Ready when its counters are out and stay put (it may still read the
	// lookback's records): what follows is counted from there.
	var base map[string]int
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		m := counts(metrics())
		if _, ok := m["NVRMXid"]; ok && fmt.Sprint(m) == fmt.Sprint(base) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("node-problem-detector did not start in 20 s:\n%s", metrics())
		}
		base = m
	}
	startXIDLog(t, f, "/dev/kmsg")
	change(t, f, func(s *State) error {
		if err := s.XID(1, 13, time.Now().UnixNano()); err != nil {
			return err
		}
		return s.XID(1, 79, time.Now().UnixNano())
	})
	k.Until(t, "NVRM: Xid ("+pciTag(&devs[1])+"): 79,", 10*time.Second)
	var m string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		m = metrics()
		c := counts(m)
		// At least: another writer of the kernel log may add its own (each
		// XID once is the file test's).
		if c["NVRMXid"] >= base["NVRMXid"]+2 && c["Xid79"] >= base["Xid79"]+1 &&
			strings.Contains(m, `problem_gauge{reason="Xid79",type="GPUFellOffTheBus"} 1`) {
			return
		}
	}
	t.Fatalf("node-problem-detector's metrics, from %v: want 2 more NVRMXid, 1 more Xid79 and the condition:\n%s", base, m)
}

// counts are the problem counters in node-problem-detector's metrics.
func counts(metrics string) map[string]int {
	out := map[string]int{}
	for _, l := range strings.Split(metrics, "\n") {
		if r, ok := strings.CutPrefix(l, `problem_counter{reason="`); ok {
			reason, v, _ := strings.Cut(r, `"} `)
			out[reason], _ = strconv.Atoi(v)
		}
	}
	return out
}

// A reinstall writes another snapshot over the old one: the lines follow
// the new node's GPUs from the next XID on.
func TestXIDLogFollowsAReinstalledNode(t *testing.T) {
	f, before := xidNode(t)
	out := filepath.Join(t.TempDir(), "kern.log")
	startXIDLog(t, f, out)
	other, _ := testenv.Snapshot(t, "a100", 2)
	snap := filepath.Join(filepath.Dir(f.Path), "snapshot")
	data, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(snap+".new", data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(snap+".new", snap); err != nil {
		t.Fatal(err)
	}
	devs, err := Snapshot(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	if pciTag(&devs[0]) == pciTag(&before[0]) {
		t.Fatalf("a100's GPU 0 is at h100's %s: the test cannot tell the nodes apart", pciTag(&devs[0]))
	}
	change(t, f, func(s *State) error { return s.XID(0, 79, time.Now().UnixNano()) }) // at once
	want := "NVRM: Xid (" + pciTag(&devs[0]) + "): 79, GPU has fallen off the bus."
	if got := logLines(t, out, 3); !slices.Contains(got, want) || len(xidsIn(got)) != 1 {
		t.Fatalf("the log after the reinstall:\n%s\nwant the line %q once", strings.Join(got, "\n"), want)
	}
}

// A state file made anew in another inode (a reinstall of another layout)
// is all new: what it holds is logged.
func TestXIDLogTakesANewStateFileAsNew(t *testing.T) {
	f, _ := xidNode(t)
	out := filepath.Join(t.TempDir(), "kern.log")
	startXIDLog(t, f, out)
	fresh := f.Path + ".new"
	if err := Create(fresh, 2, 1); err != nil {
		t.Fatal(err)
	}
	g, err := Open(fresh)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	change(t, g, func(s *State) error { return s.XID(1, 43, time.Now().UnixNano()) })
	if err := os.Rename(fresh, f.Path); err != nil {
		t.Fatal(err)
	}
	change(t, g, func(s *State) error { return s.XID(0, 45, time.Now().UnixNano()) })
	if got := xidsIn(logLines(t, out, 6)); !slices.Equal(got, []string{"43", "45"}) {
		t.Fatalf("XIDs logged %q, want 43 (before the log saw the file) and 45", got)
	}
}

// A state gone for a while (an uninstall, then an install) is waited for.
func TestXIDLogWaitsForAStateThatIsGone(t *testing.T) {
	f, _ := xidNode(t)
	out := filepath.Join(t.TempDir(), "kern.log")
	startXIDLog(t, f, out)
	if err := os.Remove(f.Path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // it has found it gone, and tried again
	if err := Create(f.Path, 2, 1); err != nil {
		t.Fatal(err)
	}
	g, err := Open(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	change(t, g, func(s *State) error { return s.XID(1, 43, time.Now().UnixNano()) })
	if got := xidsIn(logLines(t, out, 3)); !slices.Equal(got, []string{"43"}) {
		t.Fatalf("XIDs logged %q, want 43 from the state made again", got)
	}
}

// With a cursor, a second log waits for the first to end and goes on from
// where it stopped: the chart's rolling update logs each XID once.
func TestXIDLogHandsOverThroughItsCursor(t *testing.T) {
	f, _ := xidNode(t)
	out := filepath.Join(t.TempDir(), "kern.log")
	cursor := filepath.Join(t.TempDir(), "xidlog.cursor")
	stopA := runXIDLog(t, &XIDLog{State: f.Path, Out: out, Cursor: cursor}, true)
	xid := func(x uint32) {
		change(t, f, func(s *State) error { s.Publish(0, EventXID, uint64(x), time.Now().UnixNano()); return nil })
	}
	xid(13)
	logLines(t, out, 3)
	runXIDLog(t, &XIDLog{State: f.Path, Out: out, Cursor: cursor}, false) // waits for the first
	xid(43)
	logLines(t, out, 4)
	stopA()
	xid(31) // between the two
	xid(45)
	if got := xidsIn(logLines(t, out, 8)); !slices.Equal(got, []string{"13", "43", "31", "45"}) {
		t.Fatalf("XIDs logged %q, want 13, 43, 31 and 45, each once", got)
	}
}

// A cursor that is not one is the user's file: refused, and kept. An
// empty one, what a crash can leave, starts from now.
func TestXIDLogKeepsAFileThatIsNotACursor(t *testing.T) {
	f, _ := xidNode(t)
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes")
	if err := os.WriteFile(notes, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "kern.log")
	for cursor, want := range map[string]string{notes: "not an xidlog cursor", dir: "not a file"} {
		err := (&XIDLog{State: f.Path, Out: out, Cursor: cursor}).Run(nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("cursor %s: %v, want %q", cursor, err, want)
		}
	}
	if b, _ := os.ReadFile(notes); string(b) != "precious\n" {
		t.Errorf("the notes now read %q", b)
	}
	for _, p := range []string{dir + ".lock", notes + ".lock"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was left", p)
		}
	}
	empty := filepath.Join(dir, "empty.cursor")
	if err := os.WriteFile(empty, make([]byte, 64), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := runXIDLog(t, &XIDLog{State: f.Path, Out: out, Cursor: empty}, true)
	stop()
}

// An XID from a state write to its line: the follower's wake-up, the
// line, the write; through a pipe, and through the kernel log to a reader
// of /dev/kmsg (which the kernel wakes at its next tick).
func BenchmarkXIDToTheLog(b *testing.B) {
	f, devs := xidNode(b)
	want := "NVRM: Xid (" + pciTag(&devs[0]) + "): 43,"
	pipe := filepath.Join(b.TempDir(), "pipe")
	if err := syscall.Mkfifo(pipe, 0o600); err != nil {
		b.Fatal(err)
	}
	for _, out := range []string{pipe, "/dev/kmsg"} {
		b.Run(filepath.Base(out), func(b *testing.B) {
			if out == "/dev/kmsg" && os.Geteuid() != 0 {
				b.Skip("needs root: it writes /dev/kmsg")
			}
			// Blocking reads: each returns with what was written.
			r, err := os.OpenFile(out, os.O_RDWR, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			if out == "/dev/kmsg" {
				if _, err := r.Seek(0, io.SeekEnd); err != nil {
					b.Fatal(err)
				}
			}
			startXIDLog(b, f, out)
			buf := make([]byte, 8192)
			for b.Loop() {
				change(b, f, func(s *State) error { s.Publish(0, EventXID, 43, time.Now().UnixNano()); return nil })
				for {
					n, err := r.Read(buf)
					if err != nil && !errors.Is(err, syscall.EPIPE) {
						b.Fatal(err)
					}
					if strings.Contains(string(buf[:n]), want) {
						break
					}
				}
			}
		})
	}
}

// A state cut short under xidlog's mapping is one it cannot read: it says
// so and tries again (review: it died of the SIGBUS with a stack trace).
func TestXIDLogOutlivesAStateCutShortUnderIt(t *testing.T) {
	f, _ := xidNode(t)
	var mu sync.Mutex
	var logs []string
	x := &XIDLog{State: f.Path, Out: filepath.Join(t.TempDir(), "log")}
	x.Logf = func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, fmt.Sprintf(format, a...))
	}
	x.Started = func() {
		if err := os.Truncate(f.Path, 4096); err != nil {
			t.Error(err)
		}
	}
	quit, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- x.Run(quit) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		told := slices.ContainsFunc(logs, func(l string) bool {
			return strings.Contains(l, "cut short while in use") && strings.HasSuffix(l, "trying again each second")
		})
		mu.Unlock()
		if told {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("xidlog did not say the state was cut short; it logged %q", logs)
		}
	}
	close(quit)
	if err := <-done; err != nil {
		t.Errorf("xidlog: %v", err)
	}
}
