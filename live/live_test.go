package live

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func newState(t *testing.T, gpus int) *File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state")
	if err := Create(path, gpus, 1); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// The generated C header asserts the same sizes and offsets at compile time.
func TestGoLayoutMatchesSchema(t *testing.T) {
	for _, c := range []struct {
		name   string
		v      any
		size   int
		layout []FieldOffset
	}{
		{"header", Header{}, HeaderSize, HeaderLayout},
		{"gpu", GPU{}, GPUSize, GPULayout},
		{"event", Event{}, EventSize, EventLayout},
		{"proc", Proc{}, ProcSize, ProcLayout},
	} {
		if got := binary.Size(c.v); got != c.size {
			t.Errorf("%s: binary size %d, schema says %d", c.name, got, c.size)
		}
		typ := reflect.TypeOf(c.v)
		if got := int(typ.Size()); got != c.size {
			t.Errorf("%s: in-memory size %d, schema says %d", c.name, got, c.size)
		}
		for _, f := range c.layout {
			if sf, ok := typ.FieldByName(f.Go); !ok || sf.Offset != f.Offset {
				t.Errorf("%s.%s: Go offset %d (found %v), schema %d", c.name, f.C, sf.Offset, ok, f.Offset)
			}
		}
	}
	if got := int(reflect.TypeOf(State{}).Size()); got != Size {
		t.Errorf("State is %d bytes in memory, the file %d", got, Size)
	}
}

func TestCreateResetsInPlaceAndKeepsTheInode(t *testing.T) {
	f := newState(t, 8)
	if err := f.Update(func(s *State, now int64) error { return s.AddFault(3, Fault{Kind: FaultLost}, now) }); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(f.Path)
	if err := Create(f.Path, 4, 2); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(f.Path)
	if !os.SameFile(before, after) {
		t.Error("Create replaced the file; processes that mapped it would keep the old state")
	}
	s := f.Read()
	if s.Header.Gpus != 4 || s.GPUs[3].Faults != 0 || s.Header.Seed != 2 {
		t.Errorf("after reset: %d GPUs, GPU 3 has %d faults, seed %d; want 4, 0, 2", s.Header.Gpus, s.GPUs[3].Faults, s.Header.Seed)
	}
	if s.Header.Seq&1 != 0 {
		t.Errorf("seq %d is odd after a write", s.Header.Seq)
	}
}

func TestOpenRefusesWhatIsNotAStateFile(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("hello"), 0o644)
	alien := filepath.Join(dir, "alien")
	os.WriteFile(alien, append([]byte("NOTOURS!"), make([]byte, Size-8)...), 0o644)
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "missing"), "no such file; install a node first"},
		{short, "5 bytes, not a state file of this nvmock"},
		{alien, "not an nvmock state file (bad magic)"},
	} {
		_, err := Open(c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Open(%s) = %v, want one line naming the file and %q", c.path, err, c.want)
		}
	}
}

