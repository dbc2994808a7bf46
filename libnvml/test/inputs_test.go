//go:build integration

package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/live"
)

// inputGPUs is how many GPUs the damaged node has: GPU 0 in MIG mode with
// instances and a process on one, GPU 1 loaded, faulted and busy.
const inputGPUs = 2

// mutations is how many damaged files each test reads:
// NVMOCK_INPUT_MUTATIONS for longer runs.
func mutations(t *testing.T, def int) int {
	if s := os.Getenv("NVMOCK_INPUT_MUTATIONS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("NVMOCK_INPUT_MUTATIONS=%q: want a positive number", s)
		}
		return n
	}
	return def
}

// field is one integer of a record: where it sits and how wide it is.
type field struct {
	name      string
	off, size int
}

// fieldsOf lists every integer (and every element of an integer array) of
// a record type.
func fieldsOf(t reflect.Type) []field {
	var out []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		switch k := f.Type.Kind(); {
		case k == reflect.Uint32 || k == reflect.Uint64:
			out = append(out, field{f.Name, int(f.Offset), int(f.Type.Size())})
		case k == reflect.Array && f.Type.Elem().Kind() != reflect.Uint8:
			es := int(f.Type.Elem().Size())
			for j := 0; j < f.Type.Len(); j++ {
				out = append(out, field{fmt.Sprintf("%s[%d]", f.Name, j), int(f.Offset) + j*es, es})
			}
		}
	}
	return out
}

// region is a part of a file worth damaging.
type region struct {
	name      string
	off, size int
	fields    []field
}

// damage is one mutation: what it did, for the failure message.
type damage struct {
	what string
	data []byte
}

func put(b []byte, f field, v uint64) {
	for k := 0; k < f.size; k++ {
		b[f.off+k] = byte(v >> (8 * k))
	}
}

// valuesFor are the values a field is set to: the edges and the first
// values past the state's capacities.
func valuesFor(size int) []uint64 {
	max := uint64(1)<<(8*size) - 1
	if size == 8 {
		max = ^uint64(0)
	}
	return []uint64{0, max, max - 1, max/2 + 1, 1 << 20, 7, 8, 9, 15, 16, 64, 120, 256}
}

// mutate makes mutation i of base: field sweeps (each field of each region
// in turn, each time another value), random bytes, and whole-area damage
// (special, which knows the format).
func mutate(base []byte, regions []region, i int, special func(b []byte, r *rand.Rand, k int) string) damage {
	r := rand.New(rand.NewPCG(uint64(i), 0x6e766d6f636b))
	b := bytes.Clone(base)
	switch i % 4 {
	case 0, 1:
		var all []field
		var names []string
		for _, rg := range regions {
			for _, f := range rg.fields {
				all = append(all, field{f.name, rg.off + f.off, f.size})
				names = append(names, rg.name)
			}
		}
		j := i/4*2 + i%4
		f := all[j%len(all)]
		vs := valuesFor(f.size)
		v := vs[(j/len(all)+j)%len(vs)]
		put(b, f, v)
		return damage{fmt.Sprintf("#%d: %s.%s = %#x", i, names[j%len(all)], f.name, v), b}
	case 2:
		rg := regions[r.IntN(len(regions))]
		n := 1 + r.IntN(16)
		var at []string
		for k := 0; k < n; k++ {
			o := rg.off + r.IntN(rg.size)
			b[o] = byte(r.Uint32())
			at = append(at, fmt.Sprintf("%d=%#x", o, b[o]))
		}
		return damage{fmt.Sprintf("#%d: %d random bytes in %s: %s", i, n, rg.name, strings.Join(at, " ")), b}
	default:
		return damage{fmt.Sprintf("#%d: %s", i, special(b, r, i/4)), b}
	}
}

