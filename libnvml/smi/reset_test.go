//go:build integration

package smi

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/live"
)

// nvidia-smi -r resets a GPU as the driver does: the volatile ECC counts
// start again, pending remaps take effect, a pending MIG mode becomes the
// current one, and a GPU a process holds or in persistence mode is refused
// in the words and exit code of a real node (NVIDIA's NVSentinel quotes
// them, and resets once persistence is off).
func TestEveryNvidiaSMIResetsAGPUAsTheDriverDoes(t *testing.T) {
	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			snap, p := testenv.Snapshot(t, "a100", 4)
			f := testenv.LiveState(t, snap, 4, time.Time{})
			self := uint32(os.Getpid())
			err := f.Update(func(st *live.State, now int64) error {
				if err := st.AddFault(0, live.Fault{Kind: live.FaultECC, Count: 2}, now); err != nil {
					return err
				}
				// The a100 capture's persistence mode is on; GPU 3 keeps it.
				for i := range 3 {
					st.GPUs[i].CfgSet, st.GPUs[i].Persistence = live.CfgPersistence, 0
				}
				g := &st.GPUs[2]
				g.MIGSet, g.MIGCurrent, g.MIGPending = 1, 0, 1
				return st.AddProcess(live.Process{PID: self, GPU: 1, Type: 1, UsedBytes: 1 << 30, Name: "python3", PIDNS: live.PIDNamespace()}, now)
			})
			if err != nil {
				t.Fatal(err)
			}
			bus := func(i int) string { return snapshot.BusID(p, i) }
			ecc := func() string {
				out, _, _ := runSMI(t, s.Path, snap, nil, "-i", "0", "--query-gpu=ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total", "--format=csv,noheader")
				return strings.TrimSpace(out)
			}
			remapPending := regexp.MustCompile(`Remapped Rows(?s:.*?)Pending\s+: (\w+)`)
			pending := func() string {
				out, _, _ := runSMI(t, s.Path, snap, nil, "-q", "-i", "0", "-d", "ROW_REMAPPER")
				if m := remapPending.FindStringSubmatch(out); m != nil {
					return m[1]
				}
				return "(none):\n" + out
			}
			if got := ecc(); got != "2, 2" {
				t.Fatalf("before the reset, GPU 0's volatile and aggregate counts: %q, want 2, 2", got)
			}
			if got := pending(); got != "Yes" {
				t.Fatalf("before the reset, GPU 0's remap pending: %s", got)
			}

			out, code, err := runSMI(t, s.Path, snap, nil, "-r", "-i", "0")
			if want := fmt.Sprintf("GPU %s was successfully reset.\nAll done.\n", bus(0)); err != nil || code != 0 || out != want {
				t.Errorf("-r -i 0: exit %d (%v):\n%s\nwant\n%s", code, err, out, want)
			}
			if got := ecc(); got != "0, 2" {
				t.Errorf("after the reset, GPU 0's volatile and aggregate counts: %q, want 0, 2", got)
			}
			if got := pending(); got != "No" {
				t.Errorf("after the reset, GPU 0's remap pending: %s, want No", got)
			}

			out, code, err = runSMI(t, s.Path, snap, nil, "-r", "-i", "1")
			inUse := fmt.Sprintf("The following GPUs could not be reset:\n  GPU %s: In use by another client\n\n1 device is currently being used", bus(1))
			if err != nil || code != 255 || !strings.HasPrefix(out, inUse) {
				t.Errorf("-r -i 1, held by a process: exit %d (%v):\n%s\nwant exit 255 and\n%s", code, err, out, inUse)
			}

			out, code, err = runSMI(t, s.Path, snap, nil, "-r", "-i", "2")
			if err != nil || code != 0 || !strings.Contains(out, "was successfully reset.") {
				t.Errorf("-r -i 2: exit %d (%v):\n%s", code, err, out)
			}
			g := f.Read().GPUs[2]
			if g.MIGCurrent != 1 || g.MIGPending != 1 {
				t.Errorf("after the reset, GPU 2's MIG mode is %d (pending %d), want the pending 1", g.MIGCurrent, g.MIGPending)
			}
			if f.Read().GPUs[1].ResetNS != 0 {
				t.Errorf("GPU 1, refused, has a reset time")
			}
			devs, err := live.Snapshot(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Update(func(st *live.State, _ int64) error { _, err := st.CreateGPUInstance(2, &devs[2], 0); return err }); err != nil {
				t.Fatal(err)
			}
			out, code, err = runSMI(t, s.Path, snap, nil, "-r", "-i", "2")
			inUse = fmt.Sprintf("The following GPUs could not be reset:\n  GPU %s: In use by another client\n", bus(2))
			if err != nil || code != 255 || !strings.HasPrefix(out, inUse) {
				t.Errorf("-r -i 2, with a GPU instance: exit %d (%v):\n%s\nwant exit 255 and\n%s", code, err, out, inUse)
			}

			out, code, err = runSMI(t, s.Path, snap, nil, "-r", "-i", "3")
			inUse = fmt.Sprintf("The following GPUs could not be reset:\n  GPU %s: In use by another client\n", bus(3))
			if err != nil || code != 255 || !strings.HasPrefix(out, inUse) {
				t.Errorf("-r -i 3, in persistence mode: exit %d (%v):\n%s\nwant exit 255 and\n%s", code, err, out, inUse)
			}
			if out, code, err := runSMI(t, s.Path, snap, nil, "-pm", "0", "-i", "3"); err != nil || code != 0 {
				t.Fatalf("-pm 0 -i 3: exit %d (%v):\n%s", code, err, out)
			}
			out, code, err = runSMI(t, s.Path, snap, nil, "-r", "-i", "3")
			if want := fmt.Sprintf("GPU %s was successfully reset.\nAll done.\n", bus(3)); err != nil || code != 0 || out != want {
				t.Errorf("-r -i 3 with persistence off: exit %d (%v):\n%s\nwant\n%s", code, err, out, want)
			}
		})
	}
}

