package live

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// nvmlEventType bits (nvml.h).
const (
	EventSingleBitECC = 0x1
	EventDoubleBitECC = 0x2
	EventXID          = 0x8
)

// Fault is one injected fault on one GPU.
type Fault struct {
	Kind    uint32 // Fault*
	XID     uint32 // the XID it reports; 0: none
	Trigger uint32 // Trigger*
	Param   uint64 // time ns, calls, or probability x 2^32
	PID     uint32 // 0: node-wide
	Count   uint32 // ECC errors it adds, or the NVLink it takes down
}

// Kinds by the names users give them.
var Kinds = map[string]uint32{
	"lost":              FaultLost,
	"ecc_uncorrectable": FaultECC,
	"ecc_correctable":   FaultSBE,
	"thermal":           FaultThermal,
	"power_brake":       FaultPowerBrake,
	"nvlink_down":       FaultNvlinkDown,
	"remap_failure":     FaultRemapFailure,
	"xid":               FaultXID,
}

// KindName is the user's name of a kind.
func KindName(k uint32) string {
	for n, v := range Kinds {
		if v == k {
			return n
		}
	}
	return "kind " + strconv.Itoa(int(k))
}

// defaultXID is what a fault of each kind reports, as the driver does.
var defaultXID = map[uint32]uint32{
	FaultLost:         79, // GPU has fallen off the bus
	FaultECC:          48, // double-bit ECC error
	FaultSBE:          92, // high single-bit ECC error rate
	FaultNvlinkDown:   74, // NVLink error
	FaultRemapFailure: 64, // row remapper failure
}

// XIDFault is the lasting fault an XID comes with on real hardware (79 a
// lost GPU, 48 the ECC counts); ok is false for XIDs that are only events.
func XIDFault(xid uint32) (f Fault, ok bool) {
	switch xid {
	case 79:
		return Fault{Kind: FaultLost, XID: 79}, true
	case 48, 94, 95: // double-bit, contained and uncontained ECC errors
		return Fault{Kind: FaultECC, XID: xid, Count: 1}, true
	case 63: // a row remap (or page retirement) was recorded: pending, no new count
		return Fault{Kind: FaultECC, XID: 63}, true
	case 64:
		return Fault{Kind: FaultRemapFailure, XID: 64}, true
	case 74:
		return Fault{Kind: FaultNvlinkDown, XID: 74}, true
	case 92:
		return Fault{Kind: FaultSBE, XID: 92, Count: 100}, true
	case 154: // the recovery action its text names, GPU reset, until one
		return Fault{Kind: FaultXID, XID: 154}, true
	}
	return Fault{}, false
}

// FaultOf is a fault of a kind given as nvmock ctl and apply files give it,
// with the kind's own readings of the numbers: link is the NVLink that
// nvlink_down takes down, and correctable ECC errors default to 100.
func FaultOf(kind, xid, count, link, pid uint32) Fault {
	f := Fault{Kind: kind, XID: xid, Count: count, PID: pid}
	switch {
	case kind == FaultNvlinkDown:
		f.Count = link
	case kind == FaultSBE && count == 0:
		f.Count = 100
	case kind == FaultECC && count == 0 && xid != 63:
		f.Count = 1 // XID 63 records a remap: pending, no new error
	}
	return f
}

// MaxProcessName is the longest process name the node keeps (its
// record's field, less the terminating NUL); longer ones are cut.
const MaxProcessName = len(Proc{}.Name) - 1

// MaxXID bounds the XIDs accepted: NVIDIA's catalogue ends below it.
const MaxXID = 255

