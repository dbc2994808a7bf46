package live

import (
	"fmt"
	"math"

	"golang.org/x/sys/unix"

	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// The load model. libnvml/live.c evaluates the same formulas at every read;
// the writer evaluates them only to start a new segment where the last one
// stands, so temperature and energy carry on without a jump.

// TauNS is the thermal time constant: a GPU covers 63 % of the way to its
// new temperature in this time.
const TauNS = 30e9

// HeatC is how far above its idle temperature a GPU settles at full power.
const HeatC = 45

// Board is what the model needs of one GPU, from its snapshot record.
type Board struct {
	IdleMW    uint32 // the captured (idle) power draw; snapshot.NA: no reading
	TDPMW     uint32 // the default enforced power limit: the draw at full load
	LimitMW   uint32 // a power limit set with nvidia-smi -pl; 0: TDPMW
	IdleTempC uint32
	SlowdownC uint32 // snapshot.NA: none
	NVLinks   uint32 // 0: none
	ECC       uint32 // the ECC mode: 1 on, 0 off, snapshot.NA: no ECC memory
	// RowRemapper: the board remaps rows (Ampere on); others retire pages.
	RowRemapper bool
	// NoEncoder: the board has no video encoder (NVENC), as its whole-GPU
	// MIG profile shows (A100, H100, B200): encoder utilization stays 0.
	NoEncoder bool
	// Idle: its static readings are an idle board's (no utilization), so
	// the model at no load reads the same.
	Idle bool
}

// BoardOf takes the model's numbers from a snapshot record.
func BoardOf(d *snapshot.Device) Board {
	b := Board{IdleMW: d.PowerDrawMW, TDPMW: d.PowerEnforcedMW, IdleTempC: d.TempGPU, SlowdownC: d.TempThreshold[1], NVLinks: d.NvlinkCount,
		ECC: d.ECCCurrent, RowRemapper: d.RemappedRows == 1, Idle: true}
	for _, u := range []uint32{d.UtilGPU, d.UtilMemory, d.UtilEncoder, d.UtilDecoder} {
		b.Idle = b.Idle && (u == 0 || u == snapshot.NA)
	}
	for k := uint32(0); k < d.MIGGICount && k < snapshot.MaxMIGProfiles; k++ {
		if d.MIGGIComputeSlices[k] == 7 {
			b.NoEncoder = d.MIGGIEncoders[k] == 0
		}
	}
	return b
}

// CheckLoad refuses an encoder load on a GPU whose board has no encoder:
// a real one reports 0% whatever runs.
func (b Board) CheckLoad(gpu int, l Loads) error {
	if l.Encoder > 0 && b.NoEncoder {
		return fmt.Errorf("GPU %d has no video encoder (NVENC); its encoder utilization stays 0%%", gpu)
	}
	return nil
}

// CheckLink refuses an nvlink_down fault on a link GPU gpu of board b does
// not have: the library keeps 32 links, and a larger number took another
// down.
func (b Board) CheckLink(gpu int, link uint32) error {
	if b.NVLinks == 0 {
		return fmt.Errorf("GPU %d has no NVLink", gpu)
	}
	if link >= b.NVLinks {
		return fmt.Errorf("%d is not a link of GPU %d, which has NVLinks 0 to %d", link, gpu, b.NVLinks-1)
	}
	return nil
}

// CheckFault refuses a fault GPU gpu of board b cannot have: ECC errors,
// remaps and the XIDs that report them where ECC is off or absent (such a
// GPU detects none, and XID 48 makes NVIDIA's device plugin mark it
// unhealthy), and NVLink errors without NVLink.
func (b Board) CheckFault(gpu int, f Fault) error {
	kind, what := f.Kind, KindName(f.Kind)
	if x, ok := XIDFault(f.XID); ok && kind == FaultXID {
		kind, what = x.Kind, fmt.Sprintf("XID %d (%s)", f.XID, xidWords[f.XID])
	}
	switch {
	case (kind == FaultECC || kind == FaultSBE || kind == FaultRemapFailure) && b.ECC != 1:
		why := "ECC off (board.modes.ecc.current)"
		if b.ECC == snapshot.NA {
			why = "no ECC memory"
		}
		return fmt.Errorf("%s: GPU %d has %s, so it detects no ECC errors", what, gpu, why)
	case kind == FaultRemapFailure && !b.RowRemapper:
		return fmt.Errorf("%s: GPU %d retires pages; it has no row remapper to fail", what, gpu)
	case kind == FaultNvlinkDown && b.NVLinks == 0:
		return fmt.Errorf("%s: GPU %d has no NVLink", what, gpu)
	}
	return nil
}

// CheckFaultOn checks fault f, with its link for nvlink_down, for GPU g of
// boards: nil boards (a state without its snapshot) check nothing, and a
// GPU past them is a node that changed. Errors begin with at (a live
// file's entry; "": none), an error about the link with linkField.
func CheckFaultOn(boards []Board, g int, f Fault, at, linkField string) error {
	if boards == nil {
		return nil
	}
	wrap := func(err error) error {
		if err != nil && at != "" {
			return fmt.Errorf("%s: %w", at, err)
		}
		return err
	}
	if g >= len(boards) {
		return wrap(fmt.Errorf("GPU %d: the snapshot has %d GPUs; reinstall the node", g, len(boards)))
	}
	// The fault first: a GPU without NVLink is no bad --link's fault.
	if err := boards[g].CheckFault(g, f); err != nil {
		return wrap(err)
	}
	if f.Kind == FaultNvlinkDown {
		if err := boards[g].CheckLink(g, f.Count); err != nil {
			return fmt.Errorf("%s: %w", linkField, err)
		}
	}
	return nil
}

// xidWords name the XIDs that come with a lasting fault (XIDFault).
var xidWords = map[uint32]string{48: "double-bit ECC error", 63: "row remap recorded", 64: "row remap failure",
	74: "NVLink error", 79: "fallen off the bus", 92: "high single-bit ECC error rate", 94: "contained ECC error",
	95: "uncontained ECC error"}

// PowerMW is the mean power at a GPU load in percent: idle to TDP, held
// to the power limit (never below idle).
func (b Board) PowerMW(load uint32) float64 {
	if b.IdleMW == snapshot.NA || b.TDPMW == snapshot.NA || b.TDPMW < b.IdleMW {
		return float64(b.IdleMW)
	}
	p := float64(b.IdleMW) + float64(b.TDPMW-b.IdleMW)*float64(min(load, 100))/100
	if b.LimitMW != 0 && p > float64(b.LimitMW) {
		p = float64(max(b.LimitMW, b.IdleMW))
	}
	return p
}

// limit is the power limit in force: the one set, else the board's TDP
// (snapshot.NA: none).
func (b Board) limit() uint32 {
	if b.LimitMW != 0 {
		return b.LimitMW
	}
	return b.TDPMW
}

// heldBack says whether a load holds the clocks back for power, as the
// SW power cap reason the library reports (libnvml/live.c held): near
// full load, or asking for more power than the limit gives.
func (b Board) heldBack(load uint32) bool {
	if load >= 95 {
		return true
	}
	demand := float64(b.IdleMW)
	if b.TDPMW != snapshot.NA && b.TDPMW >= b.IdleMW {
		demand += float64(b.TDPMW-b.IdleMW) * float64(min(load, 100)) / 100
	}
	lim := b.limit()
	return lim != snapshot.NA && demand > float64(lim)
}

// under is the board under GPU g's settings: the power limit set there.
func (b Board) under(g *GPU) Board {
	if g.CfgSet&CfgPowerLimit != 0 && b.TDPMW != snapshot.NA {
		b.LimitMW = g.PowerLimitMW
	}
	return b
}

// TargetMC is the temperature a GPU settles at under a load, in milli-C:
// HeatC above idle at TDP, kept 3 C under the slowdown threshold.
func (b Board) TargetMC(load uint32) float64 { return b.targetOf(b.PowerMW(load)) }

// targetOf is the temperature a GPU settles at drawing p mW.
func (b Board) targetOf(p float64) float64 {
	t := float64(b.IdleTempC) * 1000
	if b.IdleMW != snapshot.NA && b.TDPMW != snapshot.NA && b.TDPMW > b.IdleMW {
		t += HeatC * 1000 * (p - float64(b.IdleMW)) / float64(b.TDPMW-b.IdleMW)
	}
	if b.SlowdownC != snapshot.NA && t > float64(b.SlowdownC-3)*1000 {
		t = float64(b.SlowdownC-3) * 1000
	}
	return t
}

// braked is power p under a power brake: at most half the limit in force.
func (b Board) braked(p float64) float64 {
	if l := b.limit(); l != snapshot.NA && p > float64(l)/2 {
		return float64(l) / 2
	}
	return p
}

// At is the temperature (milli-C) and energy counter (mJ) t ns into a
// segment that started at temp0 and e0 under load.
func (b Board) At(load uint32, temp0 uint32, e0 uint64, dt int64) (uint32, uint64) {
	return b.at(load, temp0, e0, dt, 0)
}

// at is At with the last brake ns of dt under a power brake, at the
// braked power, step for step as libnvml/live.c at_seg reckons it: a
// segment started where the readings stand reads the same as before.
func (b Board) at(load uint32, temp0 uint32, e0 uint64, dt, brake int64) (uint32, uint64) {
	dt = max(dt, 0)
	brake = min(max(brake, 0), dt)
	p := b.PowerMW(load)
	target := b.targetOf(p)
	temp := target + (float64(temp0)-target)*math.Exp(-float64(dt-brake)/TauNS)
	e := e0
	if b.IdleMW != snapshot.NA {
		e += uint64(p * float64(dt-brake) / 1e9)
	}
	if brake > 0 {
		pb := b.braked(p)
		tb := b.targetOf(pb)
		temp = tb + (temp-tb)*math.Exp(-float64(brake)/TauNS)
		if b.IdleMW != snapshot.NA {
			e += uint64(pb * float64(brake) / 1e9)
		}
	}
	return uint32(temp + 0.5), e
}

// brakeNS is how long before at a power brake has held GPU g within its
// segment from since: of the node-wide timed brakes, which every process
// sees alike, the earliest in force (libnvml/live.c brake_ns). A brake of
// one process, or fired by calls, is that process's alone.
func (g *GPU) brakeNS(since, at int64) int64 {
	first := at
	for i := uint32(0); i < g.faults(); i++ {
		if g.FaultKind[i] == FaultPowerBrake && g.FaultPID[i] == 0 && g.FaultTrigger[i] == TriggerAt && g.FaultParam[i] <= uint64(at) {
			first = min(first, int64(g.FaultParam[i]))
		}
	}
	if at <= since {
		return 0
	}
	return min(at-first, at-since)
}

// Cut starts a new segment of the same load at now, where the readings
// stand, on a GPU the model runs under a power brake: before its fault is
// cleared, so that the time it held stays counted at the braked power.
// Without one there is nothing to keep, and the segment before stays.
func (s *State) Cut(b Board, gpu int, now int64) {
	if g := &s.GPUs[gpu]; g.Model != 0 && g.brakeNS(int64(g.SinceNS), now) > 0 {
		s.setLoadAt(b, gpu, g.loads(), now, now)
	}
}

// loads are the loads a GPU the model runs is under.
func (g *GPU) loads() Loads {
	return Loads{GPU: g.Load[0], Memory: g.Load[1], Encoder: g.Load[2], Decoder: g.Load[3], Jitter: g.Jitter}
}

// staticEnergyMJ is the counter of a GPU on its snapshot readings: its
// power since boot (libnvml/common.c).
func (b Board) staticEnergyMJ() uint64 {
	if b.IdleMW == snapshot.NA {
		return 0
	}
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0
	}
	ms := uint64(ts.Sec)*1000 + uint64(ts.Nsec)/1e6
	return uint64(b.IdleMW) * ms / 1000
}

