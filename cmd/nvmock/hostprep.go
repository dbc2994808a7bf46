package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/libnvml/snapshot"
)

const hostprepUsage = `Usage:
  nvmock hostprep install [--root DIR] [--profile NAME|FILE] [--gpus N] [--node-name NAME]
                          [--mig LAYOUT] [--driver-version V] [--assets DIR] [--cdi-dir DIR]
                          [--nfd-dir DIR] [--fabric-slot N] [--ib-fault F] [--owner NS/NAME]
                          [--real-device-numbers] [--force]     (install --help: all flags)
  nvmock hostprep uninstall [--root DIR] [--unless-daemonset NAMESPACE/NAME]
  nvmock hostprep wait
  nvmock hostprep pre-delete --daemonset NAMESPACE/NAME... [--timeout DURATION]
`

// migFlagHelp documents --mig (profile.MIGLayout).
const migFlagHelp = "partition the GPUs with MIG: all-PROFILE (all-1g.5gb on an A100), all-balanced, all-enabled, all-disabled, or GPUS=PROFILE*N,...;... such as '0-3=3g.20gb*2;4-7=all-1g.5gb', quoted for the shell (default: the profile's board.modes.mig.layout)"

// hostprepCmd installs or removes the mock node overlay.
func hostprepCmd(args []string) error {
	return hostprepRun(args, os.Stdout, os.Stderr, "")
}

// hostprepRun is hostprepCmd with its outputs and /proc injectable (tests).
func hostprepRun(args []string, stdout, stderr io.Writer, procRoot string) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, hostprepUsage)
		return errors.New("hostprep: need a subcommand: install, uninstall, wait or pre-delete")
	}
	var err error
	switch args[0] {
	case "install":
		err = hostprepInstall(args[1:], stdout, stderr, procRoot)
	case "uninstall":
		err = hostprepUninstall(args[1:], stdout, stderr, procRoot)
	case "wait":
		err = hostprepWait(args[1:])
	case "pre-delete":
		err = hostprepPreDelete(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, hostprepUsage)
		return nil
	default:
		return fmt.Errorf("hostprep: unknown subcommand %q; use install, uninstall, wait or pre-delete", args[0])
	}
	if errors.Is(err, flag.ErrHelp) { // the flags were printed, as asked
		return nil
	}
	return err
}

