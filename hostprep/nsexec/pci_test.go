//go:build integration

package nsexec

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/pcisim"
	"github.com/nvmock/nvmock/profile"
)

// pciProbe builds e2e/images/pciprobe: a static Go program reading the PCI
// tree through go-nvlib's nvpci, ghw and the PCIe root link.
func pciProbe(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "pciprobe")
	cmd := exec.Command("go", "build", "-o", out, "./e2e/images/pciprobe")
	cmd.Dir = testenv.Root()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build pciprobe: %v\n%s", err, b)
	}
	return out
}

// gts is lspci's name of each PCIe generation's speed.
var gts = map[uint32]string{1: "2.5GT/s", 2: "5GT/s", 3: "8GT/s", 4: "16GT/s", 5: "32GT/s", 6: "64GT/s"}

type probed struct {
	GPUs []struct {
		Address  string `json:"address"`
		Device   uint16 `json:"device"`
		Class    uint32 `json:"class"`
		NUMANode int    `json:"numa_node"`
		Driver   string `json:"driver"`
		PCIeRoot string `json:"pcie_root"`
	} `json:"nvpci_gpus"`
	NICs []struct {
		Address  string `json:"address"`
		PCIeRoot string `json:"pcie_root"`
	} `json:"nvpci_mellanox"`
	GHW []struct {
		Address, Product, Driver string
	} `json:"ghw"`
	GHWError   string `json:"ghw_error"`
	NVPCIError string `json:"nvpci_error"`
}

