package main

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/ibshim"
	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/ibshim/ibd"
	ibsysfs "github.com/nvmock/nvmock/ibshim/sysfs"
	"github.com/nvmock/nvmock/profile"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/hostprep/nsexec"
	"github.com/nvmock/nvmock/pcisim"
)

// execChildArg is the hidden subcommand `nvmock exec` re-executes itself
// with, inside the new mount namespace.
const execChildArg = "__exec-child"

// execCmd runs a command on a mock node private to it: `nvmock exec
// [--profile P] [--gpus N] -- CMD ARGS...`. It exits with the command's
// status (128+n for signal n) once the temporary overlay is gone; its own
// failures, before the command, exit 125, as container runtimes' do.
func execCmd(args []string) error {
	if err := execRun(args); err != nil {
		var st exitStatus
		if errors.As(err, &st) {
			return err
		}
		return failed{nsexec.StatusSetup, err}
	}
	return nil
}

const execUsage = "Usage: nvmock exec [flags] -- CMD ARGS...\n  Runs CMD on a private mock node (as root, or in an unprivileged user namespace).\n"

func execRun(args []string) error {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	name := fs.String("profile", "a100", "built-in profile name or profile file")
	assets := fs.String("assets", "", "driver tree holding usr/lib64/libnvidia-ml.so.* and usr/bin/nvidia-smi\n(default $NVMOCK_ASSETS, else ../driver beside this binary)")
	mig := fs.String("mig", "", migFlagHelp)
	realNumbers := fs.Bool("real-device-numbers", false, "give device nodes NVIDIA's majors (195, uvm 511, MIG capabilities 509) instead of /dev/null's 1:3,\nas hostprep install does (as root; refused on a host with NVIDIA GPUs or driver, which they could reach)")
	var lf loadFlags
	lf.add(fs)
	var ib ibFlags
	ib.add(fs)
	if err := parseFlags(fs, args, os.Stdout, execUsage); err != nil {
		return helpShown(err)
	}
	if err := ib.peers.check(); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	if ib.host != "" && !validNodeName(ib.host) {
		return fmt.Errorf("exec: --ib-host %q: %s", ib.host, hostNameRule)
	}
	if ib.slot < -1 {
		return fmt.Errorf("exec: --ib-slot %d: give 0 to the fabric's nodes - 1, or leave it out", ib.slot)
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("exec: no command given; use nvmock exec [--profile P] [--gpus N] -- CMD ARGS...")
	}
	if fi, err := os.Stat(os.TempDir()); err != nil || !fi.IsDir() {
		return fmt.Errorf("exec: TMPDIR %s is not a directory; set TMPDIR to one this user can write", os.TempDir())
	}
	lf.migGiven = *mig != ""
	p, seed, err := lf.load(*name)
	if err != nil {
		return err
	}
	if n := os.Getenv("NODE_NAME"); p.InfiniBand != nil && ib.host == "" && n != "" && !validNodeName(n) {
		// It names the node in the fabric (review: a newline split node_desc).
		return fmt.Errorf("exec: $NODE_NAME %q, the node's fabric host name without --ib-host: %s", n, hostNameRule)
	}
	// Inside another exec's node /proc/driver/nvidia and the PCI devices are that mock's.
	nested := exists(nsexec.NamespaceDriver)
	realDriver := exists("/proc/driver/nvidia") && !nested
	if *realNumbers {
		if realDriver {
			return errors.New("exec: --real-device-numbers: this host has a real NVIDIA driver (/proc/driver/nvidia); nodes with its numbers would open its GPUs")
		}
		if !nested && nvidiaGPUs() {
			return errors.New("exec: --real-device-numbers: this host has NVIDIA GPUs (PCI vendor 10de); opening a node with their numbers could load their driver and reach them")
		}
		if os.Geteuid() != 0 {
			return errors.New("exec: --real-device-numbers needs root: a user namespace cannot make device nodes")
		}
	}
	// The namespace hides the real GPUs; say so, as install refuses to.
	if realDriver {
		fmt.Fprintln(os.Stderr, "nvmock exec: note: this host has a real NVIDIA driver (/proc/driver/nvidia); the command sees the mock GPUs, not its own")
	}
	if *assets, err = assetsDir(*assets); err != nil {
		return err
	}
	node, err := p.Node()
	if err != nil {
		return err
	}
	env := os.Environ()
	var fab *fabric.Fabric
	if node.IB == nil {
		var given []string
		fs.Visit(func(f *flag.Flag) {
			if strings.HasPrefix(f.Name, "ib-") {
				given = append(given, "--"+f.Name)
			}
		})
		if len(given) > 0 {
			return fmt.Errorf("exec: %s: profile %s has no InfiniBand", strings.Join(given, ", "), p.Name)
		}
	} else if fab, err = buildFabric(node, *assets, &ib); err != nil {
		return fmt.Errorf("exec: InfiniBand: %w", err)
	}
	// The PCI tree has thousands of files and depends only on the profile
	// and the fabric: rendered once into the cache, not on every run.
	key, err := treeKey(p, &ib)
	if err != nil {
		return fmt.Errorf("exec: PCI tree: %w", err)
	}
	sys, err := nsexec.Cached("pci-"+key, func(dir string) error {
		pci, err := pcisim.Files(node)
		if err != nil {
			return err
		}
		if fab != nil {
			pci = append(pci, ibsysfs.Files(node, fab)...)
		}
		return pcisim.Write(pci, dir)
	})
	if err != nil {
		return fmt.Errorf("exec: profile %s of %d GPUs: PCI tree: %w", *name, p.GPUs, err)
	}
	// So are MIG's capability files: hundreds, the same for every run of
	// the board, and there from the start as on a real node, whether the
	// GPUs start in MIG mode or nvidia-smi turns it on later. Their nodes
	// too where the cache can hold them: made by root, with /dev/null's
	// numbers (NVIDIA's stay in the namespace's own /dev).
	var migCaps string
	migNodes := os.Geteuid() == 0 && !*realNumbers
	if m := p.Board.Modes.MIG; m != nil && len(m.GPUInstances) > 0 {
		key, err := exeKey(struct {
			MIG   *profile.MIG
			GPUs  int
			Nodes bool
		}{m, p.GPUs, migNodes})
		if err == nil {
			migCaps, err = nsexec.Cached("mig-"+key, func(dir string) error { return hostprep.RenderMIGCaps(dir, p, migNodes) })
		}
		if err != nil {
			return fmt.Errorf("exec: MIG capabilities: %w", err)
		}
	}
	// From here a signal ends the run cleanly: the fabric's and the
	// rendering's files are removed (nsexec passes later ones on).
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, nsexec.Forwarded...)
	defer signal.Stop(sigs)
	var daemon *ibd.Daemon
	if fab != nil {
		d, stop, err := startFabric(node, fab, *assets, &ib, &env)
		if err != nil {
			return fmt.Errorf("exec: InfiniBand: %w", err)
		}
		defer stop()
		daemon = d
		// The daemon changes its fabric for its peers' faults from its
		// start; without peers only once the command runs, so the render
		// may read it.
		if !ib.peers.none() {
			fab = nil
		}
	}
	render := func(dir string) (string, []nsexec.Bind, error) {
		ov, err := hostprep.Render(dir, hostprep.Options{
			Profile: p, Node: node, NodeName: seed, Assets: *assets, BindAssets: true, MIG: *mig,
			SharedMIGProc: migCaps != "", SharedMIGNodes: migCaps != "" && migNodes,
			// The fabric as the daemon has it: nvmock ctl ib rebuilds it.
			FabricHost: nodeNameOr(ib.host), FabricSlot: ib.slot + 1, IBFaults: ib.faults, SharedIBTables: true, Fabric: fab,
			// Without root the namespace cannot hold device nodes anyway.
			PlainDevFiles:     os.Geteuid() != 0,
			RealDeviceNumbers: *realNumbers,
			NoPCI:             true,
		})
		if err != nil {
			return "", nil, err
		}
		if daemon != nil { // nvmock ctl ib in the namespace changes these
			daemon.FollowFaults(filepath.Join(hostprep.IBLiveDir(filepath.Join(ov.Dir, hostprep.StatePath)), hostprep.IBLiveFaults))
		}
		return ov.Driver(), ov.Bound, nil
	}
	status, err := nsexec.RunRendered(render, nsexec.Options{
		Args:    fs.Args(),
		Env:     env,
		Sys:     sys,
		MIG:     migCaps,
		Self:    []string{"/proc/self/exe", execChildArg},
		Note:    func(s string) { fmt.Fprintln(os.Stderr, "nvmock exec: note:", s) },
		Signals: sigs,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvmock: exec:", err)
	}
	// The overlay is already removed; the status is the command's.
	if status != 0 {
		return exitStatus(status)
	}
	return nil
}