// AddFault puts a fault on a GPU. Its XID defaults to the kind's.
func (s *State) AddFault(gpu int, f Fault, now int64) error {
	if err := s.checkGPU(gpu); err != nil {
		return err
	}
	g := &s.GPUs[gpu]
	if g.faults() >= MaxFaults {
		return fmt.Errorf("GPU %d already has %d faults, the most it holds; clear some first", gpu, MaxFaults)
	}
	if f.XID == 0 {
		f.XID = defaultXID[f.Kind]
	}
	if f.Kind == FaultECC && f.Count == 0 && f.XID == 48 {
		f.Count = 1
	}
	if f.Trigger == 0 {
		f.Trigger, f.Param = TriggerAt, uint64(now)
	}
	// A condition already on (a link down, a lost GPU, a slowdown) stays
	// on: a second fault would only take one of the GPU's 8 slots
	// (review). Counts and XIDs add up, so they may repeat.
	for i := uint32(0); i < g.faults() && isCondition(f.Kind) && f.Trigger == TriggerAt; i++ {
		if g.FaultKind[i] == f.Kind && g.FaultCount[i] == f.Count && g.FaultPID[i] == f.PID && g.FaultXID[i] == f.XID &&
			g.FaultTrigger[i] == TriggerAt && g.FaultParam[i] <= f.Param {
			if f.Kind == FaultNvlinkDown {
				return &OnAlready{fmt.Sprintf("GPU %d: NVLink %d is down already", gpu, f.Count)}
			}
			return &OnAlready{fmt.Sprintf("GPU %d: %s is on already", gpu, KindName(f.Kind))}
		}
	}
	i := g.Faults
	s.Header.Generation++ // ids stay unique across clears
	g.FaultKind[i], g.FaultXID[i], g.FaultTrigger[i], g.FaultParam[i] = f.Kind, f.XID, f.Trigger, f.Param
	g.FaultPID[i], g.FaultCount[i], g.FaultID[i] = f.PID, f.Count, uint32(s.Header.Generation)
	g.Faults++
	return nil
}

// OnAlready is AddFault's answer for a condition the GPU is in already:
// nothing changed. Callers that name several GPUs, or a file of faults,
// go on past it.
type OnAlready struct{ msg string }

func (e *OnAlready) Error() string { return e.msg }

// isCondition says whether a fault kind is a state the GPU is in, which a
// second such fault does not deepen.
func isCondition(kind uint32) bool {
	switch kind {
	case FaultLost, FaultThermal, FaultPowerBrake, FaultNvlinkDown, FaultRemapFailure:
		return true
	}
	return false
}

// faults is the number of fault slots in use, clamped as the library
// clamps it (libnvml/live.c): a damaged count indexed past the slots.
func (g *GPU) faults() uint32 { return min(g.Faults, MaxFaults) }

// Faults lists the faults on a GPU.
func (s *State) Faults(gpu int) []Fault {
	g := &s.GPUs[gpu]
	out := make([]Fault, g.faults())
	for i := range out {
		out[i] = Fault{Kind: g.FaultKind[i], XID: g.FaultXID[i], Trigger: g.FaultTrigger[i], Param: g.FaultParam[i],
			PID: g.FaultPID[i], Count: g.FaultCount[i]}
	}
	return out
}

// ClearFaults removes the faults of one kind (0: all) from a GPU.
func (s *State) ClearFaults(gpu int, kind uint32) int {
	g := &s.GPUs[gpu]
	n, removed := uint32(0), 0
	for i := uint32(0); i < g.faults(); i++ {
		if kind != 0 && g.FaultKind[i] != kind {
			g.FaultKind[n], g.FaultXID[n], g.FaultTrigger[n], g.FaultParam[n] = g.FaultKind[i], g.FaultXID[i], g.FaultTrigger[i], g.FaultParam[i]
			g.FaultPID[n], g.FaultCount[n], g.FaultID[n] = g.FaultPID[i], g.FaultCount[i], g.FaultID[i]
			n++
			continue
		}
		removed++
	}
	for i := n; i < MaxFaults; i++ {
		g.FaultKind[i], g.FaultXID[i], g.FaultTrigger[i], g.FaultParam[i], g.FaultPID[i], g.FaultCount[i], g.FaultID[i] = 0, 0, 0, 0, 0, 0, 0
	}
	g.Faults = n
	return removed
}

// KeepFaults gives g the faults of o.
func (g *GPU) KeepFaults(o *GPU) {
	g.Faults, g.FaultKind, g.FaultTrigger, g.FaultXID = o.Faults, o.FaultKind, o.FaultTrigger, o.FaultXID
	g.FaultPID, g.FaultCount, g.FaultID, g.FaultParam = o.FaultPID, o.FaultCount, o.FaultID, o.FaultParam
}

