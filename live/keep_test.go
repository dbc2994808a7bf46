package live

import (
	"testing"

	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/profile"
)

// The chart applies its live values at every pod start, and clear --load
// returns readings to the snapshot's: neither may take the node's MIG
// layout with them (review: a rolling upgrade destroyed MIG devices under
// running pods, and pools[].mig never held).
func TestResettingReadingsKeepsTheMIGLayout(t *testing.T) {
	p, err := profile.Builtin("a100")
	if err != nil {
		t.Fatal(err)
	}
	p.GPUs = 2
	data, err := snapshot.Compile(p, snapshot.Options{Seed: "keep"})
	if err != nil {
		t.Fatal(err)
	}
	_, devs, err := snapshot.Read(data)
	if err != nil {
		t.Fatal(err)
	}
	l, err := profile.ParseMIGLayout("0=all-1g.5gb", p.Board.Modes.MIG, 2)
	if err != nil {
		t.Fatal(err)
	}
	s := &State{}
	s.Header.Gpus = 2
	if err := s.ApplyMIGLayout(devs, l); err != nil {
		t.Fatal(err)
	}
	before := s.MIGDevices(0, &devs[0])
	if len(before) != 7 {
		t.Fatalf("layout made %d MIG devices, want 7", len(before))
	}
	boards := []Board{BoardOf(&devs[0]), BoardOf(&devs[1])}
	s.SetLoad(boards[0], 0, Loads{GPU: 80}, 1)
	if err := s.AddFault(0, FaultOf(FaultThermal, 0, 0, 0, 0), 1); err != nil {
		t.Fatal(err)
	}
	sp := &Spec{}
	if err := sp.Apply(s, boards, 2); err != nil {
		t.Fatal(err)
	}
	if g := s.GPUs[0]; g.Load != [4]uint32{} || g.Faults != 0 {
		t.Errorf("an empty spec left the load (%v) or %d faults", g.Load, g.Faults)
	}
	if after := s.MIGDevices(0, &devs[0]); len(after) != len(before) {
		t.Errorf("after apply: %d MIG devices, want the %d the layout made", len(after), len(before))
	}
	s.ResetReadings(0)
	if g := s.GPUs[0]; g.MIGSet != 1 || g.MIGCurrent != 1 || len(s.MIGDevices(0, &devs[0])) != 7 {
		t.Errorf("after clear --load: MIG set %d current %d, %d devices", g.MIGSet, g.MIGCurrent, len(s.MIGDevices(0, &devs[0])))
	}
}

// clear --load and the chart's live values at a pod start reset readings,
// not what nvidia-smi set: every setting stays until reinstalled.
func TestResettingReadingsKeepsTheSettings(t *testing.T) {
	s := &State{}
	s.Header.Gpus = 1
	g := &s.GPUs[0]
	g.CfgSet = CfgPersistence | CfgComputeMode | CfgPowerLimit | CfgGpmStream | CfgECCPending | CfgTimeslice | CfgGPULocked | CfgMemLocked | CfgAppClocks | CfgAccounting | CfgDrain
	g.Persistence, g.ComputeMode, g.PowerLimitMW, g.GpmStream, g.ECCPending, g.Timeslice = 1, 3, 250000, 1, 1, 3
	g.GPULockedMin, g.GPULockedMax, g.MemLockedMin, g.MemLockedMax, g.AppClockMem, g.AppClockGfx = 1000, 1400, 1215, 1215, 1215, 1095
	g.Accounting, g.AccountingSinceNS, g.Drain = 1, 1e18, 1
	g.Load = [4]uint32{80}
	want := *g
	want.Load = [4]uint32{}
	s.ResetReadings(0)
	if s.GPUs[0] != want {
		t.Errorf("after the reset:\n%+v\nwant the settings kept:\n%+v", s.GPUs[0], want)
	}
}

// The chart applies its live values at every pod start: a fault the file
// lists that the GPU had already keeps its time and id, so a GPU reset in
// between holds (review: the re-added fault read as a new error, with its
// volatile count and pending remap back) and its XID is not new. A fault
// the file adds is new.
func TestApplyingAFileAgainKeepsItsFaultsAsTheyWere(t *testing.T) {
	s := &State{}
	s.Header.Gpus = 2
	count := uint64(2)
	sp := &Spec{Faults: []FaultSpec{{GPUs: "all", Kind: "ecc_uncorrectable", Count: &count}}}
	if err := sp.Apply(s, nil, 100); err != nil {
		t.Fatal(err)
	}
	first := s.GPUs[0]
	s.GPUs[0].ResetNS, s.GPUs[0].ResetFaultID = 150, uint32(s.Header.Generation)
	sp.Faults = append(sp.Faults, FaultSpec{GPUs: "1", Kind: "xid", XID: 154})
	if err := sp.Apply(s, nil, 200); err != nil {
		t.Fatal(err)
	}
	g := &s.GPUs[0]
	if g.Faults != 1 || g.FaultParam[0] != first.FaultParam[0] || g.FaultID[0] != first.FaultID[0] || !g.BeforeReset(0, g.FaultParam[0]) {
		t.Errorf("GPU 0's fault after the second apply: at %d id %d (before the reset: %v); want the first's, at %d id %d",
			g.FaultParam[0], g.FaultID[0], g.BeforeReset(0, g.FaultParam[0]), first.FaultParam[0], first.FaultID[0])
	}
	if g := &s.GPUs[1]; g.Faults != 2 || g.FaultParam[0] != 100 || g.FaultParam[1] != 200 {
		t.Errorf("GPU 1's faults %d at %v, want the ECC one at 100 and XID 154 at 200", g.Faults, g.FaultParam[:g.Faults])
	}
}

// A clock set back before a reset moves the reset with the faults it
// pulls back: those from before it stay before it, those after it after
// (review: ResetNS stayed ahead, and the later faults read as settled).
func TestAClockSetBackKeepsFaultsOnTheirSideOfAReset(t *testing.T) {
	s := &State{}
	s.Header.Gpus = 1
	if err := s.XID(0, 48, 100); err != nil {
		t.Fatal(err)
	}
	s.GPUs[0].ResetNS, s.GPUs[0].ResetFaultID = 150, uint32(s.Header.Generation)
	if err := s.XID(0, 48, 200); err != nil {
		t.Fatal(err)
	}
	g := &s.GPUs[0]
	if g.Faults != 2 {
		t.Fatalf("XID 48 after a reset: %d faults, want a second one (the first was settled)", g.Faults)
	}
	s.ClockMoved(nil, 300, 50)
	if g.ResetNS != 50 || g.FaultParam[0] != 50 || g.FaultParam[1] != 50 {
		t.Fatalf("clock set back to 50: reset at %d, faults at %v", g.ResetNS, g.FaultParam[:2])
	}
	if !g.BeforeReset(0, g.FaultParam[0]) || g.BeforeReset(1, g.FaultParam[1]) {
		t.Errorf("before the reset: first %v, second %v; want true, false", g.BeforeReset(0, g.FaultParam[0]), g.BeforeReset(1, g.FaultParam[1]))
	}
}