func hostprepInstall(args []string, stdout, stderr io.Writer, procRoot string) error {
	fs := flag.NewFlagSet("hostprep install", flag.ContinueOnError)
	root := fs.String("root", hostprep.DefaultRoot, "directory that holds the overlays and the driver symlink")
	prof := fs.String("profile", "a100", "built-in profile NAME or profile FILE")
	node := fs.String("node-name", "", "node name: its labels, its fabric host and the seed of GPU identities (default: $NODE_NAME, else the hostname, with identities from /etc/machine-id as exec and the library take them)")
	assets := fs.String("assets", "", "built driver tree with usr/lib64 and usr/bin (default: ../driver next to the nvmock executable)")
	cdiDir := fs.String("cdi-dir", hostprep.DefaultCDIDir, "directory for the CDI spec "+hostprep.CDIFile)
	nfdDir := fs.String("nfd-dir", hostprep.DefaultNFDDir, "node-feature-discovery features.d directory")
	realNumbers := fs.Bool("real-device-numbers", false, "give device nodes NVIDIA's majors (195, uvm 511) instead of /dev/null's 1:3")
	force := fs.Bool("force", false, "install even where a real NVIDIA driver is loaded")
	owner := fs.String("owner", "", "NAMESPACE/NAME of the DaemonSet installing (the chart's): recorded, so that another DaemonSet's uninstall leaves this install alone")
	slot := fs.Int("fabric-slot", -1, "the node's place in its InfiniBand fabric, 0 to nodes-1; -1: from its name")
	mig := fs.String("mig", "", migFlagHelp)
	slots := fs.String("fabric-slots", "", "NODE=SLOT,...: the places of named nodes (the chart's infiniband.slots); others take --fabric-slot")
	var lf loadFlags // --gpus, --driver-version, --host-cpus
	lf.addShape(fs)
	var faults faultFlags
	fs.Var(&faults, "ib-fault", faultUsage)
	if err := parseFlags(fs, args, stdout, "Usage: nvmock hostprep install [flags]\n  Installs the mock node overlay, its CDI spec and NFD file (as root).\n"); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("hostprep install: unexpected argument %q", fs.Arg(0))
	}
	if *owner != "" {
		if _, _, err := daemonSetName(*owner); err != nil {
			return fmt.Errorf("hostprep install: --owner %w", err)
		}
	}
	if *slot < -1 {
		return fmt.Errorf("hostprep install: --fabric-slot %d: give 0 to the fabric's nodes - 1, or leave it out", *slot)
	}
	if *root == "" {
		return errors.New("hostprep install: --root is empty; give the directory for the overlays")
	}
	if err := hostprep.CheckDirs(*root, *cdiDir, *nfdDir); err != nil {
		return fmt.Errorf("hostprep install: %w", err)
	}
	// A --mig layout takes the place of the profile's, and is checked as the install places it.
	lf.migGiven = *mig != ""
	p, err := lf.profile(*prof)
	if err != nil {
		return fmt.Errorf("hostprep install: %w", err)
	}
	name := nodeNameOr(*node)
	if name == "" {
		return fmt.Errorf("hostprep install: no node name: pass --node-name or set NODE_NAME")
	}
	if !validNodeName(name) {
		return fmt.Errorf("hostprep install: node name %q: %s", name, hostNameRule)
	}
	seed, err := identitySeed(*node)
	if err != nil {
		return fmt.Errorf("hostprep install: %w", err)
	}
	if *slot, err = slotOf(name, *slots, *slot); err != nil {
		return fmt.Errorf("hostprep install: %w", err)
	}
	// Told by the flag that gave it, not as the profile's fabric does.
	// The profile's own spec: building the node here would be done again by the install.
	if ib := p.InfiniBand; ib != nil && *slot >= ib.Fabric.Nodes {
		return fmt.Errorf("hostprep install: --fabric-slot(s): slot %d is outside fabric %s, whose %d nodes have slots 0 to %d", *slot, ib.Fabric.Name, ib.Fabric.Nodes, ib.Fabric.Nodes-1)
	}
	if *assets, err = assetsDir(*assets); err != nil {
		return err
	}
	res, err := hostprep.Install(hostprep.InstallOptions{
		Render: hostprep.Options{Profile: p, NodeName: name, Seed: seed, Assets: *assets, RealDeviceNumbers: *realNumbers, Hook: hookBinary(),
			FabricSlot: *slot + 1, IBFaults: faults, MIG: *mig},
		Root:     *root,
		CDIDir:   *cdiDir,
		NFDDir:   *nfdDir,
		ProcRoot: procRoot,
		Force:    *force,
		Progress: stderr,
		Owner:    *owner,
	})
	if err != nil {
		return fmt.Errorf("hostprep install: %w", err)
	}
	if err := nodeLabels(name, stderr, func(c *hostprep.KubeClient) error {
		return c.ApplyLabels(context.Background(), name, p, false)
	}); err != nil {
		return fmt.Errorf("hostprep install: %w", err)
	}
	state := "installed"
	if res.Unchanged {
		state = "unchanged"
	}
	fmt.Fprintf(stdout, "%s: %d x %s (profile %s, node %s) at %s (overlay %s)\n",
		state, len(res.GPUs), p.Board.ProductName, p.Name, name, res.Driver, res.Hash)
	return nil
}

// assetsDir is dir made absolute (the paths rendered from it, such as
// the verbs provider's, are read from other working directories), else
// $NVMOCK_ASSETS, else the built driver tree beside the binary:
// build/driver for build/bin/nvmock.
func assetsDir(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv("NVMOCK_ASSETS")
	}
	if dir == "" {
		exe, err := os.Executable()
		if err == nil {
			exe, err = filepath.EvalSymlinks(exe)
		}
		if err != nil {
			return "", fmt.Errorf("cannot find the nvmock executable to locate ../driver: %w; pass --assets", err)
		}
		dir = filepath.Join(filepath.Dir(filepath.Dir(exe)), "driver")
	}
	// Checked here, so that a wrong one is named as such, not as the
	// first file some part looks for in it.
	const what = "it is the driver tree make driver builds (build/driver), given with --assets or $NVMOCK_ASSETS"
	if fi, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("assets %s: no such directory; %s", dir, what)
	} else if err != nil || !fi.IsDir() {
		return "", fmt.Errorf("assets %s: not a directory; %s", dir, what)
	}
	return filepath.Abs(dir)
}