// Publish adds one event to the ring.
func (s *State) Publish(gpu int, typ, data uint64, now int64) {
	n := s.Header.Ring
	s.Events[n%MaxEvents] = Event{Serial: uint64(n) + 1, TimeNS: uint64(now), Type: typ, Data: data, GPU: uint32(gpu)}
	s.Header.Ring = n + 1
}

// XID reports an XID on a GPU now: the event, and the lasting fault it
// comes with on real hardware.
func (s *State) XID(gpu int, xid uint32, now int64) error {
	if err := s.checkGPU(gpu); err != nil {
		return err
	}
	if xid == 0 || xid > MaxXID {
		return fmt.Errorf("XID %d: not an XID (1 to %d)", xid, MaxXID)
	}
	if s.active(gpu, FaultLost, 79, now) >= 0 {
		return fmt.Errorf("GPU %d is lost (XID 79): it reports nothing more until cleared (nvmock ctl clear %d lost)", gpu, gpu)
	}
	f, ok := XIDFault(xid)
	if !ok {
		s.Publish(gpu, EventXID, uint64(xid), now)
		return nil
	}
	// The same XID again adds to what the first left (its count) and is an
	// event of its own: a GPU reports any number, and holds 8 faults.
	if i := s.active(gpu, f.Kind, xid, now); i >= 0 {
		g := &s.GPUs[gpu]
		if f.Count > 0 && f.Kind != FaultNvlinkDown {
			g.FaultCount[i] = uint32(min(uint64(g.FaultCount[i])+uint64(f.Count), math.MaxUint32))
		}
		s.Publish(gpu, EventXID, uint64(xid), now)
		switch {
		case f.Kind == FaultECC && f.Count > 0:
			s.Publish(gpu, EventDoubleBitECC, 0, now)
		case f.Kind == FaultSBE:
			s.Publish(gpu, EventSingleBitECC, 0, now)
		}
		return nil
	}
	return s.AddFault(gpu, f, now) // its events come from the fault
}

// resetSettles says whether a GPU reset ends what faults of a kind do: the
// volatile counts of ECC errors and XID 154's recovery action, not
// conditions such as a link down.
func resetSettles(kind uint32) bool {
	return kind == FaultECC || kind == FaultSBE || kind == FaultXID
}

// BeforeReset says whether fault i, in force since since, came by the
// GPU's last reset; of faults at the reset's very time (a frozen clock),
// those added before it, by id (libnvml/live.c nvmock_before_reset).
func (g *GPU) BeforeReset(i uint32, since uint64) bool {
	if g.ResetNS == 0 {
		return false
	}
	if since != g.ResetNS {
		return since < g.ResetNS
	}
	return int32(g.FaultID[i]-g.ResetFaultID) <= 0
}

// active finds a node-wide fault of a kind and XID in force on a GPU at
// now, and not one a reset has settled (a new error after it counts
// again): -1 for none.
func (s *State) active(gpu int, kind, xid uint32, now int64) int {
	g := &s.GPUs[gpu]
	for i := uint32(0); i < g.faults(); i++ {
		if g.FaultKind[i] == kind && g.FaultXID[i] == xid && g.FaultTrigger[i] == TriggerAt && g.FaultPID[i] == 0 && g.FaultParam[i] <= uint64(now) &&
			!(resetSettles(kind) && g.BeforeReset(i, g.FaultParam[i])) {
			return int(i)
		}
	}
	return -1
}

func (s *State) checkGPU(gpu int) error {
	if gpu < 0 || gpu >= int(s.Header.Gpus) {
		return fmt.Errorf("GPU %d: the node has GPUs 0 to %d", gpu, int(s.Header.Gpus)-1)
	}
	return nil
}