// execChild is the re-executed half of execCmd; on success it becomes the
// command and does not return.
func execChild(args []string) error {
	return nsexec.Child(args)
}

// buildFabric is the node's InfiniBand fabric, as exec's flags place the
// node in it, with their faults.
func buildFabric(node *profile.Node, assets string, ib *ibFlags) (*fabric.Fabric, error) {
	shim := filepath.Join(assets, ibshim.UmadShim)
	if _, err := os.Stat(shim); err != nil {
		return nil, fmt.Errorf("assets %s: no %s (run make driver): %w", assets, ibshim.UmadShim, errors.Unwrap(err))
	}
	fab, err := fabric.Build(node, nodeNameOr(ib.host), ib.slot) // as hostprep and nvmock ibd name the node
	if err != nil {
		return nil, err
	}
	if err := fab.Apply(ib.faults); err != nil {
		return nil, fmt.Errorf("--ib-fault: %w", err)
	}
	return fab, nil
}

// treeKey names the node's PCI tree in the cache by what it derives from:
// this program (its file's identity: another build may render another
// tree), the profile, and the node's place and faults in its fabric.
// Rendering the tree in memory to hash it was a good part of every run.
func treeKey(p *profile.Profile, ib *ibFlags) (string, error) {
	return exeKey(struct {
		Profile *profile.Profile
		Host    string
		Slot    int
		Faults  []fabric.Fault
	}{p, nodeNameOr(ib.host), ib.slot, ib.faults})
}