// validNodeName takes host and Kubernetes node names: the name is the
// seed of the GPUs' identities, a fabric host and a label value's source.
func validNodeName(n string) bool {
	if len(n) > 253 {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return false
		}
	}
	return true
}

func hostprepUninstall(args []string, stdout, stderr io.Writer, procRoot string) error {
	fs := flag.NewFlagSet("hostprep uninstall", flag.ContinueOnError)
	root := fs.String("root", hostprep.DefaultRoot, "directory install used")
	// Install's flags: the root's manifest says what install wrote, and
	// only that is removed. With --unless-daemonset they say where this
	// pod installed, to tell whether the DaemonSet now installs elsewhere.
	cdiDir := fs.String("cdi-dir", "", "with --unless-daemonset: where this pod's install wrote the CDI spec (the manifest says what to remove)")
	nfdDir := fs.String("nfd-dir", "", "with --unless-daemonset: where this pod's install wrote the NFD file")
	node := fs.String("node-name", "", "node whose labels to remove in a cluster (default: $NODE_NAME, else the hostname)")
	unless := fs.String("unless-daemonset", "", "NAMESPACE/NAME: in a cluster, keep everything while this DaemonSet still runs on the node (its pod is restarting, not leaving)")
	afterPlugin := fs.String("after-plugin", "", "HOST:PORT where the pod's NRI plugin listens: first wait (at most 20s) until it no longer does, so that no container is injected from an overlay being removed")
	if err := parseFlags(fs, args, stdout, "Usage: nvmock hostprep uninstall [flags]\n  Removes what install made, as the manifest in the root lists it.\n"); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("hostprep uninstall: unexpected argument %q", fs.Arg(0))
	}
	if *root == "" {
		return errors.New("hostprep uninstall: --root is empty; give the directory install used")
	}
	var dsNS, dsName string
	if *unless != "" {
		var err error
		if dsNS, dsName, err = daemonSetName(*unless); err != nil {
			return fmt.Errorf("hostprep uninstall: --unless-daemonset %w", err)
		}
	}
	name := nodeNameOr(*node)
	here := hostprep.InstallDirs{Root: *root, CDIDir: *cdiDir, NFDDir: *nfdDir}
	if dsName != "" {
		leave, next := leavingPool(dsNS, dsName, name, here, stderr)
		switch {
		case !leave && next != "":
			if _, err := hostprep.HandOver(*root, *unless, next); err != nil {
				return fmt.Errorf("hostprep uninstall: %w", err)
			}
			fmt.Fprintf(stdout, "kept the overlay in %s for DaemonSet %s, whose pod on node %s installs over it\n", *root, next, name)
			return nil
		case !leave:
			fmt.Fprintf(stdout, "kept the overlay in %s: DaemonSet %s/%s still runs on node %s; its next pod installs over it\n", *root, dsNS, dsName, name)
			return nil
		}
	}
	if *afterPlugin != "" {
		// A sidecar's preStop runs as the pod starts ending, beside the
		// plugin, not after it (KEP-753; review).
		waitClosed(*afterPlugin, 20*time.Second, stderr)
	}
	// Under the install lock: a pod of another DaemonSet (the node moved
	// pools) may have installed while this one waited to leave.
	res, err := hostprep.UninstallOwned(*root, *unless, stderr)
	if err != nil {
		return fmt.Errorf("hostprep uninstall: %w", err)
	}
	if res.KeptFor != "" {
		fmt.Fprintf(stdout, "kept the overlay in %s: DaemonSet %s installed it, not %s\n", *root, res.KeptFor, *unless)
		return nil
	}
	if res.TakenOver != "" {
		fmt.Fprintf(stdout, "uninstalled from %s: removed %d paths; the node's labels stay with the install at %s\n", *root, len(res.Removed), res.TakenOver)
		return nil
	}
	if res.Nothing {
		// The labels are GFD's too: on a node with a real driver, where
		// install refused, they are its (review: a pool pod leaving such a
		// node took them away). Elsewhere they go, as an uninstall whose
		// labels could not be removed left them.
		if drv := hostprep.LoadedDriver(procRoot); drv != "" {
			fmt.Fprintf(stdout, "nothing to uninstall: no %s in %s; node %s's labels are left, as a real NVIDIA driver is loaded (%s)\n", hostprep.ManifestFile, *root, name, drv)
			return nil
		}
	}
	labelled := false
	if err := nodeLabels(name, stderr, func(c *hostprep.KubeClient) error {
		labelled = true
		return c.RemoveLabels(context.Background(), name)
	}); err != nil {
		return fmt.Errorf("hostprep uninstall: %w", err)
	}
	if res.Nothing {
		fmt.Fprintf(stdout, "nothing to uninstall: no %s in %s\n", hostprep.ManifestFile, *root)
		return nil
	}
	// Which: the lines above, as removed; a file changed since install is kept, and said so.
	fmt.Fprintf(stdout, "uninstalled from %s: removed %d paths\n", *root, len(res.Removed))
	if res.Owner != "" && dsName == "" {
		// By hand, under a running chart: say what stays and what comes back.
		fmt.Fprintf(stdout, "DaemonSet %s installed it: its next pod on this node installs again", res.Owner)
		if !labelled {
			fmt.Fprint(stdout, "; the node's nvidia.com labels stay (no cluster credentials here: kubectl label node NODE LABEL- removes them)")
		}
		fmt.Fprintln(stdout)
	}
	return nil
}