// Loads is what a GPU is asked to do, in percent per engine.
type Loads struct {
	GPU, Memory, Encoder, Decoder uint32
	Jitter                        uint32 // % amplitude of noise on utilization
}

// SetLoad starts a new load segment on a GPU at now, from where the
// readings stand.
func (s *State) SetLoad(b Board, gpu int, l Loads, now int64) {
	s.setLoadAt(b, gpu, l, now, now)
}

// setLoadAt starts a segment at start from the readings at at (the same
// time, unless the state's clock went back).
func (s *State) setLoadAt(b Board, gpu int, l Loads, at, start int64) {
	g := &s.GPUs[gpu]
	b = b.under(g)
	var temp0 uint32
	var e0, v0 uint64
	if g.Model == 0 {
		temp0, e0 = b.IdleTempC*1000, b.staticEnergyMJ()
		g.Load, g.SinceNS, g.Temp0MC, g.Energy0MJ, g.Viol0NS = [4]uint32{}, uint64(at), temp0, e0, 0
	} else {
		brake := g.brakeNS(int64(g.SinceNS), at)
		temp0, e0 = b.at(g.Load[0], g.Temp0MC, g.Energy0MJ, at-int64(g.SinceNS), brake)
		v0 = g.Viol0NS
		if at > int64(g.SinceNS) && b.heldBack(g.Load[0]) {
			v0 += uint64(at - int64(g.SinceNS) - brake) // a brake holds power well under the cap
		}
	}
	g.PrevLoad, g.PrevSinceNS, g.PrevTemp0MC, g.PrevEnergy0MJ, g.PrevViol0NS = g.Load, g.SinceNS, g.Temp0MC, g.Energy0MJ, g.Viol0NS
	g.PrevPowerLimitMW = b.limit()
	g.Load = [4]uint32{min(l.GPU, 100), min(l.Memory, 100), min(l.Encoder, 100), min(l.Decoder, 100)}
	g.SinceNS, g.Temp0MC, g.Energy0MJ, g.Viol0NS = uint64(start), temp0, e0, v0
	g.Jitter = min(l.Jitter, 100)
	g.Model = 1
}