// exeKey names a cached rendering by this program's file (another build
// may render otherwise) and what it is rendered from, v.
func exeKey(v any) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &st); err != nil {
		return "", err
	}
	js, err := json.Marshal(struct {
		Exe  [5]int64
		From any
	}{[5]int64{int64(st.Dev), int64(st.Ino), st.Size, st.Mtim.Nano(), st.Ctim.Nano()}, v})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", sha256.Sum256(js))[:16], nil
}

// startFabric gives the namespace the node's InfiniBand: a fabric daemon
// serving fab for the umad shim, and the shim and verbs provider from the
// assets. stop ends the daemon.
func startFabric(node *profile.Node, fab *fabric.Fabric, assets string, ib *ibFlags, env *[]string) (d *ibd.Daemon, stop func(), err error) {
	// Beside the overlay, in memory where it can be.
	tmp := nsexec.TempDir()
	nsexec.Sweep(tmp, nsexec.Prefixed("nvmock-ibd-"))
	dir, err := os.MkdirTemp(tmp, "nvmock-ibd-")
	if err != nil {
		return nil, nil, err
	}
	if err := nsexec.Claim(dir); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	// Programs in the namespace may switch users; they must still reach
	// the daemon.
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	sock := filepath.Join(dir, "ibd.sock")
	// sockaddr_un holds 108 bytes, the last a NUL.
	if len(sock) > 107 {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("the fabric's socket %s is longer than a unix socket's 107 bytes; set a shorter TMPDIR", sock)
	}
	l, err := ibd.Listen(sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	// The daemon's warnings (a slot two nodes claim, a peers name that
	// does not resolve) are the user's to see; its chatter is not.
	log := logrus.New()
	log.SetOutput(os.Stderr)
	log.SetLevel(logrus.WarnLevel)
	log.SetFormatter(execLog{})
	d = ibd.New(node, fab, log)
	go d.Serve(l)
	stopPeers, err := ib.peers.start(d, log)
	if err != nil {
		l.Close()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	*env = ibshim.Env(*env, assets, sock)
	return d, func() { stopPeers(); l.Close(); os.RemoveAll(dir) }, nil
}

// execLog prints the fabric daemon's entries as exec's notes: one line,
// fields sorted.
type execLog struct{}

func (execLog) Format(e *logrus.Entry) ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "nvmock exec: fabric daemon: %s", e.Message)
	for _, k := range slices.Sorted(maps.Keys(e.Data)) {
		fmt.Fprintf(&b, " %s=%v", k, e.Data[k])
	}
	b.WriteByte('\n')
	return []byte(b.String()), nil
}

// ibFlags place an exec'd node in its fabric, for tests of several nodes
// on one machine.
type ibFlags struct {
	host   string
	slot   int
	peers  peerFlags
	faults faultFlags
}

func (f *ibFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&f.host, "ib-host", "", "this node's host name in its InfiniBand fabric (default: $NODE_NAME, else the hostname)")
	fs.IntVar(&f.slot, "ib-slot", -1, "this node's place in the fabric, 0 to nodes-1; -1: from its host name")
	f.peers.add(fs, "ib-")
	fs.Var(&f.faults, "ib-fault", faultUsage)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// nvidiaGPUs says whether this machine has NVIDIA display controllers
// (PCI class 03): their driver, installed but not loaded, loads when a
// node with its major is opened.
func nvidiaGPUs() bool {
	devs, _ := filepath.Glob("/sys/bus/pci/devices/*")
	for _, d := range devs {
		vendor, _ := os.ReadFile(filepath.Join(d, "vendor"))
		class, _ := os.ReadFile(filepath.Join(d, "class"))
		if strings.TrimSpace(string(vendor)) == "0x10de" && strings.HasPrefix(string(class), "0x03") {
			return true
		}
	}
	return false
}
