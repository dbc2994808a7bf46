package pcisim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/nvmock/nvmock/profile"
)

// Drivers bound to each kind of function, as on a real node; a NIC's is
// its vendor's.
var drivers = map[profile.PCIRole]string{
	profile.RoleRootPort: "pcieport", profile.RoleSwitchUp: "pcieport", profile.RoleSwitchDown: "pcieport",
	profile.RoleGPU: "nvidia", profile.RoleNVSwitch: "nvidia-nvswitch", profile.RoleNIC: "mlx5_core",
}

// nicDrivers are the drivers of NICs other than ConnectX, by vendor.
var nicDrivers = map[uint16]string{0x1d0f: "ena"} // Amazon's Elastic Network Adapter

func driverOf(f *profile.PCIFunction) string {
	if d, ok := nicDrivers[f.Vendor]; ok && f.Role == profile.RoleNIC {
		return d
	}
	return drivers[f.Role]
}

// File is one entry of the rendered tree, relative to the sysfs root: a
// file with its content, or a symlink. Directories are implied.
type File struct {
	Path string
	Data []byte
	Link string // symlink target, relative as the kernel's are
}

// Mode is what the kernel's attribute files read as from user space.
const Mode = 0o444

// Files lists the node's PCI tree as the kernel lays it out in /sys:
// devices/pciDDDD:BB/..., bus/pci/{devices,drivers} and
// kernel/iommu_groups. A tree whose memory does not fit is an error.
func Files(n *profile.Node) ([]File, error) {
	r := &renderer{n: n, alloc: allocator{next32: mmio32Base, next64: mmio64Base}, cpus: 1}
	// The kernel prints every CPU mask as wide as the node's CPUs: the
	// highest the node knows, not only its roots' (review: a100 with
	// --gpus 2 printed 7 words, with 8 8).
	last := func(s *profile.CPUSet) {
		if s != nil && s.Last()+1 > r.cpus {
			r.cpus = s.Last() + 1
		}
	}
	for _, root := range n.PCIe.Roots {
		last(&root.CPUs)
	}
	for i := range n.GPUs {
		last(n.GPUs[i].CPUs)
		last(n.GPUs[i].SocketCPUs)
	}
	for _, s := range n.Profile.Topology.Sockets { // those without the node's GPUs too
		if m, err := profile.ParseCPUList(s.CPUs); err == nil {
			cs := profile.CPUSet(m)
			last(&cs)
		}
	}
	// The built-in port driver and nvidia are there on any such node;
	// the others, where a function of theirs is.
	used := []string{"pcieport", "nvidia"}
	n.PCIe.Walk(func(f *profile.PCIFunction) {
		if d := driverOf(f); !slices.Contains(used, d) {
			used = append(used, d)
		}
	})
	for _, d := range used {
		r.file("bus/pci/drivers/"+d+"/bind", "")
		r.file("bus/pci/drivers/"+d+"/unbind", "")
	}
	r.file("bus/pci/drivers_autoprobe", "1\n")
	for _, root := range n.PCIe.Roots {
		r.root(root)
	}
	if err := r.alloc.check(); err != nil {
		return nil, err
	}
	return r.out, nil
}

// Render writes the node's Files into dir, which must not exist yet.
func Render(n *profile.Node, dir string) error {
	fs, err := Files(n)
	if err != nil {
		return err
	}
	return Write(fs, dir)
}

type renderer struct {
	n     *profile.Node
	alloc allocator
	cpus  int // CPUs the node's masks span
	group int // next IOMMU group
	out   []File
}

func (r *renderer) file(rel, content string) {
	r.out = append(r.out, File{Path: rel, Data: []byte(content)})
}

// link makes rel a relative link to target, both relative to the tree.
func (r *renderer) link(rel, target string) {
	to, _ := filepath.Rel(filepath.Dir(rel), target) // both relative: never fails
	r.out = append(r.out, File{Path: rel, Link: to})
}

// RootName is the sysfs directory of a host bridge: "pci0000:4d".
func RootName(root *profile.PCIRoot) string {
	return fmt.Sprintf("pci%04x:%02x", root.Domain, root.Bus)
}