// A GPU container sees the node's state read-only: a reset there is
// refused as on a real node without the rights, and changes nothing.
func TestNvidiaSMIResetInAReadOnlyViewIsRefused(t *testing.T) {
	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			snap, p := testenv.Snapshot(t, "a100", 2)
			f := testenv.LiveState(t, snap, 2, time.Time{})
			out, code, err := runReadOnly(t, s.Path, snap, "-r", "-i", "0")
			want := fmt.Sprintf("The following GPUs could not be reset:\n  GPU %s: Insufficient Permissions\n", snapshot.BusID(p, 0))
			if err != nil || code != 255 || !strings.Contains(out, want) {
				t.Errorf("-r -i 0: exit %d (%v):\n%s\nwant exit 255 and\n%s", code, err, out, want)
			}
			if f.Read().GPUs[0].ResetNS != 0 {
				t.Errorf("a refused reset left a reset time")
			}
		})
	}
}

// Resets on a frozen clock, where a reset and the errors around it share
// one time: the errors after a reset still count (review: they read as
// settled by it), and the errors each reset settles share a fault slot,
// so a GPU reset after every error never runs out of its 8.
func TestResetsOnAFrozenClockKeepCountingAndFreeTheirSlots(t *testing.T) {
	smis := testenv.NvidiaSMIs(t)
	s := smis[len(smis)-1]
	snap, _ := testenv.Snapshot(t, "a100", 1)
	f := testenv.LiveState(t, snap, 1, time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	if err := f.Update(func(st *live.State, _ int64) error {
		st.GPUs[0].CfgSet, st.GPUs[0].Persistence = live.CfgPersistence, 0
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ecc := func() string {
		out, _, _ := runSMI(t, s.Path, snap, nil, "--query-gpu=ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total", "--format=csv,noheader")
		return strings.TrimSpace(out)
	}
	for i := 1; i <= 10; i++ {
		if err := f.Update(func(st *live.State, now int64) error {
			if err := st.XID(0, 154, now); err != nil {
				return err
			}
			return st.XID(0, 48, now)
		}); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if got, want := ecc(), fmt.Sprintf("1, %d", i); got != want {
			t.Fatalf("round %d, after XID 48: counts %q, want %q", i, got, want)
		}
		if out, code, err := runSMI(t, s.Path, snap, nil, "-r", "-i", "0"); err != nil || code != 0 {
			t.Fatalf("round %d: -r: exit %d (%v):\n%s", i, code, err, out)
		}
		if got, want := ecc(), fmt.Sprintf("0, %d", i); got != want {
			t.Errorf("round %d, after the reset: counts %q, want %q", i, got, want)
		}
		if n := f.Read().GPUs[0].Faults; n > 2 {
			t.Errorf("round %d: %d fault slots in use, want the settled ones merged into 2", i, n)
		}
	}
}
