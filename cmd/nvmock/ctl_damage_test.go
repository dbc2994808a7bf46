package main

import (
	"encoding/binary"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/live"
)

// poke writes v at off in the state file, as a stray writer would.
func poke(t *testing.T, state string, off int64, v uint32) {
	t.Helper()
	f, err := os.OpenFile(state, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(binary.LittleEndian.AppendUint32(nil, v), off); err != nil {
		t.Fatal(err)
	}
}

// A damaged state file: ctl says what is wrong in one line, or reads it
// as the library does (before, both panicked; found by live's
// FuzzStateFile).
func TestCtlOnADamagedState(t *testing.T) {
	state := ctlNode(t, "2")
	if err := run([]string{"ctl", "--state", state, "fault", "1", "thermal"}); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(live.GPULayout, func(f live.FieldOffset) bool { return f.C == "faults" })
	poke(t, state, int64(live.HeaderSize+live.GPUSize+live.GPULayout[i].Offset), 200) // GPU 1's fault count
	if f := ctlStatusJSON(t, state).GPUs[1].Faults; len(f) != live.MaxFaults {
		t.Errorf("GPU 1 shows %d faults, want the %d slots", len(f), live.MaxFaults)
	}
	if err := run([]string{"ctl", "--state", state, "clear", "1"}); err != nil {
		t.Fatal(err)
	}
	if f := ctlStatusJSON(t, state).GPUs[1].Faults; len(f) != 0 {
		t.Errorf("after clear: %d faults", len(f))
	}
	poke(t, state, 28, 1000) // the header's GPU count
	err := run([]string{"ctl", "--state", state, "status"})
	if err == nil || !strings.Contains(err.Error(), state+": damaged header: 1000 GPUs, at most 64") || strings.Contains(err.Error(), "\n") {
		t.Errorf("status: %v, want one line naming %s and the GPU count", err, state)
	}
}

// ctl status on a state of zeros says so, as writes do (review: it showed
// a node of no GPUs and exited 0).
func TestCtlStatusOfAZeroedStateIsAnError(t *testing.T) {
	state := ctlNode(t, "2")
	if err := os.WriteFile(state, make([]byte, live.Size), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"load", "0", "10"}} {
		err := run(append([]string{"ctl", "--state", state}, args...))
		if err == nil || !strings.Contains(err.Error(), "not initialised by this nvmock; make it again (nvmock ctl create) or reinstall the node") {
			t.Errorf("ctl %v on a zeroed state: %v", args, err)
		}
	}
}

// A state cut short under ctl's mapping is an error naming it, not a
// SIGBUS and a stack (review).
func TestCtlOnAStateCutShortUnderItIsAnError(t *testing.T) {
	state := ctlNode(t, "2")
	f, err := live.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Truncate(state, 4096); err != nil {
		t.Fatal(err)
	}
	err = ctlOn(f, state, "status", nil)
	if err == nil || !strings.Contains(err.Error(), "ctl: state "+state+": cut short while in use") || strings.Contains(err.Error(), "\n") {
		t.Errorf("ctl status on a state cut short: %v; want one line saying so", err)
	}
}

// A header of no GPUs (the header check takes 0) with a fault for all of
// them is no panic (reread: every GPU "had it already" indexed an empty
// list).
func TestCtlFaultOnAStateOfNoGPUs(t *testing.T) {
	state := ctlNode(t, "2")
	poke(t, state, 28, 0) // the header's GPU count
	if err := run([]string{"ctl", "--state", state, "fault", "all", "lost"}); err != nil && strings.Contains(err.Error(), "\n") {
		t.Errorf("fault on no GPUs: %v", err)
	}
}