// Process is a process registered on a GPU, or on one of its MIG devices.
type Process struct {
	PID       uint32
	GPU       int
	MIG       *MIGRef `json:",omitempty"` // nil: the whole GPU
	Type      uint32  // 1 compute, 2 graphics, 3 both
	UsedBytes uint64
	Name      string
	Owner     string // ctl, or container:<id>
	PIDNS     uint32
}

// MIGRef names a MIG device by its GPU and compute instance ids, as
// nvidia-smi's process table does.
type MIGRef struct{ GI, CI int }

// AddProcess registers a process; one already there for the same pid and
// device is replaced. A MIG device must exist: the real driver runs
// nothing on an instance that is not there.
func (s *State) AddProcess(p Process, now int64) error {
	if err := s.checkGPU(p.GPU); err != nil {
		return err
	}
	if p.PID == 0 {
		return fmt.Errorf("pid 0 is not a process")
	}
	q := Proc{PID: p.PID, GPU: uint32(p.GPU), Type: p.Type, Pidns: p.PIDNS, UsedBytes: p.UsedBytes, StartNS: uint64(now)}
	g := &s.GPUs[p.GPU]
	switch m := p.MIG; {
	case m == nil && g.MIGSet == 1 && g.MIGCurrent == 1:
		return fmt.Errorf("GPU %d is in MIG mode: a process runs on one of its MIG devices (give its GPU instance, as nvidia-smi mig -lci lists them)", p.GPU)
	case m == nil:
	case g.MIGSet != 1 || g.MIGCurrent != 1:
		return fmt.Errorf("GPU %d is not in MIG mode, so it has no GPU instance %d (nvidia-smi -i %d -mig 1 turns it on)", p.GPU, m.GI, p.GPU)
	case m.GI < 0 || m.GI >= MaxGIs || g.GIProfile[m.GI] == 0:
		return fmt.Errorf("GPU %d has no GPU instance %d (nvidia-smi mig -lgi lists them)", p.GPU, m.GI)
	case m.CI < 0 || m.CI >= MaxCIs || g.CISlices[m.GI*MaxCIs+m.CI] == 0:
		return fmt.Errorf("GPU %d: GPU instance %d has no compute instance %d (nvidia-smi mig -lci lists them)", p.GPU, m.GI, m.CI)
	case p.Type&2 != 0:
		// The MIG user guide: graphics contexts are not supported (review).
		return fmt.Errorf("GPU %d: a MIG device runs no graphics (OpenGL, Vulkan), only compute; give a compute process", p.GPU)
	default:
		q.MIGGI, q.MIGCI = uint32(m.GI)+1, uint32(m.CI)
	}
	free := -1
	for i := range s.Procs {
		o := &s.Procs[i]
		if o.PID == p.PID && o.GPU == q.GPU && o.MIGGI == q.MIGGI && o.MIGCI == q.MIGCI {
			free = i
			break
		}
		if o.PID == 0 && free < 0 {
			free = i
		}
	}
	if free < 0 {
		return fmt.Errorf("%d processes registered already, the most the node holds", MaxProcs)
	}
	copy(q.Name[:len(q.Name)-1], p.Name)
	copy(q.Owner[:len(q.Owner)-1], p.Owner)
	s.Procs[free] = q
	return nil
}

// CheckMemory refuses a registered process that uses more memory than its
// GPU, or its MIG device's GPU instance, has for processes, with the others
// there: on a real GPU the allocation fails (before, the process table
// showed 100 GiB on a 40 GiB GPU).
func (s *State) CheckMemory(p Process, devs []snapshot.Device) error {
	if p.GPU >= len(devs) {
		return fmt.Errorf("GPU %d is not in the snapshot; reinstall the node", p.GPU)
	}
	d := &devs[p.GPU]
	where, room := fmt.Sprintf("GPU %d", p.GPU), d.MemoryTotal-d.MemoryReserved-min(d.MemoryUsed, d.MemoryTotal-d.MemoryReserved)
	gi := -1
	if p.MIG != nil {
		gi = p.MIG.GI
		g := s.GPUs[p.GPU]
		cleanMIG(d, &g)
		if g.GIProfile[gi] == 0 {
			return fmt.Errorf("GPU %d has no GPU instance %d (nvidia-smi mig -lgi lists them)", p.GPU, gi)
		}
		row := g.GIProfile[gi] - 1
		where = fmt.Sprintf("GPU %d's GPU instance %d", p.GPU, gi)
		room = uint64(d.MIGGIMemoryMIB[row]-min(d.MIGGIUsedMIB[row], d.MIGGIMemoryMIB[row])) << 20
	}
	var others uint64
	for _, o := range s.Processes() {
		ogi := -1
		if o.MIG != nil {
			ogi = o.MIG.GI
		}
		if o.GPU != p.GPU || ogi != gi || o.PID == p.PID && reflect.DeepEqual(o.MIG, p.MIG) {
			continue
		}
		others += o.UsedBytes
	}
	if p.UsedBytes > room-min(others, room) {
		return fmt.Errorf("%s has %d MiB for processes, %d MiB of it in use", where, room>>20, others>>20)
	}
	return nil
}