// migNode makes the node's snapshot and a live state with something in
// every part of the file, and returns the snapshot's path and the state's
// bytes.
func migNode(t *testing.T) (string, []byte) {
	snap, _ := testenv.Snapshot(t, "a100", inputGPUs)
	f := testenv.LiveState(t, snap, inputGPUs, time.Time{})
	devs, err := live.Snapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	row := func(name string) int {
		i := slices.Index(live.MIGNames(&devs[0]), name)
		if i < 0 {
			t.Fatalf("a100 has no MIG profile %s: %v", name, live.MIGNames(&devs[0]))
		}
		return i
	}
	err = f.Update(func(s *live.State, now int64) error {
		if err := s.SetMIGMode(0, true); err != nil {
			return err
		}
		g3, err := s.CreateGPUInstance(0, &devs[0], row("3g.20gb"))
		if err != nil {
			return err
		}
		for _, c := range []uint32{2, 1} {
			if _, err := s.CreateComputeInstance(0, g3, &devs[0], c); err != nil {
				return err
			}
		}
		g1, err := s.CreateGPUInstance(0, &devs[0], row("1g.5gb"))
		if err != nil {
			return err
		}
		if _, err := s.CreateComputeInstance(0, g1, &devs[0], 1); err != nil {
			return err
		}
		pid := uint32(os.Getpid())
		for _, p := range []live.Process{
			{PID: pid, GPU: 0, MIG: &live.MIGRef{GI: g3, CI: 0}, Type: 1, UsedBytes: 1 << 30, Name: "train", Owner: "ctl"},
			{PID: pid, GPU: 1, Type: 3, UsedBytes: 2 << 30, Name: "serve", Owner: "ctl"},
			{PID: 1, GPU: 1, Type: 2, UsedBytes: 1 << 20, Name: "init", Owner: "ctl"},
		} {
			if err := s.AddProcess(p, now); err != nil {
				return err
			}
		}
		s.SetLoad(live.BoardOf(&devs[1]), 1, live.Loads{GPU: 70, Memory: 40, Decoder: 10, Jitter: 5}, now)
		for _, fl := range []live.Fault{
			{Kind: live.FaultSBE, Count: 3},
			{Kind: live.FaultNvlinkDown, Count: 2},
			{Kind: live.FaultThermal, Trigger: live.TriggerCalls, Param: 5},
			{Kind: live.FaultECC, XID: 48, Count: 1, Trigger: live.TriggerAt, Param: uint64(now) - 1},
		} {
			if err := s.AddFault(1, fl, now); err != nil {
				return err
			}
		}
		for k, x := range []uint32{13, 31, 43, 45, 13, 31} {
			if err := s.XID(k%inputGPUs, x, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(snap), "state"))
	if err != nil {
		t.Fatal(err)
	}
	return snap, data
}

// stateRegions are the parts of the state file with content.
func stateRegions() []region {
	var s live.State
	hdr := fieldsOf(reflect.TypeOf(s.Header))
	hdr = slices.DeleteFunc(hdr, func(f field) bool { return f.off < int(checkedHeaderEnd()) })
	gpus := int(reflect.TypeOf(s).Field(1).Offset)
	events := int(reflect.TypeOf(s).Field(2).Offset)
	procs := int(reflect.TypeOf(s).Field(3).Offset)
	gf, ef, pf := fieldsOf(reflect.TypeOf(live.GPU{})), fieldsOf(reflect.TypeOf(live.Event{})), fieldsOf(reflect.TypeOf(live.Proc{}))
	rs := []region{{"header", 0, live.HeaderSize, hdr}}
	for g := 0; g < inputGPUs; g++ {
		rs = append(rs, region{fmt.Sprintf("gpu[%d]", g), gpus + g*live.GPUSize, live.GPUSize, gf})
	}
	for e := 0; e < 5; e++ {
		rs = append(rs, region{fmt.Sprintf("event[%d]", e), events + e*live.EventSize, live.EventSize, ef})
	}
	for p := 0; p < 3; p++ {
		rs = append(rs, region{fmt.Sprintf("proc[%d]", p), procs + p*live.ProcSize, live.ProcSize, pf})
	}
	return rs
}

// checkedHeaderEnd is where the header fields the library does not check
// at map time start (those before are tested elsewhere).
func checkedHeaderEnd() uintptr {
	f, _ := reflect.TypeOf(live.Header{}).FieldByName("Seq")
	return f.Offset
}

// stateSpecial damages what a field at a time does not: a writer that
// died inside, and MIG and table areas scrambled whole.
func stateSpecial(b []byte, r *rand.Rand, k int) string {
	var s live.State
	st := reflect.TypeOf(s)
	gpu0 := int(st.Field(1).Offset)
	seqF, _ := st.Field(0).Type.FieldByName("Seq")
	gf := reflect.TypeOf(live.GPU{})
	scramble := func(name string, limit uint32) {
		f, _ := gf.FieldByName(name)
		for j := 0; j < f.Type.Len(); j++ {
			v := r.Uint32()
			if limit != 0 {
				v %= limit
			}
			put(b, field{"", gpu0 + int(f.Offset) + j*4, 4}, uint64(v))
		}
	}
	switch k % 6 {
	case 0:
		put(b, field{"", int(seqF.Offset), 4}, uint64(r.Uint32()|1))
		return "seq left odd"
	case 1:
		for _, n := range []string{"GIProfile", "GIStart", "CISlices", "CIStart"} {
			scramble(n, 10)
		}
		return "gpu[0] MIG area scrambled with small values"
	case 2:
		for _, n := range []string{"GIProfile", "GIStart", "CISlices", "CIStart"} {
			scramble(n, 0)
		}
		return "gpu[0] MIG area scrambled"
	case 3:
		for _, n := range []string{"GIProfile", "CISlices"} {
			scramble(n, 3)
		}
		return "gpu[0] every instance slot filled"
	case 5:
		// start + size wraps past 2^32 into range.
		sl, _ := gf.FieldByName("CISlices")
		cs, _ := gf.FieldByName("CIStart")
		for j := 0; j < sl.Type.Len(); j++ {
			if binary.LittleEndian.Uint32(b[gpu0+int(sl.Offset)+j*4:]) == 1 {
				put(b, field{"", gpu0 + int(cs.Offset) + j*4, 4}, 0xffffffff)
			}
		}
		return "gpu[0] 1-slice compute instances start at 2^32-1"
	default:
		procs := int(st.Field(3).Offset)
		for o := procs; o < procs+4*live.ProcSize; o++ {
			b[o] = byte(r.Uint32())
		}
		return "first process slots scrambled"
	}
}

// sanitizerReport finds what a sanitized program reports.
var sanitizerReport = regexp.MustCompile(`ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:`)

// runDamaged runs a program on one damaged node and returns what is wrong:
// a hang, a signal, a sanitizer report, or an unexpected exit.
func runDamaged(timeout time.Duration, env []string, name string, args ...string) (string, string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.Dir = filepath.Dir(name)
	cmd.WaitDelay = 2 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return out.String(), fmt.Sprintf("still running after %v", timeout)
	case errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled():
		return out.String(), fmt.Sprintf("killed by %v", ee.Sys().(syscall.WaitStatus).Signal())
	case err != nil && !errors.As(err, &ee):
		return out.String(), err.Error()
	case sanitizerReport.MatchString(out.String()):
		return out.String(), "sanitizer report"
	}
	return out.String(), ""
}

// writeNode puts one damaged node's files in a directory of their own and
// returns the snapshot's path.
func writeNode(dir string, snap, state []byte) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{"snapshot": snap, "state": state} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, "snapshot"), nil
}

