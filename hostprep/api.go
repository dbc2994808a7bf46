package hostprep

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/nvmock/nvmock/hostprep/nsexec"
	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/pcisim"
	"github.com/nvmock/nvmock/profile"
)

// Options say what to render.
type Options struct {
	Profile *profile.Profile // validated; GPUs already applied
	// Node is Profile.Node(), from a caller that has it already (nvmock
	// exec); nil: made here.
	Node     *profile.Node
	NodeName string // the node's name: its labels, its fabric host
	// Seed makes the GPUs' identities; "": NodeName. nvmock hostprep
	// gives snapshot.NodeSeed when the node has no name of its own, so
	// that exec and the library agree with an install on the same host.
	Seed              string
	Assets            string // a built driver tree: usr/lib64/libnvidia-ml.so.* and usr/bin/nvidia-smi
	RealDeviceNumbers bool   // NVIDIA's real majors instead of inert /dev/null numbers
	// PlainDevFiles makes empty regular files instead of character devices,
	// for renders without CAP_MKNOD (an unprivileged `nvmock exec`): the
	// library only checks that a node exists.
	PlainDevFiles bool
	// BindAssets leaves the overlay's copies of the assets' programs and
	// libraries empty, and names them in Overlay.Bound, for a caller that
	// binds the assets over them: nvmock exec's namespace.
	BindAssets bool
	// NoPCI leaves the PCI tree (sysfs/) out, for renders that keep one of
	// their own: nvmock exec caches it, as it depends only on the profile.
	NoPCI bool
	// Hook is the nvmock-hook binary to install at HookPath, for the NRI
	// plugin to run in GPU containers; "" leaves it out.
	Hook string
	// FabricSlot is this node's place in its InfiniBand fabric, from 1;
	// 0 places it by its name (fabric.SlotOf).
	FabricSlot int
	// FabricHost is this node's name in its fabric; "": NodeName.
	FabricHost string
	// IBFaults are InfiniBand port faults (fabric.Fault); those naming
	// another node are only checked.
	IBFaults []fabric.Fault
	// Fabric is the node's fabric, built for FabricHost and FabricSlot
	// with IBFaults applied, by a caller that has it already (nvmock
	// exec's daemon serves it); nil: built here. Render only reads it.
	Fabric *fabric.Fabric
	// SharedIBTables leaves the GID and P_Key tables (most of the files)
	// out of the live InfiniBand ports, for a sysfs view that shows the
	// tree's there: nvmock exec, which would write them on every run.
	SharedIBTables bool
	// SharedMIGProc leaves the MIG capability files of /proc out, and
	// SharedMIGNodes the capability nodes (hundreds each, the same on
	// every node of a board), for a caller that shows RenderMIGCaps' from
	// a cache: nvmock exec, where making them would be half of every
	// run's start.
	SharedMIGProc, SharedMIGNodes bool
	// MIG partitions the GPUs at install (profile.MIGLayout); "" takes
	// the profile's board.modes.mig.layout.
	MIG string
	// StateLink makes the overlay's live-state file (StatePath) a hard
	// link to this file (which must exist), for installs that keep the
	// state beside the overlays; "" renders a fresh state file of the
	// overlay's own (nvmock exec). A hard link, not a symlink: a container
	// given the driver root alone (NVIDIA's DRA driver, nvidia-ctk's CDI
	// mounts) sees the state through it too.
	StateLink string
}

// StatePath is where the library looks for the live state (package live):
// beside its snapshot.
var StatePath = filepath.Join("driver", "etc", "nvmock", "state")

// StateFile is the live state of an installed node, in the root: it
// outlives the overlays an install replaces. It has a directory of its own,
// which the chart's plugin container mounts read-write without the rest of
// the root.
var StateFile = filepath.Join("live", "state")

// StartedDir is where the runtime hook of a container that shows as a GPU
// process writes its pid, for the NRI plugin, beside the live state at
// statePath.
func StartedDir(statePath string) string { return filepath.Join(filepath.Dir(statePath), "started") }

// XIDLogCursor is where the chart's nvmock xidlog keeps its place (its
// --cursor), beside the live state at statePath; uninstall removes it, its
// lock and a write cut short.
func XIDLogCursor(statePath string) string {
	return filepath.Join(filepath.Dir(statePath), "xidlog.cursor")
}