// ResetReadings returns GPU g to the snapshot's static readings, with no
// load and no faults. Its MIG mode and instances and the settings made
// with nvidia-smi stay, and when it was last reset: they are the node's,
// not readings, and last until changed (or the node is reinstalled, as a
// reboot ends them).
func (s *State) ResetReadings(g int) {
	o := &s.GPUs[g]
	s.GPUs[g] = GPU{MIGSet: o.MIGSet, MIGCurrent: o.MIGCurrent, MIGPending: o.MIGPending,
		GIProfile: o.GIProfile, GIStart: o.GIStart, CISlices: o.CISlices, CIStart: o.CIStart,
		CfgSet: o.CfgSet, Persistence: o.Persistence, ComputeMode: o.ComputeMode, PowerLimitMW: o.PowerLimitMW,
		GpmStream: o.GpmStream, ECCPending: o.ECCPending, Timeslice: o.Timeslice,
		GPULockedMin: o.GPULockedMin, GPULockedMax: o.GPULockedMax, MemLockedMin: o.MemLockedMin, MemLockedMax: o.MemLockedMax,
		AppClockMem: o.AppClockMem, AppClockGfx: o.AppClockGfx, Accounting: o.Accounting, AccountingSinceNS: o.AccountingSinceNS,
		ResetNS: o.ResetNS, ResetFaultID: o.ResetFaultID, Drain: o.Drain}
}

// Processes lists the registered processes.
func (s *State) Processes() []Process {
	var out []Process
	for i := range s.Procs {
		if s.Procs[i].PID != 0 {
			out = append(out, s.Procs[i].process())
		}
	}
	return out
}

func (q *Proc) process() Process {
	p := Process{PID: q.PID, GPU: int(q.GPU), Type: q.Type, UsedBytes: q.UsedBytes,
		Name: cstr(q.Name[:]), Owner: cstr(q.Owner[:]), PIDNS: q.Pidns}
	if q.MIGGI != 0 {
		p.MIG = &MIGRef{GI: int(q.MIGGI) - 1, CI: int(q.MIGCI)}
	}
	return p
}

// RemoveProcesses drops those for which drop says so, and counts them.
func (s *State) RemoveProcesses(drop func(Process) bool) int {
	n := 0
	for i := range s.Procs {
		if q := &s.Procs[i]; q.PID != 0 && drop(q.process()) {
			*q = Proc{}
			n++
		}
	}
	return n
}

// PIDNamespace is the inode of this process's pid namespace, which the
// library compares with its own before it trusts a pid to be checkable.
func PIDNamespace() uint32 {
	l, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(l, "pid:["), "]"), 10, 32)
	return uint32(v)
}

// Dead says whether a process registered from this pid namespace has
// exited: a zombie has (its exe link is gone; another user's running
// process only refuses it), as libnvml/live.c's proc_alive reads it.
func Dead(p Process) bool {
	if p.PIDNS == 0 || p.PIDNS != PIDNamespace() {
		return false
	}
	_, err := os.Readlink("/proc/" + strconv.Itoa(int(p.PID)) + "/exe")
	return errors.Is(err, fs.ErrNotExist)
}

func cstr(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}