// fuzz reads n damaged nodes with the sanitized reader, one at a time per
// CPU, and every smiEvery-th with the real nvidia-smi and the normal
// library; check judges the reader's output.
func fuzz(t *testing.T, n, smiEvery int, node func(i int) (damage, []byte, []byte), check func(d damage, out string) string) {
	libDir := buildSanitizedLib(t)
	bin := filepath.Join(t.TempDir(), "inputs")
	gcc(t, append(append([]string{"-O1", "-I" + testenv.NVMLHeaderDir(t), "-I" + testDir()}, sanitizerFlags...),
		"-o", bin, filepath.Join(testDir(), "inputs.c"), filepath.Join(testDir(), "torture_gen.c"),
		"-L"+libDir, "-l:libnvidia-ml.so.1")...)
	smi := testenv.NvidiaSMI(t)
	root := t.TempDir()
	var (
		mu       sync.Mutex
		failures int
		wg       sync.WaitGroup
	)
	fail := func(d damage, prog, why, out string) {
		mu.Lock()
		defer mu.Unlock()
		if failures++; failures <= 5 {
			if len(out) > 6000 {
				out = out[:6000] + "\n..."
			}
			t.Errorf("%s: %s: %s; output:\n%s", d.what, prog, why, out)
		}
	}
	next := make(chan int)
	start := time.Now()
	for w := 0; w < runtime.NumCPU(); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				d, snapData, stateData := node(i)
				snap, err := writeNode(filepath.Join(root, strconv.Itoa(i)), snapData, stateData)
				if err != nil {
					fail(d, "setup", err.Error(), "")
					continue
				}
				env := testenv.Env(t, snap, "LD_LIBRARY_PATH="+libDir,
					"ASAN_OPTIONS=detect_leaks=0:halt_on_error=1", "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1")
				out, why := runDamaged(30*time.Second, env, bin)
				if why == "" {
					why = check(d, out)
				}
				if i == 0 {
					t.Logf("%s: %s", d.what, out)
				}
				if why != "" {
					fail(d, "inputs", why, out)
				}
				if smiEvery > 0 && i%smiEvery == 0 {
					for _, args := range [][]string{{"-q"}, {"-L"}, {"mig", "-lgi"}, {"mig", "-lci"}} {
						out, why := runDamaged(30*time.Second, testenv.Env(t, snap), smi, args...)
						if why != "" {
							fail(d, "nvidia-smi "+strings.Join(args, " "), why, out)
						}
					}
				}
				os.RemoveAll(filepath.Dir(snap))
			}
		}()
	}
	enough := func() bool { mu.Lock(); defer mu.Unlock(); return failures >= 5 }
	for i := 0; i < n && !enough(); i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	t.Logf("%d damaged nodes read in %v", n, time.Since(start).Round(time.Millisecond))
}