// HookPath is where an overlay keeps the runtime hook (cmd/nvmock-hook).
const HookPath = "bin/nvmock-hook"

// Overlay is a rendered tree: Dir/driver is the driver root (usr/lib64,
// usr/bin, etc/nvmock/snapshot, dev, proc/driver/nvidia), Dir/sysfs a
// file system root for tools that take one, holding the node's PCI tree at
// sysfs/sys (pcisim).
type Overlay struct {
	Dir      string
	GPUs     []snapshot.Identity // what each GPU is called on this node
	DevNodes []DevNode           // the nodes under driver/dev
	Snapshot []byte              // the compiled snapshot as written
	// Bound are the assets left empty in the driver root with
	// Options.BindAssets, for nsexec to bind over them.
	Bound []nsexec.Bind
}

// Driver is the driver root inside the overlay.
func (o *Overlay) Driver() string { return filepath.Join(o.Dir, "driver") }

// Sys is the rendered PCI tree, laid out as /sys: lspci -O
// sysfs.path=Sys()/bus/pci reads it, pcisim/expose shows it.
func (o *Overlay) Sys() string { return SysOf(o.Dir) }

// SysOf is the rendered PCI tree of the overlay at dir.
func SysOf(dir string) string { return filepath.Join(dir, "sysfs", "sys") }

// SMIRPath is the DT_RPATH nvidia-smi carries (hack/package-driver.sh sets
// it), so it finds the library next to it; the library resolves its own path
// before looking for the snapshot beside it.
const SMIRPath = "$ORIGIN/../lib64"

// renderFormat changes whenever Render lays out a tree differently, so an
// upgrade re-renders even when profile and assets are the same.
const renderFormat = "nvmock-overlay-8"

const libName = "libnvidia-ml.so"

// Render writes a complete overlay into dir, which must be empty or absent.
func Render(dir string, o Options) (*Overlay, error) {
	in, err := gather(o)
	if err != nil {
		return nil, err
	}
	return in.render(dir)
}

// inputs is everything an overlay derives from, read once.
type inputs struct {
	opt      Options
	lib, smi asset
	hook     []byte
	imex     *asset  // nil: no NVLink domain
	mps      []asset // MPSBinaries; none: assets without them
	snap     []byte
	ids      []snapshot.Identity
	nodes    []DevNode
	boards   []profile.Board
	pci      []pcisim.File
	ib       *ibInputs  // nil: no InfiniBand
	mig      *migInputs // nil: no MIG layout
	hash     string
}

func gather(o Options) (*inputs, error) {
	p := o.Profile
	if p == nil {
		return nil, errors.New("render overlay: no profile")
	}
	if o.NodeName == "" {
		return nil, errors.New("render overlay: no node name (the seed of GPU identities)")
	}
	if errs := p.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("profile %s: %w", p.Name, errors.Join(errs...))
	}
	in := &inputs{opt: o}
	var err error
	read := assetReader(o.BindAssets)
	if in.lib, in.smi, err = readAssets(o.Assets, read); err != nil {
		return nil, err
	}
	seed := o.Seed
	if seed == "" {
		seed = o.NodeName
	}
	if in.snap, err = snapshot.Compile(p, snapshot.Options{Seed: seed}); err != nil {
		return nil, err
	}
	if o.Hook != "" {
		if in.hook, err = os.ReadFile(o.Hook); err != nil {
			return nil, fmt.Errorf("render overlay: runtime hook: %w", err)
		}
	}
	if in.imex, err = readIMEX(o.Assets, p, read); err != nil {
		return nil, err
	}
	if in.mps, err = readMPS(o.Assets, read); err != nil {
		return nil, err
	}
	in.ids = snapshot.Identities(p, seed)
	in.boards, _ = p.Boards() // validated above
	in.nodes = DevNodes(p.GPUs, o.RealDeviceNumbers)
	node := o.Node
	if node == nil {
		if node, err = p.Node(); err != nil {
			return nil, fmt.Errorf("profile %s: %w", p.Name, err)
		}
	}
	var pci *[]pcisim.File
	if !o.NoPCI {
		if in.pci, err = pcisim.Files(node); err != nil {
			return nil, fmt.Errorf("profile %s: PCI tree: %w", p.Name, err)
		}
		pci = &in.pci
	}
	if node.IB != nil {
		if in.ib, err = gatherIB(o, node, pci, read); err != nil {
			return nil, err
		}
	} else {
		for _, ft := range o.IBFaults {
			if ft.For(o.NodeName) || ft.For(o.FabricHost) {
				return nil, fmt.Errorf("InfiniBand fault %s: profile %s has no InfiniBand", ft, o.Profile.Name)
			}
		}
	}
	if in.mig, err = gatherMIG(o, in.snap); err != nil {
		return nil, err
	}
	return in, nil
}