func (r *renderer) root(root *profile.PCIRoot) {
	dir := "devices/" + RootName(root)
	r.file(dir+"/uevent", "")
	r.bus(dir, root.Domain, root.Bus, root)
	for _, f := range root.Functions {
		r.function(dir, f, root)
	}
}

// bus renders the bus numbered n that the host bridge or bridge at dir
// leads to, in dir/pci_bus and class/pci_bus, as the kernel has one for
// every bus: NCCL finds a device's path through its bus's class link.
func (r *renderer) bus(dir string, domain, n uint32, root *profile.PCIRoot) {
	name := fmt.Sprintf("%04x:%02x", domain, n)
	b := dir + "/pci_bus/" + name
	r.file(b+"/cpuaffinity", root.CPUs.Mask(r.cpus)+"\n")
	r.file(b+"/cpulistaffinity", root.CPUs.List()+"\n")
	r.file(b+"/uevent", "")
	r.link(b+"/device", dir)
	r.link(b+"/subsystem", "class/pci_bus")
	r.link("class/pci_bus/"+name, b)
}

// function renders f under parentDir and everything behind it; its
// resources are allocated depth first so that a bridge's window covers
// exactly what is behind it.
func (r *renderer) function(parentDir string, f *profile.PCIFunction, root *profile.PCIRoot) *resources {
	bdf := f.Address.String()
	dir := parentDir + "/" + bdf
	res := &resources{}
	if f.Role.IsBridge() {
		r.alloc.next32, r.alloc.next64 = alignUp(r.alloc.next32, mib), alignUp(r.alloc.next64, mib)
		s32, s64 := r.alloc.next32, r.alloc.next64
		for _, c := range f.Children {
			r.function(dir, c, root)
		}
		e32, e64 := alignUp(r.alloc.next32, mib), alignUp(r.alloc.next64, mib)
		r.alloc.next32, r.alloc.next64 = e32, e64
		res.window32 = window{s32, e32 - s32}
		res.window64 = window{s64, e64 - s64}
	} else {
		res.bars = barsOf(f, r.n, &r.alloc)
	}

	l := linkOf(f)
	multi := f.Address.Function != 0 || r.hasSibling(f, root)
	r.out = append(r.out, File{Path: dir + "/config", Data: configSpace(f, res, l, multi)})
	r.file(dir+"/resource", resourceFile(f, res))
	r.file(dir+"/vendor", fmt.Sprintf("0x%04x\n", f.Vendor))
	r.file(dir+"/device", fmt.Sprintf("0x%04x\n", f.Device))
	r.file(dir+"/subsystem_vendor", fmt.Sprintf("0x%04x\n", f.SubsystemVendor))
	r.file(dir+"/subsystem_device", fmt.Sprintf("0x%04x\n", f.SubDevice))
	r.file(dir+"/class", fmt.Sprintf("0x%06x\n", f.Class))
	r.file(dir+"/revision", fmt.Sprintf("0x%02x\n", f.Revision))
	r.file(dir+"/numa_node", fmt.Sprintf("%d\n", f.NUMANode))
	r.file(dir+"/local_cpus", root.CPUs.Mask(r.cpus)+"\n")
	r.file(dir+"/local_cpulist", root.CPUs.List()+"\n")
	r.file(dir+"/current_link_speed", linkSpeed(l.gen)+"\n")
	r.file(dir+"/current_link_width", fmt.Sprintf("%d\n", l.width))
	r.file(dir+"/max_link_speed", linkSpeed(l.maxGen)+"\n")
	r.file(dir+"/max_link_width", fmt.Sprintf("%d\n", l.maxWidth))
	drv := driverOf(f)
	alias := modalias(f)
	r.file(dir+"/modalias", alias+"\n")
	// lspci -v reads it; MSI-capable functions show a vector the kernel gave.
	r.file(dir+"/irq", fmt.Sprintf("%d\n", 64+r.group))
	uevent := fmt.Sprintf("PCI_CLASS=%X\nPCI_ID=%04X:%04X\nPCI_SUBSYS_ID=%04X:%04X\nPCI_SLOT_NAME=%s\nMODALIAS=%s\n",
		f.Class, f.Vendor, f.Device, f.SubsystemVendor, f.SubDevice, bdf, alias)
	if !f.Unbound {
		uevent = "DRIVER=" + drv + "\n" + uevent
	}
	r.file(dir+"/uevent", uevent)
	if f.Role.IsBridge() {
		r.file(dir+"/secondary_bus_number", fmt.Sprintf("%d\n", f.Secondary))
		r.file(dir+"/subordinate_bus_number", fmt.Sprintf("%d\n", f.Subordinate))
		r.bus(dir, f.Address.Domain, f.Secondary, root)
	}
	r.link(dir+"/subsystem", "bus/pci")
	r.link("bus/pci/devices/"+bdf, dir)
	if !f.Unbound {
		r.link(dir+"/driver", "bus/pci/drivers/"+drv)
		r.link("bus/pci/drivers/"+drv+"/"+bdf, dir)
	}
	group := fmt.Sprintf("kernel/iommu_groups/%d", r.group)
	r.group++
	r.link(group+"/devices/"+bdf, dir)
	r.link(dir+"/iommu_group", group)
	return res
}