// A live state file a privileged container or a dying writer left damaged
// neither crashes, hangs, nor takes out of bounds a program that reads
// every part of it; nvidia-smi included.
func TestDamagedStateFile(t *testing.T) {
	snap, base := migNode(t)
	snapData, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := live.Snapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	regions := stateRegions()
	fuzz(t, mutations(t, 300), 25, func(i int) (damage, []byte, []byte) {
		d := mutate(base, regions, i, stateSpecial)
		return d, snapData, d.data
	}, func(d damage, out string) string {
		if !strings.Contains(out, "handles read") {
			return "the reader did not finish"
		}
		return sameMIG(t, devs, d.data, out)
	})
}

var migCount = regexp.MustCompile(`(?m)^inputs: GPU (\d+): (\d+) MIG devices$`)

// sameMIG says how the library's MIG devices (the reader's counts) differ
// from what the Go side (ctl, the plugin) makes of the same damaged file:
// both drop the instances a board could not have made, by one rule written
// twice (libnvml/mig.c, live/migclean.go). A file the library does not
// map (a header not this node's, a dead writer's odd seq) is not compared.
func sameMIG(t *testing.T, devs []snapshot.Device, state []byte, out string) string {
	path := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(path, state, 0o644); err != nil {
		return err.Error()
	}
	s, err := live.ReadFile(path)
	if err != nil || s.Header.Gpus != uint32(len(devs)) || s.Header.Seq&1 != 0 {
		return ""
	}
	for _, m := range migCount.FindAllStringSubmatch(out, -1) {
		gpu, _ := strconv.Atoi(m[1])
		migs := s.MIGDevices(gpu, &devs[gpu])
		if strconv.Itoa(len(migs)) != m[2] {
			return fmt.Sprintf("GPU %d: the library has %s MIG devices, the Go side %d", gpu, m[2], len(migs))
		}
		// The plugin names each by its profile row (inject.ProbeMIG).
		names := live.MIGNames(&devs[gpu])
		for _, d := range migs {
			if d.Row >= len(names) {
				return fmt.Sprintf("GPU %d: a MIG device of profile row %d, past the %d names", gpu, d.Row, len(names))
			}
		}
	}
	return ""
}

// snapRefusal is snap_check's warning: one line naming the file.
var snapRefusal = regexp.MustCompile(`(?m)snapshot \S+/snapshot: [A-Za-z].*$`)

// A snapshot damaged past its header is refused by snap_check with its
// one-line warning, or every getter reads it cleanly.
func TestDamagedSnapshotFile(t *testing.T) {
	snap, state := migNode(t)
	base, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	var regions []region
	df := fieldsOf(reflect.TypeOf(snapshot.Device{}))
	ds := int(reflect.TypeOf(snapshot.Device{}).Size())
	for g := 0; g < inputGPUs; g++ {
		regions = append(regions, region{fmt.Sprintf("device[%d]", g), snapshot.HeaderSize + g*ds, ds, df})
	}
	if rest := len(base) - snapshot.HeaderSize - inputGPUs*ds; rest > 0 {
		regions = append(regions, region{"nics and pool", snapshot.HeaderSize + inputGPUs*ds, rest, nil})
	}
	fuzz(t, mutations(t, 300), 0, func(i int) (damage, []byte, []byte) {
		d := mutate(base, regions, i, func(b []byte, r *rand.Rand, k int) string {
			rg := regions[k%inputGPUs]
			dt := reflect.TypeOf(snapshot.Device{})
			from, _ := dt.FieldByName("MIGCurrent")
			to, _ := dt.FieldByName("MIGGINames")
			for o := rg.off + int(from.Offset); o < rg.off+int(to.Offset); o++ {
				b[o] = byte(r.Uint32() % 12)
			}
			return rg.name + " MIG tables scrambled"
		})
		return d, d.data, state
	}, func(d damage, out string) string {
		// The Go side (ctl, the plugin) reads the same files the library
		// maps, and refuses the others with the library's words.
		_, devs, err := snapshot.Read(d.data)
		switch {
		case strings.Contains(out, "handles read"):
			if err != nil {
				return "the library read it, the Go side refused it: " + err.Error()
			}
			return sameMIG(t, devs, state, out)
		case strings.Contains(out, "inputs: refused") && snapRefusal.MatchString(out):
			if err == nil {
				return "the library refused it, the Go side read it"
			}
			if !strings.Contains(out, ": "+err.Error()) {
				return fmt.Sprintf("the library and the Go side (%q) refused it for different reasons", err)
			}
			return ""
		}
		return "neither read nor refused with a warning"
	})
}