// daemonSetName splits NAMESPACE/NAME.
func daemonSetName(s string) (string, string, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%q: want NAMESPACE/NAME, e.g. nvmock/nvmock-default", s)
	}
	return ns, name, nil
}

// hostprepWait blocks until SIGTERM or SIGINT: the main process of the
// chart's container that holds the overlay's read-write mounts for its
// preStop uninstall, so that the plugin's container needs none. The image
// has no shell or sleep.
func hostprepWait(args []string) error {
	if len(args) == 1 && isHelp(args[0]) {
		fmt.Println("Usage: nvmock hostprep wait\n  Waits for SIGTERM or SIGINT: the chart's pod stays up on what install made.")
		return nil
	}
	if len(args) > 0 {
		return fmt.Errorf("hostprep wait: unexpected argument %q", args[0])
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	return nil
}

// hostprepPreDelete runs as the chart's pre-delete hook: it deletes the
// pools' DaemonSets in the foreground and waits until they are gone, so that
// each pod's preStop uninstall (files and node labels) runs while the
// release's ServiceAccount and RBAC still exist; helm deletes those with the
// DaemonSets otherwise, and the labels stay.
func hostprepPreDelete(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hostprep pre-delete", flag.ContinueOnError)
	var sets []string
	fs.Func("daemonset", "NAMESPACE/NAME of a pool's DaemonSet (repeat for each pool)", func(v string) error {
		ns, name, ok := strings.Cut(v, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("want NAMESPACE/NAME, e.g. nvmock/nvmock-default")
		}
		sets = append(sets, v)
		return nil
	})
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	if err := parseFlags(fs, args, stdout, "Usage: nvmock hostprep pre-delete --daemonset NAMESPACE/NAME... [flags]\n  Deletes the pools' DaemonSets and waits until their pods are gone (helm uninstall's hook).\n"); err != nil {
		return err
	}
	if fs.NArg() > 0 || len(sets) == 0 {
		return fmt.Errorf("hostprep pre-delete: need --daemonset NAMESPACE/NAME and no other argument")
	}
	c, ok, err := inClusterClient()
	if !ok {
		return fmt.Errorf("hostprep pre-delete: not in a cluster: it runs as the chart's pre-delete hook")
	}
	if err != nil {
		return fmt.Errorf("hostprep pre-delete: %w", err)
	}
	deadline := time.Now().Add(*timeout)
	for _, s := range sets {
		ns, name, _ := strings.Cut(s, "/")
		start := time.Now()
		// What is left of the time; once it is out (a pool before would
		// not end), a little to ask for this one's deletion all the same.
		end := deadline
		if !end.After(start) {
			end = start.Add(10 * time.Second)
		}
		ctx, cancel := context.WithDeadline(context.Background(), end)
		err := c.DeleteDaemonSetAndWait(ctx, ns, name, 500*time.Millisecond)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			// A pod that cannot end (its node NotReady) would fail the hook,
			// and helm uninstall with it (review): the rest goes on; that
			// node keeps its overlay and labels until its pod's preStop runs.
			fmt.Fprintf(stderr, "warning: %v after %s; going on: a pod still ending keeps its node's overlay and labels until its preStop runs (hostprep uninstall on the node removes them)\n", err, *timeout)
			continue
		}
		if err != nil {
			return fmt.Errorf("hostprep pre-delete: %w", err)
		}
		fmt.Fprintf(stdout, "deleted DaemonSet %s and its pods in %s\n", s, time.Since(start).Round(100*time.Millisecond))
	}
	return nil
}