// hasSibling says whether another function shares f's device number,
// which makes function 0 a multi-function device.
func (r *renderer) hasSibling(f *profile.PCIFunction, root *profile.PCIRoot) bool {
	sibs := root.Functions
	if f.Parent != nil {
		sibs = f.Parent.Children
	}
	for _, s := range sibs {
		if s != f && s.Address.Bus == f.Address.Bus && s.Address.Device == f.Address.Device {
			return true
		}
	}
	return false
}

func modalias(f *profile.PCIFunction) string {
	return fmt.Sprintf("pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X",
		f.Vendor, f.Device, f.SubsystemVendor, f.SubDevice, f.Class>>16, f.Class>>8&0xff, f.Class&0xff)
}

// link is a function's PCIe link: the most it can do, and what it trained
// to with the other end.
type link struct{ gen, width, maxGen, maxWidth uint32 }

// linkOf: an upstream-facing function (endpoint, switch upstream port)
// trains with the port above it; a downstream-facing port shows the link
// of what is below it.
func linkOf(f *profile.PCIFunction) link {
	l := link{gen: f.LinkGen, width: f.LinkWidth, maxGen: f.MaxLinkGen, maxWidth: f.MaxLinkWidth}
	if l.gen == 0 {
		l.gen = l.maxGen
	}
	if l.width == 0 {
		l.width = l.maxWidth
	}
	switch f.Role {
	case profile.RoleRootPort, profile.RoleSwitchDown:
		if len(f.Children) > 0 {
			c := linkOf(f.Children[0])
			l.gen, l.width = min(c.gen, l.maxGen), min(c.width, l.maxWidth)
		}
	default:
		l.gen, l.width = f.TrainedLink()
	}
	return l
}

var speeds = []string{"", "2.5 GT/s", "5.0 GT/s", "8.0 GT/s", "16.0 GT/s", "32.0 GT/s", "64.0 GT/s"}

func linkSpeed(gen uint32) string {
	if int(gen) >= len(speeds) || gen == 0 {
		return "Unknown"
	}
	return speeds[gen] + " PCIe"
}

// Devices lists the rendered functions' addresses, in tree order.
func Devices(n *profile.Node) []string {
	var out []string
	var walk func(fs []*profile.PCIFunction)
	walk = func(fs []*profile.PCIFunction) {
		for _, f := range fs {
			out = append(out, f.Address.String())
			walk(f.Children)
		}
	}
	for _, root := range n.PCIe.Roots {
		walk(root.Functions)
	}
	return out
}

// Hash is 16 hex digits of a digest of files: paths, links and contents.
func Hash(files []File) string {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%s\x00%d\x00", f.Path, f.Link, len(f.Data))
		h.Write(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// DevicePath is where sysfs shows a function, relative to its root:
// "devices/pci0000:4d/0000:4d:01.0/.../0000:50:00.0".
func DevicePath(f *profile.PCIFunction) string {
	p := f.Address.String()
	for up := f.Parent; up != nil; up = up.Parent {
		p = up.Address.String() + "/" + p
	}
	return "devices/" + RootName(f.Root) + "/" + p
}
