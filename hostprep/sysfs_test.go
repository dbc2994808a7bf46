//go:build integration

package hostprep_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
)

// An installed node's PCI tree serves host tools that take a root:
// lspci -O sysfs.path and hwloc's HWLOC_FSROOT (with the host's CPUs and
// memory through the root's proc and devices/system links).
func TestHostToolsReadTheInstalledTreeThroughTheirRootOptions(t *testing.T) {
	needRoot(t)
	lspci, lstopo := testenv.Tool(t, "lspci"), testenv.Tool(t, "lstopo-no-graphics")
	res, p := installNode(t, "h100", 0)
	sys := hostprep.SysOf(res.Overlay)
	out, err := exec.Command(lspci, "-O", "sysfs.path="+sys+"/bus/pci", "-D", "-d", "10de::0302").Output()
	if err != nil {
		t.Fatalf("lspci: %v", err)
	}
	if got := len(testenv.Lines(string(out))); got != p.GPUs {
		t.Errorf("lspci -O sysfs.path lists %d GPUs, want %d:\n%s", got, p.GPUs, out)
	}
	cmd := exec.Command(lstopo, "--whole-io")
	cmd.Env = append(os.Environ(), "HWLOC_FSROOT="+strings.TrimSuffix(sys, "/sys"))
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("lstopo: %v", err)
	}
	if got := strings.Count(string(out), "(3D)"); got != p.GPUs {
		t.Errorf("HWLOC_FSROOT lstopo shows %d 3D controllers, want %d:\n%s", got, p.GPUs, out)
	}
	if !strings.Contains(string(out), "PU L#0") {
		t.Errorf("HWLOC_FSROOT lstopo shows no CPUs (the root's devices/system link):\n%s", out)
	}
}
