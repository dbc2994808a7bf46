//go:build integration

package smi

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// nvidia-smi -pm and -c change node state, as the driver keeps them: every
// later process sees them, with every release (555 sets persistence through
// its export table). A GPU in MIG mode takes no compute mode, as real ones
// do not. From a read-only view of the state (a GPU container that is not
// privileged) nothing can change the node: Insufficient Permissions, as a
// real container without CAP_SYS_ADMIN gets.
func TestPersistenceAndComputeModeAreSetForTheNode(t *testing.T) {
	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			snap, _ := testenv.Snapshot(t, "a100", 2)
			testenv.LiveState(t, snap, 2, time.Time{})
			run := smiRunner(t, s.Path, snap)
			for _, c := range []struct{ args, want string }{
				{"-i 1 -pm 0", "Disabled persistence mode for GPU 00000000:0F:00.0."},
				{"-i 0 -c EXCLUSIVE_PROCESS", "Set compute mode to EXCLUSIVE_PROCESS for GPU 00000000:07:00.0."},
			} {
				if out := run(strings.Fields(c.args)...); !strings.Contains(out, c.want) {
					t.Errorf("nvidia-smi %s:\n%s\nwant %q", c.args, out, c.want)
				}
			}
			got := run("--query-gpu=persistence_mode,compute_mode", "--format=csv,noheader")
			if want := "Enabled, Exclusive_Process\nDisabled, Default\n"; got != want {
				t.Errorf("after -pm 0 on GPU 1 and -c on GPU 0: %q, want %q", got, want)
			}
			if out := run("-i", "0", "-c", "1"); !strings.Contains(out, "deprecated") {
				t.Errorf("EXCLUSIVE_THREAD, whose support is removed:\n%s", out)
			}
			run("-c", "DEFAULT")
			// No persistence daemon runs: 555, which reads from its export
			// table's answer whether one does, says legacy mode each time.
			want := "Enabled persistence mode for GPU 00000000:07:00.0."
			if major(s.Version) >= 555 {
				want = "Enabled Legacy persistence mode for GPU 00000000:07:00.0."
			}
			for range 3 {
				run("-i", "0", "-pm", "0")
				if out := run("-i", "0", "-pm", "1"); !strings.Contains(out, want) {
					t.Errorf("nvidia-smi -i 0 -pm 1:\n%s\nwant %q", out, want)
				}
			}
			run("-pm", "1")
			if got := run("--query-gpu=persistence_mode,compute_mode", "--format=csv,noheader"); got != "Enabled, Default\nEnabled, Default\n" {
				t.Errorf("after -c DEFAULT and -pm 1: %q", got)
			}

			// A read-only view of the state, as a GPU container has.
			out, code, err := runReadOnly(t, s.Path, snap, "-i", "0", "-c", "PROHIBITED")
			if err != nil || code == 0 || !strings.Contains(out, "Insufficient Permissions") {
				t.Errorf("a read-only state: exit %d, %v\n%s", code, err, out)
			}
			if got := run("--query-gpu=compute_mode", "--format=csv,noheader", "-i", "0"); got != "Default\n" {
				t.Errorf("a refused change changed the mode: %q", got)
			}
			run("-i", "1", "-mig", "1")
			if out := run("-i", "1", "-c", "EXCLUSIVE_PROCESS"); !strings.Contains(out, "Not Supported") {
				t.Errorf("a compute mode on a GPU in MIG mode:\n%s", out)
			}
		})
	}
}

// nvidia-smi -pl sets the node's power limit within the board's range,
// with every release (470 through the first call, later ones through
// _v2): the limits shown become it, and a full load draws no more. Out of
// range, nvidia-smi refuses from the constraints the library gives; from
// a read-only view, Insufficient Permissions.
func TestPowerLimitIsSetForTheNode(t *testing.T) {
	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			snap, _ := testenv.Snapshot(t, "a100", 2)
			f := testenv.LiveState(t, snap, 2, time.Time{})
			boards, err := live.Boards(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Update(func(st *live.State, now int64) error {
				st.SetLoad(boards[1], 1, live.Loads{GPU: 100}, now)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			run := smiRunner(t, s.Path, snap)
			if out := run("-i", "1", "-pl", "250"); !strings.Contains(out, "Power limit for GPU 00000000:0F:00.0 was set to 250.00 W from 400.00 W.") {
				t.Errorf("nvidia-smi -i 1 -pl 250:\n%s", out)
			}
			q := []string{"--query-gpu=power.limit,enforced.power.limit,power.draw,clocks_throttle_reasons.sw_power_cap", "--format=csv,noheader"}
			if got, want := run(q...), "400.00 W, 400.00 W, 49.68 W, Not Active\n250.00 W, 250.00 W, 250.00 W, Active\n"; got != want {
				t.Errorf("after -pl 250 on GPU 1 at full load:\n%swant:\n%s", got, want)
			}
			out, code, err := runSMI(t, s.Path, snap, nil, "-pl", "1000")
			if err != nil || code == 0 || !strings.Contains(out, "not a valid power limit which should be between 100.00 W and 400.00 W") {
				t.Errorf("-pl 1000: exit %d, %v\n%s", code, err, out)
			}

			out, code, err = runReadOnly(t, s.Path, snap, "-i", "0", "-pl", "300")
			if err != nil || code == 0 || !strings.Contains(out, "Insufficient Permissions") {
				t.Errorf("a read-only state: exit %d, %v\n%s", code, err, out)
			}
			if got := run("--query-gpu=power.limit", "--format=csv,noheader", "-i", "0"); got != "400.00 W\n" {
				t.Errorf("a refused change changed the limit: %q", got)
			}
		})
	}
}