// FollowClock makes the readings of idle GPUs the model does not run yet
// follow the state's clock from now: each starts it at no load, where its
// static readings stand, which read the same. Before, an idle GPU's energy
// counter kept the wall clock under a frozen or advanced one, apart from
// a loaded GPU's (review).
func (s *State) FollowClock(boards []Board, now int64) {
	for g := 0; g < int(s.Header.Gpus) && g < len(boards); g++ {
		if s.GPUs[g].Model == 0 && boards[g].Idle && boards[g].IdleMW != snapshot.NA {
			s.SetLoad(boards[g], g, Loads{}, now)
		}
	}
}

// ClockMoved keeps the readings of the GPUs the model runs where they
// stood when the state's clock goes back (frozen at an earlier time, or
// thawed from an advanced one): each starts its segment again at the new
// time, so the energy counter never goes back and temperature does not
// jump. A clock that goes forward moves them, as time passing does.
// Timed faults that had fired stay fired: they count from the new time,
// and a reset after it moves to it too (their ids still say which came
// first).
func (s *State) ClockMoved(boards []Board, from, to int64) {
	if to >= from {
		return
	}
	for gi := 0; gi < int(s.Header.Gpus); gi++ {
		g := &s.GPUs[gi]
		for i := uint32(0); i < g.faults(); i++ {
			if p := g.FaultParam[i]; g.FaultTrigger[i] == TriggerAt && p > uint64(to) && p <= uint64(from) {
				g.FaultParam[i] = uint64(to)
			}
		}
		if g.ResetNS > uint64(to) {
			g.ResetNS = uint64(to)
		}
	}
	for g := 0; g < int(s.Header.Gpus) && g < len(boards); g++ {
		if o := &s.GPUs[g]; o.Model != 0 {
			s.setLoadAt(boards[g], g, o.loads(), from, to)
		}
	}
}

// ResetToIdle clears a GPU's loads and faults as ResetReadings does; one
// the model runs goes idle from where its readings stand (it cools with
// its time constant, and its energy counter keeps counting), as a real GPU
// whose work ends: the static readings' counter, power since boot, would
// be lower than one that ran a load.
func (s *State) ResetToIdle(b Board, gpu int, now int64) {
	s.Cut(b, gpu, now) // what its faults did so far stays
	o := s.GPUs[gpu]
	s.ResetReadings(gpu)
	if o.Model == 0 {
		return
	}
	g := &s.GPUs[gpu]
	g.Model, g.Load, g.SinceNS, g.Temp0MC, g.Energy0MJ, g.Jitter = o.Model, o.Load, o.SinceNS, o.Temp0MC, o.Energy0MJ, o.Jitter
	g.Viol0NS = o.Viol0NS
	s.SetLoad(b, gpu, Loads{}, now)
}