// inClusterClient is hostprep.InClusterClient; tests point it at a stand-in.
var inClusterClient = hostprep.InClusterClient

// leavingPool asks the API server whether node leaves DaemonSet ns/name's
// pool. Outside a cluster there is no DaemonSet to ask: it leaves. next is
// the DaemonSet that keeps the install when another pool's does.
func leavingPool(ns, name, node string, here hostprep.InstallDirs, progress io.Writer) (leave bool, next string) {
	c, ok, err := inClusterClient()
	if !ok {
		return true, ""
	}
	if err == nil {
		// The hook shares the pod's grace period (30s by default) with
		// the uninstall that may follow.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var reason string
		if leave, reason, next, err = c.Leaving(ctx, ns, name, node, here); err == nil {
			fmt.Fprintf(progress, "unless-daemonset: %s\n", reason)
			return leave, next
		}
	}
	// Uninstall as before: an API server that is briefly unreachable must
	// not leave a node with a stale overlay.
	fmt.Fprintf(progress, "warning: cannot tell whether node %s leaves DaemonSet %s/%s, uninstalling: %v\n", node, ns, name, err)
	return true, ""
}

// nodeLabels runs do against the API server when this runs in a cluster;
// outside one there are no node labels to change (NFD's file still carries
// them).
func nodeLabels(node string, progress io.Writer, do func(*hostprep.KubeClient) error) error {
	c, ok, err := inClusterClient()
	if !ok {
		return nil
	}
	if err != nil {
		return err
	}
	if node == "" {
		return fmt.Errorf("node labels: no node name; pass --node-name or set NODE_NAME")
	}
	fmt.Fprintf(progress, "node labels: updating node %s through the API server\n", node)
	return do(c)
}

// hostNameRule is what validNodeName takes.
const hostNameRule = "a host name has at most 253 letters, digits, '-', '.' and '_'"

// nodeNameOr is name, else $NODE_NAME, else the hostname.
func nodeNameOr(name string) string {
	if name != "" {
		return name
	}
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h
}

// identitySeed is what the GPUs' UUIDs derive from: the node's name when
// it is given one, else the seed exec and the library take (NODE_NAME,
// else /etc/machine-id), so that all three agree on one host.
func identitySeed(name string) (string, error) {
	if name != "" {
		return name, nil
	}
	return snapshot.NodeSeed()
}

// hookBinary is nvmock-hook beside this executable, as make build and the
// image place it; "" if it is not there (the overlay then has no hook, and
// containers keep the host's PCI devices in /sys).
func hookBinary() string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(self), "nvmock-hook")
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return p
}

// slotOf is node's fabric slot: its own in list ("NODE=SLOT,..."), else
// def. Two nodes on one slot are refused: they could not share a fabric.
func slotOf(node, list string, def int) (int, error) {
	taken, given := map[int]string{}, map[string]int{}
	slot := def
	for _, kv := range splitList(list) {
		n, v, ok := strings.Cut(kv, "=")
		s, err := strconv.Atoi(v)
		if !ok || n == "" || err != nil || s < 0 {
			return 0, fmt.Errorf("--fabric-slots: %q is not NODE=SLOT with a slot from 0", kv)
		}
		if other, dup := taken[s]; dup {
			return 0, fmt.Errorf("--fabric-slots: nodes %s and %s both take slot %d", other, n, s)
		}
		if first, dup := given[n]; dup {
			return 0, fmt.Errorf("--fabric-slots: node %s is given twice, slots %d and %d", n, first, s)
		}
		taken[s], given[n] = n, s
		if n == node {
			slot = s
		}
	}
	return slot, nil
}

// waitClosed waits until nothing listens at addr, or for at most limit,
// when it warns and goes on.
func waitClosed(addr string, limit time.Duration, stderr io.Writer) {
	end := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return
		}
		c.Close()
		if time.Now().After(end) {
			fmt.Fprintf(stderr, "warning: the plugin at %s still listens after %s; uninstalling all the same\n", addr, limit)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
