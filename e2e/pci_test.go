//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/pcisim"
	"github.com/nvmock/nvmock/profile"
)

// nodeTree is the PCI tree of the e2e node's profile, as pcisim renders it.
func (n *node) nodeTree(t *testing.T) *profile.Node {
	t.Helper()
	return testenv.Node(t, n.env["PROFILE"], len(n.gpus))
}

// A container given GPUs sees the node's PCI tree in /sys, set up by the
// plugin's runtime hook before its process starts: Debian's lspci lists the
// GPUs nvidia-smi shows, at the same addresses; the host's own PCI devices
// are not there; hwloc places the GPUs; each GPU's path is found through
// its bus's class link, as NCCL finds it (realpath; the image has only
// the shell's cd -P).
func TestGlibcContainerSeesTheNodesPCITree(t *testing.T) {
	n := theNode
	nd := n.nodeTree(t)
	p := n.runPod(t, optedIn, nil)
	script := `nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader; echo --
lspci -D -d 10de::0302 2>/dev/null; echo --
lspci 2>/dev/null | grep -c Virtio; echo --
lstopo-no-graphics --whole-io 2>/dev/null | grep -c '(3D)'; echo --
lspci -tv 2>/dev/null | grep -c 'NVIDIA Corporation.*\[.*\(SXM\|PCIe\|HBM\)'; echo --
lspci -vvv -d 10de::0302 2>/dev/null | grep -c -e 'LnkSta:' -e 'NUMA node:' -e 'Kernel driver in use: nvidia'; echo --
for b in $(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | tr A-F a-f); do b=${b#????}
	d=$(cd -P /sys/bus/pci/devices/$b && pwd -P) && [ -n "$d" ] && [ "$(cd -P /sys/class/pci_bus/${b%:*}/../../$b && pwd -P)" = "$d" ] && echo found
done`
	r := n.run(t, p, ctr{image: "glibc", cmd: []string{"sh", "-c", script}})
	parts := strings.Split(r.out, "--\n")
	if r.code != 0 || len(parts) != 7 {
		t.Fatalf("exited %d:\n%s", r.code, r.out)
	}
	var want, smi, lspci []string
	for _, g := range nd.GPUs {
		want = append(want, g.Address.String())
	}
	for _, l := range testenv.Lines(parts[0]) {
		a, _ := profile.ParsePCIAddress(l)
		smi = append(smi, a.String())
	}
	for _, l := range testenv.Lines(parts[1]) {
		a, _, _ := strings.Cut(l, " ")
		lspci = append(lspci, a)
	}
	if !slices.Equal(smi, want) || !slices.Equal(lspci, want) {
		t.Errorf("GPUs: nvidia-smi %v, lspci %v; the profile %v", smi, lspci, want)
	}
	if got := strings.TrimSpace(parts[2]); got != "0" {
		t.Errorf("lspci lists %s of the host's virtio devices, want 0", got)
	}
	if got := strings.TrimSpace(parts[3]); got != fmt.Sprint(len(want)) {
		t.Errorf("lstopo shows %s 3D controllers, want %d", got, len(want))
	}
	// lspci -tv names every GPU in the tree; -vvv gives each its link, NUMA node and driver.
	if got := strings.TrimSpace(parts[4]); got != fmt.Sprint(len(want)) {
		t.Errorf("lspci -tv names %s GPUs, want %d", got, len(want))
	}
	if got := strings.TrimSpace(parts[5]); got != fmt.Sprint(3*len(want)) {
		t.Errorf("lspci -vvv shows %s link, NUMA and driver lines for the GPUs, want %d", got, 3*len(want))
	}
	if got := strings.Count(parts[6], "found\n"); got != len(want) {
		t.Errorf("%d of %d GPUs are found through /sys/class/pci_bus", got, len(want))
	}
}

// A statically linked Go program (go-nvlib's nvpci, ghw, the PCIe root
// link Kubernetes' DRA attributes read) sees the tree: no preload reaches
// it, the mounts do.
func TestStaticGoContainerReadsTheGPUsPCIeRoots(t *testing.T) {
	n := theNode
	nd := n.nodeTree(t)
	p := n.runPod(t, optedIn, nil)
	r := n.run(t, p, ctr{image: "pciprobe"})
	// go-nvlib logs warnings on stderr before the JSON.
	out := r.out[strings.Index(r.out, "{"):]
	var got struct {
		GPUs []struct {
			Address  string `json:"address"`
			Class    uint32 `json:"class"`
			NUMANode int    `json:"numa_node"`
			PCIeRoot string `json:"pcie_root"`
		} `json:"nvpci_gpus"`
		GHW []struct {
			Address, Driver string
		} `json:"ghw"`
	}
	if r.code != 0 || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("pciprobe exited %d:\n%s", r.code, r.out)
	}
	if len(got.GPUs) != len(nd.GPUs) {
		t.Fatalf("go-nvlib finds %d GPUs, the node has %d:\n%s", len(got.GPUs), len(nd.GPUs), r.out)
	}
	for i, g := range got.GPUs {
		m := nd.GPUs[i]
		if root := pcisim.RootName(m.Function.Root); g.Address != m.Address.String() || g.PCIeRoot != root || g.NUMANode != m.NUMANode || g.Class != 0x030200 {
			t.Errorf("GPU %d read as %+v; the node: %s under %s, NUMA %d, class 0x030200", i, g, m.Address, root, m.NUMANode)
		}
	}
	if len(got.GHW) != len(pcisim.Devices(nd)) {
		t.Errorf("ghw lists %d PCI functions, the tree has %d", len(got.GHW), len(pcisim.Devices(nd)))
	}
}

// busybox and a musl program (static, no glibc) run their own commands
// and list the tree's devices; a container of a namespace that did not opt
// in keeps the host's.
func TestBusyboxAndMuslSeeTheTreeAndAPlainContainerTheHosts(t *testing.T) {
	n := theNode
	nd := n.nodeTree(t)
	host, err := os.ReadDir("/sys/bus/pci/devices")
	if err != nil {
		t.Fatal(err)
	}
	var hostDevs []string
	for _, e := range host {
		hostDevs = append(hostDevs, e.Name())
	}
	for _, c := range []ctr{
		{image: "busybox", cmd: []string{"sh", "-c", "ls /sys/bus/pci/devices"}},
		{image: "musl"}, // its entrypoint lists them
	} {
		for ns, want := range map[string][]string{optedIn: pcisim.Devices(nd), plain: hostDevs} {
			r := n.run(t, n.runPod(t, ns, nil), c)
			if got := testenv.Lines(r.out); r.code != 0 || !sameSet(got, want) {
				t.Errorf("%s in %s lists %v (exit %d), want %v", c.image, ns, got, r.code, want)
			}
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