// A state made for another GPU count than its snapshot's is named so, with
// both counts, rather than as another node's.
func TestAStateOfAnotherGPUCountSaysSo(t *testing.T) {
	snap, _ := testenv.Snapshot(t, "t4", 1)
	st := filepath.Join(t.TempDir(), "state")
	if err := live.Create(st, 8, 1); err != nil {
		t.Fatal(err)
	}
	out, why := runDamaged(30*time.Second, testenv.Env(t, snap, "NVMOCK_STATE="+st), testenv.NvidiaSMI(t), "-L")
	want := "state " + st + ": made for 8 GPUs, the snapshot has 1; readings stay static"
	if why != "" || !strings.Contains(out, want) || !strings.Contains(out, "GPU 0: Tesla T4") {
		t.Errorf("nvidia-smi -L with a state of 8 GPUs beside a snapshot of 1: %s\n%s\nwant the GPU listed and %q", why, out, want)
	}
	// A change refused for it says the same (review: "another version's or another node's").
	out, _ = runDamaged(30*time.Second, testenv.Env(t, snap, "NVMOCK_STATE="+st), testenv.NvidiaSMI(t), "-c", "EXCLUSIVE_PROCESS")
	if want := st + " was made for 8 GPUs, the snapshot has 1: reinstall the node"; !strings.Contains(out, want) {
		t.Errorf("nvidia-smi -c with that state:\n%s\nwant %q", out, want)
	}
}

// A writer that died inside the seqlock leaves it odd: readers take the
// state as it lies, as the Go readers do, where they fell back to the
// snapshot and the node's MIG devices vanished (review); the next writer
// says what it found.
func TestAStateADeadWriterLeftIsReadAsItLies(t *testing.T) {
	snap, data := migNode(t)
	seqAt := int(unsafe.Offsetof(live.State{}.Header) + unsafe.Offsetof(live.Header{}.Seq))
	smi := testenv.NvidiaSMI(t)
	list := func(what string) string {
		out, why := runDamaged(30*time.Second, testenv.Env(t, snap), smi, "-L")
		if why != "" {
			t.Fatalf("%s: nvidia-smi -L: %s\n%s", what, why, out)
		}
		return out
	}
	want := list("a whole state")
	if strings.Count(want, "MIG ") != 3 {
		t.Fatalf("the node's 3 MIG devices are not listed:\n%s", want)
	}
	odd := slices.Clone(data)
	binary.LittleEndian.PutUint32(odd[seqAt:], binary.LittleEndian.Uint32(odd[seqAt:])|1)
	if err := os.WriteFile(filepath.Join(filepath.Dir(snap), "state"), odd, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := list("an odd seq"); got != want {
		t.Errorf("nvidia-smi -L with a dead writer's odd seq:\n%s\nwant as before:\n%s", got, want)
	}
	// A live writer holding the lock (here util-linux's flock(1)) is waited
	// for longer, then read past the same way.
	hold := exec.Command("flock", filepath.Join(filepath.Dir(snap), "state"), "sleep", "30")
	hold.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := hold.Start(); err != nil {
		t.Fatalf("flock(1) from util-linux: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // flock(1) takes the lock
	got := list("an odd seq under a held lock")
	syscall.Kill(-hold.Process.Pid, syscall.SIGKILL)
	hold.Wait()
	if got != want {
		t.Errorf("nvidia-smi -L with an odd seq and the lock held:\n%s\nwant as before:\n%s", got, want)
	}
	out, why := runDamaged(30*time.Second, testenv.Env(t, snap), smi, "-i", "1", "-c", "EXCLUSIVE_PROCESS")
	if why != "" || !strings.Contains(out, "a writer died while changing it; its change may be partly applied") {
		t.Errorf("the next writer (nvidia-smi -c): %s\n%s\nwant it to say a writer died", why, out)
	}
	st, err := os.ReadFile(filepath.Join(filepath.Dir(snap), "state"))
	if err != nil || binary.LittleEndian.Uint32(st[seqAt:])&1 != 0 {
		t.Errorf("the seq is still odd after a write (%v)", err)
	}
}
