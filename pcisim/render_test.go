package pcisim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

func builtinNode(t testing.TB, name string, gpus int) *profile.Node {
	t.Helper()
	return testenv.Node(t, name, gpus)
}

func render(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "sys")
	if err := Render(builtinNode(t, name, 0), dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// GPUs that share a root bus (a VM's, on bus 0) render under its one host
// bridge (QA: "write devices/pci0000:00/uevent: file exists").
func TestGPUsOnOneRootBusRenderUnderItsHostBridge(t *testing.T) {
	p, err := profile.Parse("vm.yaml", []byte("base: t4\nname: vm\ngpus: 2\ntopology:\n  busIds: [\"0000:00:1d.0\", \"0000:00:1e.0\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := p.Node()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "sys")
	if err := Render(n, dir); err != nil {
		t.Fatal(err)
	}
	for _, gpu := range []string{"0000:00:1d.0", "0000:00:1e.0"} {
		if _, err := os.Stat(filepath.Join(dir, "devices", "pci0000:00", gpu, "vendor")); err != nil {
			t.Errorf("GPU %s: %v", gpu, err)
		}
	}
}

// 32-bit BARs and windows decode nothing above 4 GiB: a tree whose 32-bit
// memory does not fit below the IOAPIC's range is refused (review: an a100
// node of 48 GPUs put NVSwitch BARs at 4 GiB, and config space said 0).
func TestA32BitMemoryThatDoesNotFitIsRefused(t *testing.T) {
	if _, err := Files(builtinNode(t, "a100", 40)); err != nil {
		t.Fatalf("a100 with 40 GPUs: %v", err)
	}
	_, err := Files(builtinNode(t, "a100", 48))
	if err == nil || !strings.Contains(err.Error(), "more than the 1772 MiB below 4 GiB; give the node fewer GPUs") {
		t.Fatalf("a100 with 48 GPUs: %v; want the 32-bit memory refused", err)
	}
}

// The kernel prints CPU masks as wide as the node's CPUs, whatever the
// node's GPU count (review: a100 with 2 GPUs printed 7 words, with 8 8).
func TestCPUMasksAreAsWideAsTheNodesCPUs(t *testing.T) {
	for _, gpus := range []int{2, 8} {
		fs, err := Files(builtinNode(t, "a100", gpus))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if strings.HasSuffix(f.Path, "/0000:07:00.0/local_cpus") {
				if words := strings.Count(string(f.Data), ",") + 1; words != 8 {
					t.Errorf("a100 with %d GPUs: local_cpus %q has %d words; want 8 (256 CPUs)", gpus, f.Data, words)
				}
			}
		}
	}
}