// inputsHash names an install's overlay: a hash of everything it derives
// from. (Render has no use for it, and a megabyte and more to hash.) The
// MIG layout is in it: another one is a new install, which starts over
// from it; the same one leaves the node's state alone.
func (in *inputs) inputsHash() string {
	o := in.opt
	var imex []byte
	if in.imex != nil {
		imex = in.imex.data
	}
	return Hash(renderFormat, in.snap, in.lib.data, in.smi.data, fmt.Sprint(o.RealDeviceNumbers, o.PlainDevFiles), pcisim.Hash(in.pci), in.hook, in.ib.hashed(), in.mig.spec(), imex, mpsHash(in.mps))
}

// readAssets reads the library (through its symlink chain) and nvidia-smi
// from a built driver tree.
func readAssets(assets string, read func(string) (asset, error)) (lib, smi asset, err error) {
	if assets == "" {
		return lib, smi, errors.New("render overlay: no assets directory (a built driver tree; run make build)")
	}
	so1 := filepath.Join(assets, "usr", "lib64", libName+".1")
	file, err := filepath.EvalSymlinks(so1)
	if err != nil {
		return lib, smi, fmt.Errorf("assets %s: no %s (run make build, or pass --assets): %w", assets, so1, errors.Unwrap(err))
	}
	if lib, err = read(file); err != nil {
		return lib, smi, fmt.Errorf("assets %s: read library: %w", assets, err)
	}
	smiPath := filepath.Join(assets, "usr", "bin", "nvidia-smi")
	if smi, err = read(smiPath); err != nil {
		return lib, smi, fmt.Errorf("assets %s: no usr/bin/nvidia-smi (run hack/package-driver.sh): %w", assets, errors.Unwrap(err))
	}
	if err := checkRPath(smi); err != nil {
		return lib, smi, err
	}
	return lib, smi, nil
}

// checkRPath refuses an ELF nvidia-smi that would not find the mock library
// next to it: it would run against the built-in default, silently.
func checkRPath(smi asset) error {
	var r io.ReaderAt = bytes.NewReader(smi.data)
	if smi.bound { // only its headers are read
		file, err := os.Open(smi.path)
		if err != nil {
			return fmt.Errorf("assets: %w", err)
		}
		defer file.Close()
		r = file
	}
	f, err := elf.NewFile(r)
	if err != nil {
		return nil // not ELF (a wrapper script): it finds the library its own way
	}
	defer f.Close()
	rp, _ := f.DynString(elf.DT_RPATH)
	if len(rp) != 1 || rp[0] != SMIRPath {
		return fmt.Errorf("assets: %s has RPATH %q, want %q; rebuild it with hack/package-driver.sh", smi.path, strings.Join(rp, ":"), SMIRPath)
	}
	return nil
}

// entry is one path of the tree: a file, a symlink or a device node.
type entry struct {
	path  string // relative to the overlay dir
	data  []byte
	mode  os.FileMode
	from  string   // an asset to bind here (Options.BindAssets): left empty
	link  string   // symlink target
	hard  string   // hard link target
	node  *DevNode // device node
	plain bool     // node as an empty regular file
}

// capsDir holds the capability files, MIG's and the others.
var capsDir = filepath.Join("driver", "proc", "driver", "nvidia", "capabilities")

// controlCapEntries are the capability files every node has.
func controlCapEntries() []entry {
	return []entry{
		{path: filepath.Join(capsDir, "mig", "config"), data: []byte(ProcCapability(capMigConfigMinor, 0o400)), mode: 0o444},
		{path: filepath.Join(capsDir, "mig", "monitor"), data: []byte(ProcCapability(capMigMonitorMinor, 0o444)), mode: 0o444},
		{path: filepath.Join(capsDir, "fabric-imex-mgmt"), data: []byte(ProcCapability(capFabricIMEXMinor, 0o400)), mode: 0o444},
	}
}