// Every program in the namespace sees the profile's PCI tree in /sys,
// with no preload: Debian's lspci, busybox, and a statically linked Go
// program with go-nvlib and ghw. The host's own PCI devices are not listed;
// the rest of /sys is the host's.
func TestTheNamespaceShowsTheProfilesPCITree(t *testing.T) {
	needRoot(t)
	testenv.Tool(t, "lspci")
	testenv.Tool(t, "lstopo-no-graphics")
	probe := pciProbe(t)
	n := testenv.Node(t, "h100", 0)
	functions := len(pcisim.Devices(n))
	before := hostState(t)
	for _, userns := range []bool{false, true} {
		t.Run(fmt.Sprintf("userns=%v", userns), func(t *testing.T) {
			script := `nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader; echo --
lspci -D -d 10de::0302 2>/dev/null; echo --
lspci 2>/dev/null | grep -c Virtio; echo --
busybox ls /sys/bus/pci/devices | busybox wc -l; echo --
busybox cat /sys/devices/system/cpu/online; echo --
lstopo-no-graphics --whole-io 2>/dev/null | grep -c '(3D)'; echo --
lspci -tv 2>/dev/null | grep -c 'NVIDIA Corporation GH100'; lspci -vvv -s 53:00.0 2>/dev/null | grep -E 'LnkCap:|LnkSta:|NUMA node:'; echo --
` + probe
			r := run(t, "h100", 0, userns, "sh", "-c", script)
			if r.err != nil || r.status != 0 {
				t.Fatalf("status %d, %v\nstdout %s\nstderr %s", r.status, r.err, r.stdout, r.stderr)
			}
			parts := strings.Split(r.stdout, "--\n")
			if len(parts) != 8 {
				t.Fatalf("unexpected output:\n%s", r.stdout)
			}
			var want []string
			for _, g := range n.GPUs {
				want = append(want, g.Address.String())
			}
			// nvidia-smi (NVML) and lspci (sysfs) name the same GPUs.
			var smi, lspci []string
			for _, l := range testenv.Lines(parts[0]) {
				a, _ := profile.ParsePCIAddress(l)
				smi = append(smi, a.String())
			}
			for _, l := range testenv.Lines(parts[1]) {
				a, rest, _ := strings.Cut(l, " ")
				lspci = append(lspci, a)
				if !strings.Contains(rest, "NVIDIA Corporation GH100[H100 SXM5 80GB]") {
					t.Errorf("lspci: %s", l)
				}
			}
			if !slices.Equal(smi, want) || !slices.Equal(lspci, want) {
				t.Errorf("GPUs: nvidia-smi %v, lspci %v; the profile %v", smi, lspci, want)
			}
			if got := strings.TrimSpace(parts[2]); got != "0" {
				t.Errorf("lspci lists %s of the host's virtio devices, want 0", got)
			}
			if got := strings.TrimSpace(parts[3]); got != fmt.Sprint(functions) {
				t.Errorf("busybox lists %s devices in /sys/bus/pci/devices, the tree has %d", got, functions)
			}
			if host, _ := os.ReadFile("/sys/devices/system/cpu/online"); strings.TrimSpace(parts[4]) != strings.TrimSpace(string(host)) {
				t.Errorf("/sys/devices/system/cpu/online reads %q in the namespace, %q on the host", parts[4], host)
			}
			if got := strings.TrimSpace(parts[5]); got != fmt.Sprint(len(n.GPUs)) {
				t.Errorf("lstopo shows %s 3D controllers, the profile has %d GPUs", got, len(n.GPUs))
			}
			// lspci's tree and one GPU's capabilities, as the board's link gives them.
			g0 := n.GPUs[0].Board.PCI
			wantLspci := []string{fmt.Sprint(len(n.GPUs)), "NUMA node: 0",
				fmt.Sprintf("LnkCap:\tPort #0, Speed %s, Width x%d", gts[g0.GPUMaxLinkGen], g0.MaxLinkWidth),
				fmt.Sprintf("LnkSta:\tSpeed %s, Width x%d", gts[g0.LinkGen], g0.LinkWidth)}
			got6 := testenv.Lines(parts[6])
			for i := range got6 {
				got6[i] = strings.TrimSpace(got6[i])
			}
			if len(got6) != len(wantLspci) {
				t.Errorf("lspci -tv and -vvv -s 53:00.0 show %q, want %q", got6, wantLspci)
			} else {
				for i, w := range wantLspci {
					if !strings.HasPrefix(got6[i], w) {
						t.Errorf("lspci -tv and -vvv -s 53:00.0: %q, want %q...", got6[i], w)
					}
				}
			}
			var got probed
			if err := json.Unmarshal([]byte(parts[7]), &got); err != nil {
				t.Fatalf("pciprobe: %v\n%s", err, parts[7])
			}
			if got.NVPCIError != "" || got.GHWError != "" || len(got.GPUs) != len(n.GPUs) {
				t.Fatalf("pciprobe: nvpci %q, ghw %q, %d GPUs", got.NVPCIError, got.GHWError, len(got.GPUs))
			}
			for i, g := range got.GPUs {
				m := n.GPUs[i]
				root := pcisim.RootName(m.Function.Root)
				if g.Address != m.Address.String() || g.Class != 0x030200 || g.NUMANode != m.NUMANode || g.Driver != "nvidia" || g.PCIeRoot != root || g.Device != m.Function.Device {
					t.Errorf("go-nvlib reads GPU %d as %+v; the profile: %s, class 0x030200, NUMA %d, nvidia, device %#x, root %s",
						i, g, m.Address, m.NUMANode, m.Function.Device, root)
				}
			}
			if len(got.NICs) == 0 {
				t.Error("go-nvlib finds no ConnectX NICs")
			}
			named := 0
			for _, d := range got.GHW {
				if d.Product == "GH100[H100 SXM5 80GB]" && d.Driver == "nvidia" {
					named++
				}
			}
			if named != len(n.GPUs) {
				t.Errorf("ghw names %d GPUs as H100s bound to nvidia, want %d", named, len(n.GPUs))
			}
		})
	}
	if after := hostState(t); after != before {
		t.Errorf("the host changed:\n--- before\n%s\n--- after\n%s", before, after)
	}
}

// hwlocObj is an object of lstopo's XML: the parts read here.
type hwlocObj struct {
	Type     string     `xml:"type,attr"`
	Name     string     `xml:"name,attr"`
	BusID    string     `xml:"pci_busid,attr"`
	Children []hwlocObj `xml:"object"`
}

