package live

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/profile"
)

// fuzzBase is an a100 8-GPU node with something in every part of its
// state: loads, faults, XID events, processes and a MIG layout.
var fuzzBase = sync.OnceValues(func() ([]snapshot.Device, []byte) {
	p, err := profile.Builtin("a100")
	if err != nil {
		panic(err)
	}
	p.GPUs = 8
	data, err := snapshot.Compile(p, snapshot.Options{Seed: "fuzz"})
	if err != nil {
		panic(err)
	}
	_, devs, err := snapshot.Read(data)
	if err != nil {
		panic(err)
	}
	l, err := profile.ParseMIGLayout("0=all-1g.5gb;1=all-balanced;2=7g.40gb", p.Board.Modes.MIG, 8)
	if err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "nvmock-fuzz")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state")
	if err := Create(path, 8, 7); err != nil {
		panic(err)
	}
	f, err := Open(path)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	err = f.Update(func(s *State, now int64) error {
		if err := s.ApplyMIGLayout(devs, l); err != nil {
			return err
		}
		b := BoardOf(&devs[4])
		s.SetLoad(b, 4, Loads{GPU: 80, Memory: 40, Jitter: 5}, now)
		for _, fl := range []Fault{{Kind: FaultThermal}, {Kind: FaultECC, Count: 3}, {Kind: FaultXID, XID: 13, Trigger: TriggerCalls, Param: 10}} {
			if err := s.AddFault(3, fl, now); err != nil {
				return err
			}
		}
		for _, x := range []uint32{13, 31, 48, 92} {
			if err := s.XID(5, x, now); err != nil {
				return err
			}
		}
		m := s.MIGDevices(0, &devs[0])
		for _, p := range []Process{
			{PID: 100, GPU: 0, MIG: &MIGRef{GI: m[0].GI, CI: m[0].CI}, Type: 1, UsedBytes: 1 << 30, Name: "train", Owner: "ctl"},
			{PID: 101, GPU: 6, Type: 3, UsedBytes: 2 << 30, Name: "render", Owner: "container:" + strings.Repeat("a", 64)},
		} {
			if err := s.AddProcess(p, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	data, err = os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	return devs, data
})

// fieldAt is the file offset of a field of GPU g (-1: the header) or of
// proc slot p.
func fieldAt(layout []FieldOffset, name string, base int) uint32 {
	for _, f := range layout {
		if f.C == name {
			return uint32(base + int(f.Offset))
		}
	}
	panic(name)
}

func gpuAt(g int) int  { return HeaderSize + g*GPUSize }
func procAt(p int) int { return HeaderSize + MaxGPUs*GPUSize + MaxEvents*EventSize + p*ProcSize }

// FuzzStateFile damages a real state file (offset and bytes: the header
// mostly stays whole and the body is damaged, as a writer killed half way
// or a stray write leaves it) and runs every Go reader and a few writers on
// it: none panics or hangs, an error is one line naming the file, and a
// writer's result is again a file every reader takes.
func FuzzStateFile(f *testing.F) {
	ff := func(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }
	f.Add(uint32(0), []byte{})
	f.Add(fieldAt(HeaderLayout, "gpus", 0), ff(1000))
	f.Add(fieldAt(HeaderLayout, "gpus", 0), ff(64))
	f.Add(fieldAt(HeaderLayout, "gpu_size", 0), ff(8))
	f.Add(fieldAt(HeaderLayout, "ring", 0), ff(0xffffffff))
	f.Add(fieldAt(HeaderLayout, "procs", 0), ff(0))
	f.Add(fieldAt(GPULayout, "faults", gpuAt(3)), ff(200))
	f.Add(fieldAt(GPULayout, "faults", gpuAt(5)), ff(9))
	f.Add(fieldAt(GPULayout, "gi_profile", gpuAt(0)), ff(0xffffffff))
	f.Add(fieldAt(GPULayout, "gi_profile", gpuAt(1))+4*7, ff(99))
	f.Add(fieldAt(GPULayout, "gi_start", gpuAt(0))+4*7, ff(40))
	f.Add(fieldAt(GPULayout, "ci_slices", gpuAt(2)), ff(33))
	f.Add(fieldAt(GPULayout, "ci_start", gpuAt(2)), ff(5))
	f.Add(fieldAt(GPULayout, "mig_pending", gpuAt(1)), ff(7))
	f.Add(fieldAt(GPULayout, "model", gpuAt(4)), append(ff(1), ff(0xffffffff)...))
	f.Add(fieldAt(ProcLayout, "gpu", procAt(0)), ff(500))
	f.Add(fieldAt(ProcLayout, "mig_gi", procAt(0)), ff(0xffffffff))
	f.Add(fieldAt(ProcLayout, "name", procAt(1)), []byte(strings.Repeat("\xff", 200)))
	f.Add(uint32(HeaderSize+MaxGPUs*GPUSize), []byte(strings.Repeat("\x01", 80)))
	f.Fuzz(func(t *testing.T, off uint32, patch []byte) {
		devs, base := fuzzBase()
		data := append([]byte(nil), base...)
		copy(data[int(off)%Size:], patch)
		// A dead writer's odd seq costs each read 100 ms
		// (TestADeadWritersStateReads); here it would only slow the fuzzer.
		data[fieldAt(HeaderLayout, "seq", 0)] &^= 1
		path := filepath.Join(t.TempDir(), "state")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			fuzzReadersAndWriters(t, path, devs)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("readers and writers hang on the damaged state")
		}
	})
}

func fuzzReadersAndWriters(t *testing.T, path string, devs []snapshot.Device) {
	Generation(path)
	ProcessCount(path)
	IsState(path)
	if !fuzzRead(t, path, devs) {
		return
	}
	f, err := Open(path)
	if err != nil {
		oneLine(t, path, err)
		return
	}
	defer f.Close()
	readAll(t, f.Read(), devs)
	l, err := profile.ParseMIGLayout("1=all-1g.5gb;7=3g.20gb*2", MIGTable(&devs[0]), len(devs))
	if err != nil {
		t.Fatal(err)
	}
	boards := make([]Board, len(devs))
	for i := range devs {
		boards[i] = BoardOf(&devs[i])
	}
	for _, w := range []func(s *State, now int64) error{
		func(s *State, now int64) error {
			p := Process{PID: 4242, GPU: 6, Type: 1, UsedBytes: 1 << 20, Name: "p", Owner: "ctl"}
			if err := s.AddProcess(p, now); err != nil {
				return err
			}
			return s.CheckMemory(p, devs)
		},
		func(s *State, now int64) error {
			p := Process{PID: 4243, GPU: 0, MIG: &MIGRef{GI: 13, CI: 0}, Type: 1, UsedBytes: 1 << 20}
			if err := s.AddProcess(p, now); err != nil {
				return err
			}
			return s.CheckMemory(p, devs)
		},
		func(s *State, now int64) error { return s.AddFault(3, Fault{Kind: FaultPowerBrake}, now) },
		func(s *State, now int64) error { return s.XID(5, 48, now) },
		func(s *State, now int64) error { s.ClearFaults(5, FaultECC); return nil },
		func(s *State, now int64) error { return s.ApplyMIGLayout(devs, l) },
		func(s *State, now int64) error {
			if _, err := s.CreateGPUInstance(0, &devs[0], 0); err != nil {
				return err
			}
			_, err := s.CreateComputeInstance(2, 0, &devs[2], 1)
			return err
		},
		func(s *State, now int64) error { return (&Spec{}).Apply(s, boards, now) },
		func(s *State, now int64) error {
			s.RemoveProcesses(func(Process) bool { return true })
			return s.ClearMIG(0, false)
		},
	} {
		if err := f.Update(w); err != nil {
			oneLine(t, "", err)
			continue
		}
		if !fuzzRead(t, path, devs) {
			t.Fatal("a writer's result does not read")
		}
	}
}

// fuzzRead runs the readers that take a path: false if the state is
// refused.
func fuzzRead(t *testing.T, path string, devs []snapshot.Device) bool {
	s, err := ReadFile(path)
	if err != nil {
		oneLine(t, path, err)
		return false
	}
	readAll(t, s, devs)
	return true
}

// readAll reads a state as ctl status and the plugin do.
func readAll(t *testing.T, s *State, devs []snapshot.Device) {
	for i := 0; i < int(s.Header.Gpus); i++ {
		g := &s.GPUs[i]
		_ = g.Load
		for _, fl := range s.Faults(i) {
			KindName(fl.Kind)
		}
		if i >= len(devs) {
			continue
		}
		names := MIGNames(&devs[i])
		for _, m := range s.MIGDevices(i, &devs[i]) {
			_ = names[m.Row]
			if m.Slices > devs[i].MIGGIComputeSlices[m.Row] {
				t.Fatalf("MIG device %+v: more slices than its GPU instance", m)
			}
		}
	}
	for _, p := range s.Processes() {
		_ = p.Name + p.Owner
	}
}

func oneLine(t *testing.T, path string, err error) {
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("error of more than one line: %q", err)
	}
	if path != "" && !strings.Contains(err.Error(), path) {
		t.Fatalf("error does not name the file: %q", err)
	}
}

// A writer killed inside the seqlock leaves seq odd: readers take the
// state after 100 ms, and the next write moves on from it.
func TestADeadWritersStateReads(t *testing.T) {
	f := newState(t, 2)
	f.state().Header.Seq = 7
	var said []string
	old := Warn
	Warn = func(msg string) { said = append(said, msg) }
	t.Cleanup(func() { Warn = old })
	start := time.Now()
	if s, err := ReadFile(f.Path); err != nil || s.Header.Gpus != 2 {
		t.Fatalf("ReadFile: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("ReadFile took %v on an odd seq", d)
	}
	if err := f.Update(func(s *State, now int64) error { return s.AddFault(1, Fault{Kind: FaultLost}, now) }); err != nil {
		t.Fatal(err)
	}
	if s := f.Read(); s.Header.Seq&1 != 0 || s.GPUs[1].Faults != 1 {
		t.Errorf("after a write: seq %d, %d faults", s.Header.Seq, s.GPUs[1].Faults)
	}
	if want := "state " + f.Path + ": a writer died while changing it; its change may be partly applied"; !slices.Equal(said, []string{want}) {
		t.Errorf("the writer after a dead one said %q, want %q", said, want)
	}
}

// A state reset in place keeps its size: a reader's map of it stays
// whole (review: cut to nothing and allocated again, a reader's next
// load was SIGBUS).
func TestZeroKeepsTheMapWhole(t *testing.T) {
	f := newState(t, 2)
	fd, err := os.OpenFile(f.Path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	m, err := unix.Mmap(int(fd.Fd()), 0, Size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	stop := make(chan struct{})
	done := make(chan byte)
	go func() { // a reader reading the last page throughout
		var b byte
		for {
			select {
			case <-stop:
				done <- b
				return
			default:
				b |= m[Size-1]
			}
		}
	}()
	if err := zero(fd, Size); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-done
	if st, err := fd.Stat(); err != nil || st.Size() != Size || !bytes.Equal(m[:64], make([]byte, 64)) {
		t.Errorf("after zero: size %v (%v), header %x; want %d bytes of zeros", st.Size(), err, m[:16], Size)
	}
}