// entries lists the tree, parents before children.
func (in *inputs) entries() []entry {
	p := in.opt.Profile
	lib64 := filepath.Join("driver", "usr", "lib64")
	versioned := libName + "." + p.Driver.Version
	es := []entry{
		in.lib.entry(filepath.Join(lib64, versioned)),
		{path: filepath.Join(lib64, libName+".1"), link: versioned},
		{path: filepath.Join(lib64, libName), link: libName + ".1"},
		in.smi.entry(filepath.Join("driver", "usr", "bin", "nvidia-smi")),
		{path: filepath.Join("driver", "etc", "nvmock", "snapshot"), data: in.snap, mode: 0o644},
		// A loader cache as a real driver root has, for tools that read it (nvidia-ctk).
		{path: filepath.Join("driver", "etc", "ld.so.conf"), data: []byte("/usr/lib64\n"), mode: 0o644},
		{path: filepath.Join("driver", "etc", "ld.so.cache"), data: LoaderCache(map[string]string{
			libName + ".1": "/usr/lib64/" + libName + ".1",
			libName:        "/usr/lib64/" + libName,
		}), mode: 0o644},
		{path: filepath.Join("driver", "proc", "driver", "nvidia", "version"), data: []byte(ProcVersion(p.Driver.Version, OpenModules(&p.Board))), mode: 0o444},
		// What NVIDIA's DRA driver reads of the kernel module (docs/dra.md).
		{path: filepath.Join("driver", "proc", "devices"), data: []byte(ProcDevices()), mode: 0o444},
	}
	es = append(es, controlCapEntries()...)
	if m := p.Board.Modes.MIG; m != nil && len(m.GPUInstances) > 0 {
		if !in.opt.SharedMIGProc {
			es = append(es, migProcEntries(m, p.GPUs)...)
		}
		if !in.opt.SharedMIGNodes {
			es = append(es, migNodeEntries(m, p.GPUs, in.opt.RealDeviceNumbers, in.opt.PlainDevFiles)...)
		}
	}
	for i, id := range in.ids {
		bus := ProcBusID(snapshot.PCIAddress(p, i))
		es = append(es, entry{path: filepath.Join("driver", "proc", "driver", "nvidia", "gpus", bus, "information"),
			data: []byte(ProcInformation(&in.boards[i], p.Driver.Version, id, i)), mode: 0o444})
	}
	for i := range in.nodes {
		es = append(es, entry{path: filepath.Join("driver", "dev", in.nodes[i].Name), node: &in.nodes[i], plain: in.opt.PlainDevFiles, mode: 0o666})
	}
	if ib := in.ib; ib != nil {
		for i := range ib.nodes {
			es = append(es, entry{path: filepath.Join("driver", "dev", ib.nodes[i].Name), node: &ib.nodes[i], plain: in.opt.PlainDevFiles, mode: 0o666})
		}
		es = append(es,
			ib.shim.entry(UmadShimPath),
			ib.provider.entry(ProviderPath),
			entry{path: FabricFile, data: ib.spec, mode: 0o644})
	}
	// The PCI tree, and what else hwloc reads, so that HWLOC_FSROOT=sysfs
	// shows the node's own CPUs and memory with the mock devices.
	if in.hook != nil {
		es = append(es, entry{path: HookPath, data: in.hook, mode: 0o755})
	}
	es = append(es, imexEntries(in.imex)...)
	es = append(es, mpsEntries(in.mps)...)
	if in.opt.StateLink != "" {
		es = append(es, entry{path: StatePath, hard: in.opt.StateLink})
	}
	if in.opt.NoPCI {
		return es
	}
	// The tree itself is written and verified by pcisim, before these.
	es = append(es,
		entry{path: filepath.Join("sysfs", "proc"), link: "/proc"},
		entry{path: filepath.Join("sysfs", "sys", "devices", "system"), link: "/sys/devices/system"})
	return es
}