// nvidia-smi -e sets the ECC mode of the GPU's next boot (nvml.h: "The
// ECC mode changes take effect after a reboot"): pending changes, current
// stays, for every later process, and nvidia-smi asks for a reboot. The
// same mode again changes nothing; from a read-only view, Insufficient
// Permissions.
func TestECCModeIsPendingUntilReboot(t *testing.T) {
	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			snap, _ := testenv.Snapshot(t, "a100", 2)
			testenv.LiveState(t, snap, 2, time.Time{})
			run := smiRunner(t, s.Path, snap)
			if out := run("-i", "1", "-e", "0"); !strings.Contains(out, "Disabled ECC support for GPU 00000000:0F:00.0.") || !strings.Contains(out, "Reboot required.") {
				t.Errorf("nvidia-smi -i 1 -e 0:\n%s", out)
			}
			q := []string{"--query-gpu=ecc.mode.current,ecc.mode.pending", "--format=csv,noheader"}
			if got, want := run(q...), "Enabled, Enabled\nEnabled, Disabled\n"; got != want {
				t.Errorf("after -i 1 -e 0: %q, want %q", got, want)
			}
			if out := run("-i", "0", "-e", "1"); !strings.Contains(out, "ECC support is already Enabled for GPU 00000000:07:00.0.") {
				t.Errorf("nvidia-smi -i 0 -e 1:\n%s", out)
			}
			if out := run("-q", "-d", "ECC", "-i", "1"); !regexp.MustCompile(`Current\s+: Enabled\n\s+Pending\s+: Disabled`).MatchString(out) {
				t.Errorf("-q -d ECC after -e 0:\n%s", out)
			}
			run("-i", "1", "-e", "1") // back: nothing pending
			if got, want := run(q...), "Enabled, Enabled\nEnabled, Enabled\n"; got != want {
				t.Errorf("after -i 1 -e 1: %q, want %q", got, want)
			}

			out, code, err := runReadOnly(t, s.Path, snap, "-i", "0", "-e", "0")
			if err != nil || code == 0 || !strings.Contains(out, "Insufficient Permissions") {
				t.Errorf("a read-only state: exit %d, %v\n%s", code, err, out)
			}
			if got, want := run(q...), "Enabled, Enabled\nEnabled, Enabled\n"; got != want {
				t.Errorf("a refused change changed the mode: %q", got)
			}
		})
	}
}

// runReadOnly runs nvidia-smi with the node's state bound read-only in a
// mount namespace of its own, as a GPU container sees it (root only).
func runReadOnly(t *testing.T, smi, snap string, args ...string) (string, int, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root, to bind the state read-only in a mount namespace")
	}
	state := filepath.Join(filepath.Dir(snap), "state")
	return runSMI(t, "unshare", snap, nil, append([]string{"-m", "sh", "-c",
		`mount --bind -o ro "$1" "$1" && shift && exec "$0" "$@"`, smi, state}, args...)...)
}

// A state file beside the snapshot that is not this nvmock's (an older
// layout an upgrade left behind) is named when a change is refused, not
// called missing (QA: "this process has none (install the node...)" on an
// installed node).
func TestAChangeRefusedForAStateOfAnotherLayoutNamesIt(t *testing.T) {
	s := testenv.NvidiaSMIs(t)[0]
	snap, _ := testenv.Snapshot(t, "a100", 2)
	state := filepath.Join(filepath.Dir(snap), "state")
	if err := os.WriteFile(state, make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code, err := runSMI(t, s.Path, snap, nil, "-i", "0", "-mig", "1")
	if err != nil || code == 0 || !strings.Contains(out, "Insufficient Permissions") ||
		!strings.Contains(out, state+" is not one of this nvmock") || !strings.Contains(out, "reinstall the node") {
		t.Errorf("nvidia-smi -mig 1 beside a state of another layout: exit %d, %v\n%s", code, err, out)
	}
}

// nvidia-smi -am 1 turns per-process accounting on for the node, with
// every release: a process registered afterwards is listed by
// --query-accounted-apps, running (no time yet), until -am 0 clears the
// list. From a read-only view of the state, Insufficient Permissions.
// QA: -am 1 answered Not Supported on every board.
func TestAccountingModeListsTheProcessesSince(t *testing.T) {
	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			snap, _ := testenv.Snapshot(t, "a100", 1)
			f := testenv.LiveState(t, snap, 1, time.Time{})
			run := smiRunner(t, s.Path, snap)
			if out := run("-i", "0", "-am", "1"); !strings.Contains(out, "Enabled Accounting Mode for GPU 00000000:07:00.0.") {
				t.Errorf("-am 1:\n%s", out)
			}
			pid := os.Getpid()
			if err := f.Update(func(st *live.State, now int64) error {
				return st.AddProcess(live.Process{PID: uint32(pid), GPU: 0, Type: 1, UsedBytes: 1 << 30, Name: "train"}, now)
			}); err != nil {
				t.Fatal(err)
			}
			query := []string{"--query-accounted-apps=pid,max_memory_usage,time", "--format=csv,noheader"}
			if got, want := run(query...), fmt.Sprintf("%d, 1024 MiB, 0 ms\n", pid); got != want {
				t.Errorf("accounted apps: %q, want %q", got, want)
			}
			run("-i", "0", "-am", "0")
			if got := run(query...); got != "" {
				t.Errorf("accounted apps after -am 0: %q, want none", got)
			}
			out, code, err := runReadOnly(t, s.Path, snap, "-i", "0", "-am", "1")
			if err != nil || code == 0 || !strings.Contains(out, "Insufficient Permissions") {
				t.Errorf("-am 1 on a read-only state: exit %d, %v\n%s", code, err, out)
			}
		})
	}
}
