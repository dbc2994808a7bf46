package pcisim

import (
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

// lspciPath is the bridge path lspci -PP prints for a function: every
// bridge above it, which lspci finds from the bridges' bus numbers in
// their config space, not from the directories.
func lspciPath(f *profile.PCIFunction) string {
	var parts []string
	for p := f; p != nil; p = p.Parent {
		a := p.Address
		parts = append([]string{fmt.Sprintf("%02x:%02x.%x", a.Bus, a.Device, a.Function)}, parts...)
	}
	return fmt.Sprintf("%04x:", f.Address.Domain) + strings.Join(parts, "/")
}

var gtPerGen = map[uint32]string{1: "2.5GT/s", 2: "5GT/s", 3: "8GT/s", 4: "16GT/s", 5: "32GT/s", 6: "64GT/s"}

// Debian's lspci reads every built-in board's tree as the profile lays it
// out: each function at its place behind its bridges, named from pci.ids
// (no "Device [vvvv:dddd]" for a GPU, NVSwitch or NIC but unnamedIDs), with its NUMA node, driver
// and link.
// unnamedIDs are devices that Debian 12's pci.ids (lspci's) does not name
// yet: lspci shows "Device [10de:31c2]" for them, as on a real node.
var unnamedIDs = []string{"[10de:31c2]"} // GB300

// wantDriver is the driver a real node binds to an endpoint: nvidia to
// GPUs, nvidia-nvswitch to NVSwitches, mlx5_core to ConnectX and ena to
// Amazon's ENA.
func wantDriver(f *profile.PCIFunction) string {
	switch {
	case f.Role == profile.RoleGPU:
		return "nvidia"
	case f.Role == profile.RoleNVSwitch:
		return "nvidia-nvswitch"
	case f.Vendor == 0x1d0f:
		return "ena"
	}
	return "mlx5_core"
}

func TestLspciReadsEveryBoardsTree(t *testing.T) {
	lspci := testenv.Tool(t, "lspci")
	type board struct {
		name string
		gpus int // 0: the profile's
	}
	var boards []board
	for _, name := range profile.Builtins() {
		boards = append(boards, board{name, 0})
	}
	boards = append(boards, board{"a100", 16}) // a repeated tree: its NICs unbound
	for _, c := range boards {
		name := c.name
		t.Run(fmt.Sprintf("%s-%d", name, c.gpus), func(t *testing.T) {
			n := builtinNode(t, name, c.gpus)
			dir := filepath.Join(t.TempDir(), "sys")
			if err := Render(n, dir); err != nil {
				t.Fatal(err)
			}
			// Output only: lspci warns on stderr that this machine has no kernel modules.
			out, err := exec.Command(lspci, "-O", "sysfs.path="+dir+"/bus/pci", "-D", "-PP", "-vvv", "-nn").Output()
			if err != nil {
				t.Fatalf("lspci: %v\n%s", err, out)
			}
			blocks := map[string]string{} // path -> its block
			for _, b := range strings.Split(string(out), "\n\n") {
				if head, _, ok := strings.Cut(b, " "); ok {
					blocks[strings.TrimSpace(head)] = b
				}
			}
			count := 0
			n.PCIe.Walk(func(f *profile.PCIFunction) {
				count++
				b, ok := blocks[lspciPath(f)]
				if !ok {
					t.Errorf("lspci shows no %s (a %s) at %s", f.Address, f.Role, lspciPath(f))
					return
				}
				ids := fmt.Sprintf("[%04x:%04x]", f.Vendor, f.Device)
				if !strings.Contains(b, ids) {
					t.Errorf("%s: no %s in\n%s", f.Address, ids, b)
				}
				if f.Role == profile.RoleGPU || f.Role == profile.RoleNIC || f.Role == profile.RoleNVSwitch {
					// With -nn an unnamed device is "Device [10de:31c2]".
					if head := strings.SplitN(b, "\n", 2)[0]; regexp.MustCompile(`: (NVIDIA Corporation|Mellanox Technologies) Device \[`).MatchString(head) &&
						!slices.ContainsFunc(unnamedIDs, func(id string) bool { return strings.Contains(head, id) }) {
						t.Errorf("%s: pci.ids does not name it: %s", f.Address, strings.SplitN(b, "\n", 2)[0])
					}
					if want := "Kernel driver in use: " + wantDriver(f); !strings.Contains(b, want) && !f.Unbound {
						t.Errorf("%s: no %q", f.Address, want)
					}
					if f.Unbound && strings.Contains(b, "Kernel driver in use") {
						t.Errorf("%s (a repeated NIC, no RDMA device): lspci shows a driver:\n%s", f.Address, b)
					}
				}
				if want := fmt.Sprintf("NUMA node: %d", f.NUMANode); f.NUMANode >= 0 && !strings.Contains(b, want) {
					t.Errorf("%s: no %q in\n%s", f.Address, want, b)
				}
				l := linkOf(f)
				want := fmt.Sprintf("LnkSta:\tSpeed %s", gtPerGen[l.gen])
				if !strings.Contains(b, want) || !strings.Contains(b, fmt.Sprintf("Width x%d", l.width)) {
					t.Errorf("%s: link gen %d x%d not shown as %q:\n%s", f.Address, l.gen, l.width, want, b)
				}
				// Only a port has a number; an endpoint's is 0 (review: the T4
				// on a VM's bus 0 said Port #30).
				port := uint32(0)
				if f.Role.IsBridge() {
					port = f.Address.Device
				}
				if want := fmt.Sprintf("LnkCap:\tPort #%d,", port); !strings.Contains(b, want) {
					t.Errorf("%s: no %q in\n%s", f.Address, want, b)
				}
				// A link at 8 GT/s or more has equalized.
				if eq := strings.Contains(b, "EqualizationComplete+"); eq != (l.gen >= 3) {
					t.Errorf("%s: at gen %d, equalization complete is %v:\n%s", f.Address, l.gen, eq, b)
				}
			})
			if len(blocks) != count {
				t.Errorf("lspci lists %d functions, the tree has %d", len(blocks), count)
			}
			if i := strings.Index(string(out), "!!!"); i >= 0 {
				t.Errorf("lspci complains: %s", strings.SplitN(string(out[i:]), "\n", 2)[0])
			}
		})
	}
}

// A GPU's link as the board reports it through NVML is what lspci decodes
// from its config space: the board's PCIe generation and width.
func TestGPULinkIsTheBoards(t *testing.T) {
	n := builtinNode(t, "h100", 0)
	for _, g := range n.GPUs {
		l := linkOf(g.Function)
		pci := g.Board.PCI
		if l.gen != pci.LinkGen || l.width != pci.LinkWidth || l.maxGen != pci.GPUMaxLinkGen || l.maxWidth != pci.MaxLinkWidth {
			t.Errorf("GPU %d: link gen %d x%d (max gen %d x%d); the board: gen %d x%d (max gen %d x%d)", g.Index,
				l.gen, l.width, l.maxGen, l.maxWidth, pci.LinkGen, pci.LinkWidth, pci.GPUMaxLinkGen, pci.MaxLinkWidth)
		}
	}
}

// hwloc's object tree, as lstopo --of xml writes it: the parts read here.
type hwlocObj struct {
	Type      string     `xml:"type,attr"`
	BusID     string     `xml:"pci_busid,attr"`
	BridgePCI string     `xml:"bridge_pci,attr"`
	LinkSpeed string     `xml:"pci_link_speed,attr"`
	Children  []hwlocObj `xml:"object"`
}

// Debian's hwloc, given the rendered tree as its file system root, finds
// every GPU and NIC behind the host bridge the profile puts it under, with
// its link speed from the config space.
func TestLstopoPlacesEveryGPUAndNICUnderItsHostBridge(t *testing.T) {
	lstopo := testenv.Tool(t, "lstopo-no-graphics")
	for _, name := range profile.Builtins() {
		t.Run(name, func(t *testing.T) {
			n := builtinNode(t, name, 0)
			root := filepath.Join(t.TempDir(), "root")
			if err := os.MkdirAll(root, 0o755); err != nil {
				t.Fatal(err)
			}
			// The layout hostprep gives its sysfs root.
			sys := filepath.Join(root, "sys")
			if err := Render(n, sys); err != nil {
				t.Fatal(err)
			}
			for link, to := range map[string]string{"proc": "/proc", "sys/devices/system": "/sys/devices/system"} {
				if err := os.Symlink(to, filepath.Join(root, link)); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(lstopo, "--whole-io", "--of", "xml", "-")
			cmd.Env = append(os.Environ(), "HWLOC_FSROOT="+root)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("lstopo: %v", err)
			}
			var top hwlocObj
			if err := xml.Unmarshal(out, &top); err != nil {
				t.Fatal(err)
			}
			// Each endpoint, with the host bridge it sits under.
			under := map[string]string{}
			speed := map[string]string{}
			var rec func(o hwlocObj, bridge string)
			rec = func(o hwlocObj, bridge string) {
				if o.Type == "Bridge" && bridge == "" {
					bridge = o.BridgePCI
				}
				if o.Type == "PCIDev" {
					under[o.BusID], speed[o.BusID] = bridge, o.LinkSpeed
				}
				for _, c := range o.Children {
					rec(c, bridge)
				}
			}
			rec(top, "")
			for _, r := range n.PCIe.Roots {
				var fns []*profile.PCIFunction
				var collect func(fs []*profile.PCIFunction)
				collect = func(fs []*profile.PCIFunction) {
					for _, f := range fs {
						if !f.Role.IsBridge() {
							fns = append(fns, f)
						}
						collect(f.Children)
					}
				}
				collect(r.Functions)
				for _, f := range fns {
					id := f.Address.String()
					hb, ok := under[id]
					if !ok {
						t.Errorf("lstopo has no %s (%s)", id, f.Role)
						continue
					}
					// A host bridge covers its root bus up to the last bus behind it.
					if !strings.HasPrefix(hb, fmt.Sprintf("%04x:[%02x-", r.Domain, r.Bus)) {
						t.Errorf("lstopo puts %s under host bridge %s, the profile under pci%04x:%02x", id, hb, r.Domain, r.Bus)
					}
					l := linkOf(f)
					if s, _ := strconv.ParseFloat(speed[id], 64); s <= 0 && l.gen > 0 {
						t.Errorf("%s: lstopo reads no link speed (gen %d x%d)", id, l.gen, l.width)
					}
				}
			}
		})
	}
}