func (in *inputs) render(dir string) (*Overlay, error) {
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("render overlay in %s: directory is not empty", dir)
	}
	if !in.opt.NoPCI {
		if err := os.MkdirAll(filepath.Join(dir, "sysfs"), 0o755); err != nil {
			return nil, fmt.Errorf("render overlay in %s: %w", dir, err)
		}
		if err := pcisim.Write(in.pci, SysOf(dir)); err != nil {
			return nil, fmt.Errorf("render overlay in %s: PCI tree: %w", dir, err)
		}
	}
	es := in.entries()
	if err := writeEntries(dir, es); err != nil {
		return nil, fmt.Errorf("render overlay in %s: %w", dir, err)
	}
	var bound []nsexec.Bind
	for _, e := range es {
		if e.from == "" {
			continue
		}
		dst, err := filepath.Rel("driver", e.path)
		if err != nil || !filepath.IsLocal(dst) { // only the driver root's are assets
			return nil, fmt.Errorf("render overlay in %s: %s is outside the driver root", dir, e.path)
		}
		bound = append(bound, nsexec.Bind{Src: e.from, Dst: dst})
	}
	if in.opt.StateLink == "" {
		if err := live.Create(filepath.Join(dir, StatePath), len(in.ids), StateSeed(in.opt.NodeName)); err != nil {
			return nil, fmt.Errorf("render overlay in %s: %w", dir, err)
		}
		if err := in.mig.apply(filepath.Join(dir, StatePath)); err != nil {
			return nil, fmt.Errorf("render overlay in %s: %w", dir, err)
		}
		if in.ib != nil {
			if err := writeIBLive(filepath.Join(dir, StatePath), in.ib, !in.opt.SharedIBTables); err != nil {
				return nil, fmt.Errorf("render overlay in %s: %w", dir, err)
			}
		}
	}
	return &Overlay{Dir: dir, GPUs: in.ids, DevNodes: in.nodes, Snapshot: in.snap, Bound: bound}, nil
}

// StateSeed seeds a node's reading noise from its name, so a node gives
// the same trace each time it is set up the same way.
func StateSeed(node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(node))
	return h.Sum64()
}

// verify checks that dir holds the tree render would write (extra files
// are not looked for), so that install repairs a damaged overlay instead of
// calling it unchanged.
func (in *inputs) verify(dir string) error {
	if !in.opt.NoPCI {
		if err := pcisim.Verify(in.pci, SysOf(dir)); err != nil {
			return err
		}
	}
	for _, e := range in.entries() {
		p := filepath.Join(dir, e.path)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case e.link != "":
			if t, err := os.Readlink(p); err != nil || t != e.link {
				return fmt.Errorf("%s: not a symlink to %s", p, e.link)
			}
		case e.hard != "":
			if t, err := os.Stat(e.hard); err != nil || !os.SameFile(fi, t) {
				return fmt.Errorf("%s: not %s", p, e.hard)
			}
		case e.node != nil:
			if err := checkDevNode(p, fi, *e.node, e.plain); err != nil {
				return err
			}
		default:
			if !fi.Mode().IsRegular() || fi.Mode().Perm() != e.mode || !fileIs(p, e.data) {
				return fmt.Errorf("%s: content or mode differs", p)
			}
		}
	}
	return nil
}

// writeEntries makes the entries' directories, then the entries, several
// at once (a board's MIG capabilities and device nodes run to hundreds).
// Their order does not matter: a symlink may be made before its target,
// and the one hard link's target (the live state) is outside the tree.
func writeEntries(dir string, es []entry) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Directories level by level, each level's at once.
	for _, ds := range pcisim.DirLevels(len(es), func(i int) string { return es[i].path }) {
		if err := pcisim.InRuns(len(ds), func(i int) error {
			p := filepath.Join(dir, ds[i])
			if err := os.Mkdir(p, 0o755); err != nil && !isDir(p) { // the PCI tree's, there already
				return err
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return pcisim.InRuns(len(es), func(i int) error {
		e, p := es[i], filepath.Join(dir, es[i].path)
		switch {
		case e.link != "":
			return os.Symlink(e.link, p)
		case e.hard != "":
			return os.Link(e.hard, p)
		case e.node != nil:
			return makeDevNode(p, *e.node, e.plain)
		}
		return writeFile(p, e.data, e.mode)
	})
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, bytes.NewReader(data)); err != nil {
		f.Close()
		return err // a *PathError: it names the file
	}
	if err := f.Chmod(mode); err != nil { // umask may have narrowed it
		f.Close()
		return err
	}
	return f.Close()
}