// Writers serialise on the lock; a reader never sees a half-written state.
func TestConcurrentWritersAndReadersAgree(t *testing.T) {
	f := newState(t, 2)
	g, err := Open(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var wg sync.WaitGroup
	const n = 200
	for _, w := range []*File{f, g} {
		wg.Add(1)
		go func(w *File) {
			defer wg.Done()
			for i := 0; i < n; i++ {
				err := w.Update(func(s *State, _ int64) error {
					// Both fields always move together.
					s.GPUs[0].Jitter++
					s.GPUs[1].Jitter = s.GPUs[0].Jitter
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		s := f.Read()
		if s.GPUs[0].Jitter != s.GPUs[1].Jitter {
			t.Fatalf("torn read: %d and %d", s.GPUs[0].Jitter, s.GPUs[1].Jitter)
		}
		select {
		case <-done:
			if got := f.Read().GPUs[0].Jitter; got != 2*n {
				t.Errorf("after %d updates from two writers: %d", 2*n, got)
			}
			return
		default:
		}
	}
}

func TestXIDsComeWithTheirLastingFaults(t *testing.T) {
	for _, c := range []struct {
		xid   uint32
		fault *Fault
	}{
		{79, &Fault{Kind: FaultLost, XID: 79, Trigger: TriggerAt}},
		{48, &Fault{Kind: FaultECC, XID: 48, Count: 1, Trigger: TriggerAt}},
		{64, &Fault{Kind: FaultRemapFailure, XID: 64, Trigger: TriggerAt}},
		{74, &Fault{Kind: FaultNvlinkDown, XID: 74, Trigger: TriggerAt}},
		{92, &Fault{Kind: FaultSBE, XID: 92, Count: 100, Trigger: TriggerAt}},
		{13, nil},
		{43, nil},
	} {
		var s State
		s.Header.Gpus = 2
		if err := s.XID(1, c.xid, 1000); err != nil {
			t.Fatal(err)
		}
		faults := s.Faults(1)
		if c.fault == nil {
			if len(faults) != 0 || s.Header.Ring != 1 || s.Events[0] != (Event{Serial: 1, TimeNS: 1000, Type: EventXID, Data: uint64(c.xid), GPU: 1}) {
				t.Errorf("XID %d: faults %v, ring %d, event %+v; want one XID event and no fault", c.xid, faults, s.Header.Ring, s.Events[0])
			}
			continue
		}
		c.fault.Param = 1000
		if len(faults) != 1 || faults[0] != *c.fault || s.Header.Ring != 0 {
			t.Errorf("XID %d: faults %+v (ring %d), want %+v", c.xid, faults, s.Header.Ring, *c.fault)
		}
	}
}

// A GPU reports any number of XIDs: the same XID again adds to the fault
// the first left (its count) and is an event of its own (review: the ninth
// XID 48 failed, the GPU holding 8 faults). A lost GPU reports nothing.
func TestTheSameXIDAgainAddsToItsFault(t *testing.T) {
	var s State
	s.Header.Gpus = 2
	for i := 0; i < 12; i++ {
		if err := s.XID(1, 48, 1000+int64(i)); err != nil {
			t.Fatalf("XID 48 number %d: %v", i+1, err)
		}
	}
	faults := s.Faults(1)
	if len(faults) != 1 || faults[0].Count != 12 {
		t.Errorf("after 12 XID 48: faults %+v, want one with 12 errors", faults)
	}
	// The first comes with its fault's events; the 11 others are in the
	// ring, an XID and a double-bit ECC event each.
	if s.Header.Ring != 22 || s.Events[0].Type != EventXID || s.Events[0].Data != 48 || s.Events[1].Type != EventDoubleBitECC {
		t.Errorf("ring %d, first events %+v %+v; want 22: XID 48 and a DBE event for each repeat", s.Header.Ring, s.Events[0], s.Events[1])
	}
	if err := s.XID(0, 79, 1000); err != nil {
		t.Fatal(err)
	}
	if err := s.XID(0, 43, 2000); err == nil || !strings.Contains(err.Error(), "GPU 0 is lost (XID 79): it reports nothing more") {
		t.Errorf("an XID on a lost GPU: %v", err)
	}
}

func TestBadRequestsGetOneLine(t *testing.T) {
	var s State
	s.Header.Gpus = 8
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"an unknown GPU", s.XID(8, 48, 0), "GPU 8: the node has GPUs 0 to 7"},
		{"XID 0", s.XID(0, 0, 0), "XID 0: not an XID (1 to 255)"},
		{"XID 300", s.XID(0, 300, 0), "XID 300: not an XID"},
		{"pid 0", s.AddProcess(Process{GPU: 0}, 0), "pid 0 is not a process"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, c.err, c.want)
		}
	}
	for i := 0; i < MaxFaults; i++ {
		if err := s.AddFault(2, Fault{Kind: FaultECC, Count: 1}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddFault(2, Fault{Kind: FaultECC, Count: 1}, 0); err == nil || !strings.Contains(err.Error(), "clear some first") {
		t.Errorf("a ninth fault: %v", err)
	}
	if n := s.ClearFaults(2, FaultLost); n != 0 || s.GPUs[2].Faults != MaxFaults {
		t.Errorf("clearing another kind removed %d", n)
	}
	if n := s.ClearFaults(2, 0); n != MaxFaults || s.GPUs[2].Faults != 0 {
		t.Errorf("clear all removed %d, %d left", n, s.GPUs[2].Faults)
	}
	// A condition on already is named, not given a second slot (review),
	// nor a link down already;
	// another link, or a later time for one not down yet, is taken.
	for _, k := range []uint32{FaultLost, FaultThermal, FaultPowerBrake, FaultRemapFailure} {
		if err := s.AddFault(3, Fault{Kind: k}, 10); err != nil {
			t.Fatal(err)
		}
		if err := s.AddFault(3, Fault{Kind: k}, 20); err == nil || !strings.Contains(err.Error(), "is on already") {
			t.Errorf("%s twice: %v", KindName(k), err)
		}
	}
	down := Fault{Kind: FaultNvlinkDown, Count: 3}
	if err := s.AddFault(1, down, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.AddFault(1, down, 20); err == nil || err.Error() != "GPU 1: NVLink 3 is down already" {
		t.Errorf("link 3 down twice: %v", err)
	}
	for _, f := range []Fault{{Kind: FaultNvlinkDown, Count: 4}, {Kind: FaultNvlinkDown, Count: 3, PID: 99}} {
		if err := s.AddFault(1, f, 20); err != nil {
			t.Errorf("%+v: %v", f, err)
		}
	}
	if s.GPUs[1].Faults != 3 {
		t.Errorf("%d faults on GPU 1, want 3", s.GPUs[1].Faults)
	}
}

func TestProcessesAreReplacedByPidAndGPUAndPrunedWhenDead(t *testing.T) {
	var s State
	s.Header.Gpus = 2
	self := uint32(os.Getpid())
	ns := PIDNamespace()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.AddProcess(Process{PID: self, GPU: 0, Type: 1, UsedBytes: 1 << 30, Name: "a", PIDNS: ns}, 0))
	must(s.AddProcess(Process{PID: self, GPU: 0, Type: 1, UsedBytes: 2 << 30, Name: "b", PIDNS: ns}, 0))
	must(s.AddProcess(Process{PID: self, GPU: 1, Type: 2, UsedBytes: 3 << 30, Name: "c", PIDNS: ns}, 0))
	// A pid that cannot exist (above pid_max), registered from here.
	must(s.AddProcess(Process{PID: 1 << 30, GPU: 1, Type: 1, Name: "gone", PIDNS: ns}, 0))
	// One from another pid namespace is kept: it cannot be checked here.
	must(s.AddProcess(Process{PID: 1 << 30, GPU: 0, Type: 1, Name: "elsewhere", PIDNS: ns + 1}, 0))
	if n := s.RemoveProcesses(Dead); n != 1 {
		t.Errorf("pruned %d, want the one dead process", n)
	}
	var names []string
	for _, p := range s.Processes() {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "b,c,elsewhere" {
		t.Errorf("processes %v, want b (replacing a), c and elsewhere", names)
	}
}

// The header counts the processes a write leaves, so that a reader with
// nothing to look for (the plugin at each container's stop) reads it alone.
func TestHeaderCountsTheProcesses(t *testing.T) {
	f := newState(t, 2)
	g0 := Generation(f.Path)
	if n := ProcessCount(f.Path); n != 0 || g0 == 0 {
		t.Fatalf("a new state: %d processes, generation %d; want 0 and its first", n, g0)
	}
	err := f.Update(func(s *State, now int64) error {
		return s.AddProcess(Process{PID: uint32(os.Getpid()), GPU: 1, Type: 1, Name: "a", PIDNS: PIDNamespace()}, now)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, g := ProcessCount(f.Path), Generation(f.Path); n != 1 || g != g0+1 {
		t.Errorf("after adding one: %d processes, generation %d; want 1 and %d", n, g, g0+1)
	}
	if n := ProcessCount(filepath.Join(t.TempDir(), "none")); n != 0 {
		t.Errorf("a missing file: %d processes, want 0", n)
	}
}

// The writer's model continues where the readings stand: no jump in
// temperature or energy at a change of load.
func TestSetLoadStartsEachSegmentWhereTheLastOneEnds(t *testing.T) {
	b := Board{IdleMW: 50000, TDPMW: 400000, IdleTempC: 33, SlowdownC: 90}
	var s State
	s.Header.Gpus = 1
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	s.SetLoad(b, 0, Loads{GPU: 100}, t0)
	g := &s.GPUs[0]
	if g.Temp0MC != 33000 || g.Model != 1 || g.Load[0] != 100 {
		t.Fatalf("first segment: %+v", g)
	}
	e0 := g.Energy0MJ
	s.SetLoad(b, 0, Loads{GPU: 0}, t0+int64(30*time.Second))
	// 30 s at 400 W is 12 kJ; one time constant covers 63 % of 45 C.
	if got := g.Energy0MJ - e0; got != 12_000_000 {
		t.Errorf("energy over 30 s at TDP: %d mJ, want 12000000", got)
	}
	if want := uint32(61445); g.Temp0MC != want { // 33000 + 45000 (1 - 1/e), rounded
		t.Errorf("temperature after one time constant: %d mC, want %d", g.Temp0MC, want)
	}
	if g.PrevLoad[0] != 100 || g.PrevSinceNS != uint64(t0) {
		t.Errorf("previous segment: %+v", g)
	}
	// A capped target: full power on a board with a low slowdown threshold.
	if got := (Board{IdleMW: 50000, TDPMW: 400000, IdleTempC: 60, SlowdownC: 80}).TargetMC(100); got != 77000 {
		t.Errorf("target under a slowdown of 80 C: %v, want 77000", got)
	}
}

// The energy counter never goes back (exporters take power from its
// differences): not when a load ends (clear --load, an apply without it),
// not when the state's clock is frozen at an earlier time or thawed from
// an advanced one. Review: each took it back to the static counter, or to
// an earlier time's.
func TestTheEnergyCounterNeverGoesBack(t *testing.T) {
	b := Board{IdleMW: 50000, TDPMW: 400000, IdleTempC: 33, SlowdownC: 90}
	var s State
	s.Header.Gpus = 1
	t0 := time.Now().UnixNano()
	read := func(at int64) (uint32, uint64) {
		g := &s.GPUs[0]
		if g.Model == 0 {
			return b.IdleTempC * 1000, b.staticEnergyMJ()
		}
		return b.At(g.Load[0], g.Temp0MC, g.Energy0MJ, at-int64(g.SinceNS))
	}
	s.SetLoad(b, 0, Loads{GPU: 100}, t0)
	t1 := t0 + int64(60*time.Second)
	temp1, e1 := read(t1)
	s.ResetToIdle(b, 0, t1)
	if temp, e := read(t1); e != e1 || temp != temp1 || s.GPUs[0].Load != [4]uint32{} {
		t.Errorf("the load ended: %d mC, %d mJ, load %v; want %d mC and %d mJ where it stood, no load", temp, e, s.GPUs[0].Load, temp1, e1)
	}
	if _, e := read(t1 + int64(time.Second)); e <= e1 {
		t.Errorf("idle a second later: %d mJ, want more than %d", e, e1)
	}
	// The clock goes back 10 minutes: readings carry on from where they
	// stood; forward, they move as time does.
	back := t1 - int64(10*time.Minute)
	s.ClockMoved([]Board{b}, t1, back)
	if _, e := read(back); e != e1 {
		t.Errorf("the clock went back: %d mJ, want %d", e, e1)
	}
	s.ClockMoved([]Board{b}, back, t1)
	if _, e := read(t1); e <= e1 {
		t.Errorf("the clock went forward 10 minutes: %d mJ, want more than %d", e, e1)
	}
	// A GPU on static readings stays there.
	var idle State
	idle.Header.Gpus = 1
	idle.ResetToIdle(b, 0, t1)
	idle.ClockMoved([]Board{b}, t1, back)
	if idle.GPUs[0].Model != 0 {
		t.Errorf("a GPU on static readings went to the model: %+v", idle.GPUs[0])
	}
}

func TestBoardsComeFromTheSnapshotOfTheState(t *testing.T) {
	root := t.TempDir()
	for _, c := range []struct{ state, snap string }{
		{filepath.Join(root, "a", "state"), filepath.Join(root, "a", "snapshot")},                                    // exec, a snapshot used directly
		{filepath.Join(root, "b", "live", "state"), filepath.Join(root, "b", "driver", "etc", "nvmock", "snapshot")}, // installed
	} {
		if _, err := Boards(c.state); err == nil || !strings.Contains(err.Error(), "no snapshot beside it") {
			t.Errorf("%s without a snapshot: %v", c.state, err)
		}
		if err := os.MkdirAll(filepath.Dir(c.snap), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(c.snap, []byte("not a snapshot"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Boards(c.state); err == nil || !strings.Contains(err.Error(), c.snap) {
			t.Errorf("%s: %v, want the snapshot %s read (and refused)", c.state, err, c.snap)
		}
	}
}

func TestOpenSaysWhereToChangeAReadOnlyState(t *testing.T) {
	for _, e := range []error{syscall.EROFS, os.ErrPermission} {
		err := openError("/etc/nvmock/state", &os.PathError{Op: "open", Path: "/etc/nvmock/state", Err: e})
		if !strings.Contains(err.Error(), "state /etc/nvmock/state: ") || !strings.Contains(err.Error(), "change it on the node, in nvmock exec or in the chart's pod") {
			t.Errorf("%v: %v", e, err)
		}
	}
}
