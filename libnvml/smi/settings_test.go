package smi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
)

// nvidia-smi -pm and -c change node state, as the driver keeps them: every
// later process sees them, with every release (555 sets persistence through
// its export table). A GPU in MIG mode takes no compute mode, as real ones
// do not. From a read-only view of the state (a GPU container) nothing can
// change the node: Not Supported, which nvidia-smi treats as a warning.
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
			run("-pm", "1")
			if got := run("--query-gpu=persistence_mode,compute_mode", "--format=csv,noheader"); got != "Enabled, Default\nEnabled, Default\n" {
				t.Errorf("after -c DEFAULT and -pm 1: %q", got)
			}

			// A read-only view of the state, as a GPU container has.
			if os.Geteuid() != 0 {
				testenv.Missing(t, "root, to bind the state read-only in a mount namespace")
			}
			state := filepath.Join(filepath.Dir(snap), "state")
			out, code, err := runSMI(t, "unshare", snap, nil, "-m", "sh", "-c",
				`mount --bind -o ro "$1" "$1" && exec "$2" -i 0 -c PROHIBITED`, "sh", state, s.Path)
			if err != nil || code != 0 || !strings.Contains(out, "Not Supported") {
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