// hwloc with Debian's NVML plugin (contrib, fetched by hack/fetch-hwloc.sh)
// attaches each NVML GPU to the PCI device of its bus id: NVML's nvmlN is
// the tree's GPU N, so the library's bus ids and the rendered tree agree
// for a tool that reads both.
func TestHwlocAttachesEachNVMLGPUToItsPCIDevice(t *testing.T) {
	needRoot(t)
	lstopo := testenv.Tool(t, "lstopo-no-graphics")
	plugins := filepath.Join(testenv.CacheDir(), "hwloc-plugins")
	if _, err := os.Stat(filepath.Join(plugins, "hwloc_nvml.so")); err != nil {
		testenv.Missing(t, "%s/hwloc_nvml.so (make test fetches it: hack/fetch-hwloc.sh)", plugins)
	}
	for _, board := range []string{"a100", "gb200"} {
		t.Run(board, func(t *testing.T) {
			n := testenv.Node(t, board, 0)
			r := run(t, board, 0, false, "env", "HWLOC_PLUGINS_PATH="+plugins, lstopo, "--whole-io", "--of", "xml", "-")
			if r.err != nil || r.status != 0 {
				t.Fatalf("status %d, %v\n%s", r.status, r.err, r.stderr)
			}
			var top hwlocObj
			if err := xml.Unmarshal([]byte(r.stdout), &top); err != nil {
				t.Fatal(err)
			}
			under := map[string]string{} // nvmlN -> PCI bus id of its parent
			var walk func(o hwlocObj, pci string)
			walk = func(o hwlocObj, pci string) {
				if o.Type == "PCIDev" {
					pci = o.BusID
				}
				if o.Type == "OSDev" && strings.HasPrefix(o.Name, "nvml") {
					under[o.Name] = pci
				}
				for _, c := range o.Children {
					walk(c, pci)
				}
			}
			walk(top, "")
			if len(under) != len(n.GPUs) {
				t.Errorf("hwloc shows %d NVML GPUs (%v), the profile has %d", len(under), under, len(n.GPUs))
			}
			for i, g := range n.GPUs {
				if got := under[fmt.Sprintf("nvml%d", i)]; got != g.Address.String() {
					t.Errorf("nvml%d is under PCI device %q, want GPU %d's %s", i, got, i, g.Address)
				}
			}
		})
	}
}

// Every bus of the tree is in /sys/class/pci_bus, the host's bus there
// replaced, and a device's path is found through its bus as NCCL finds
// it (realpath of /sys/class/pci_bus/DDDD:BB/../../DDDD:BB:DD.F): on
// a100, whose HCAs add classes (a cover of /sys/class on a host without
// RDMA), and l40s, which adds none.
func TestEveryPCIDeviceIsFoundThroughItsBusClassLink(t *testing.T) {
	needRoot(t)
	for _, name := range []string{"a100", "l40s"} {
		t.Run(name, func(t *testing.T) {
			n := testenv.Node(t, name, 0)
			r := run(t, name, 0, true, "sh", "-c", `ls /sys/class/pci_bus; echo --
for d in /sys/bus/pci/devices/*; do b=${d##*/}
	echo "$b $(realpath /sys/class/pci_bus/${b%:*}/../../$b) $(realpath $d)"
done`)
			if r.err != nil || r.status != 0 {
				t.Fatalf("status %d, %v\nstdout %s\nstderr %s", r.status, r.err, r.stdout, r.stderr)
			}
			buses, paths, _ := strings.Cut(r.stdout, "--\n")
			want := map[string]bool{}
			for _, d := range pcisim.Devices(n) {
				want[d[:7]] = true // DDDD:BB
			}
			if got := testenv.Lines(buses); len(got) != len(want) || !all(got, want) {
				t.Errorf("/sys/class/pci_bus lists %v, want the tree's buses %v", got, slices.Sorted(maps.Keys(want)))
			}
			lines := testenv.Lines(paths)
			if len(lines) != len(pcisim.Devices(n)) {
				t.Fatalf("%d devices in /sys/bus/pci/devices, the tree has %d:\n%s", len(lines), len(pcisim.Devices(n)), paths)
			}
			for _, l := range lines {
				f := strings.Fields(l)
				if len(f) != 3 || f[1] != f[2] {
					t.Errorf("through its bus a device resolves elsewhere than through /sys/bus/pci (address, bus path, device path): %q", l)
				}
			}
		})
	}
}

// all says whether every name is in set.
func all(names []string, set map[string]bool) bool {
	for _, s := range names {
		if !set[s] {
			return false
		}
	}
	return true
}
