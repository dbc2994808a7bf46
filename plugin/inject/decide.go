package inject

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strings"
)

// RequestError is a pod's request for GPUs that the node cannot meet (an
// index, UUID or count it does not have, or a value that is none): the
// container must not be created, as under NVIDIA's runtime.
type RequestError struct{ Msg string }

func (e *RequestError) Error() string { return e.Msg }

// Decide returns what to change in one container, or ok=false to leave it
// untouched. ok is true exactly when the Adjustment holds an edit. A bad
// request of the pod's (annotation, env, CDI name, device node, mounted
// list) is a *RequestError: the caller refuses the container, as NVIDIA's
// runtime does. A default the node cannot meet gives no GPUs (ok=false)
// and adj.Warnings says why; the caller logs and counts the warnings
// whatever ok is. Any other err is a node state that cannot be injected
// safely or a failing extension; ok is then false as well.
func Decide(cfg Config, node NodeState, pod Pod, ctr Container) (Adjustment, bool, error) {
	if !wanted(&cfg, &node, &pod, &ctr) {
		return Adjustment{}, false, nil
	}
	if len(node.GPUs) == 0 && node.Library == "" {
		return Adjustment{}, false, nil // no overlay on this node: nothing to give
	}
	if err := node.check(); err != nil {
		return Adjustment{}, false, fmt.Errorf("pod %s/%s container %s: %w", pod.Namespace, pod.Name, ctr.Name, err)
	}
	// An opt-out that says neither is a typo: read as true, it would inject
	// a pod its owner meant to keep out.
	for _, a := range []string{InjectAnnotation, InfiniBandAnnotation} {
		if v, ok := pod.Annotations[a]; ok && !isBool(v) {
			return Adjustment{}, false, &RequestError{fmt.Sprintf("pod %s/%s container %s: annotation %s=%s is neither true nor false", pod.Namespace, pod.Name, ctr.Name, a, quote(v))}
		}
	}

	var buf [128]bool // selection without an allocation on nodes up to 128 GPUs
	sel := buf[:0]
	if n := len(node.GPUs); n <= len(buf) {
		sel = buf[:n]
	} else {
		sel = make([]bool, n)
	}
	var mig []bool
	if len(node.MIG) > 0 {
		mig = make([]bool, len(node.MIG))
	}
	driver, all, src, bad := choose(&cfg, &node, &pod, &ctr, sel, mig)
	if all {
		skipIdleMIG(&node, sel)
	}
	if bad != "" && src == fromDefault {
		// The plugin's own default, which the node cannot meet: not the
		// pod's doing, so it runs, without GPUs.
		return Adjustment{Warnings: []string{fmt.Sprintf("pod %s/%s container %s: %s; giving it no GPUs", pod.Namespace, pod.Name, ctr.Name, bad)}}, false, nil
	}
	if bad != "" {
		// As NVIDIA's runtime refuses devices it cannot resolve: the
		// container is not created, and the pod says why.
		return Adjustment{}, false, &RequestError{fmt.Sprintf("pod %s/%s container %s: %s", pod.Namespace, pod.Name, ctr.Name, bad)}
	}
	count := 0
	for _, s := range sel {
		if s {
			count++
		}
	}
	migs := 0
	for _, m := range mig {
		if m {
			migs++
		}
	}
	if count == 0 && migs == 0 && !driver {
		// void, or nothing asked for: nothing GPU-related at all, but the
		// node's PCI tree still, which a real node shows every container.
		adj := Adjustment{Hooks: pciHooks(&node)}
		migConfig(&node, &ctr, &adj, all)
		return adj, !adj.Empty(), nil
	}
	if why := migCapsRefused(&ctr, migs > 0 && !all); why != "" {
		return Adjustment{}, false, &RequestError{fmt.Sprintf("pod %s/%s container %s: %s", pod.Namespace, pod.Name, ctr.Name, why)}
	}
	// Under NVIDIA's runtime the variable is left as it stands when it
	// decided (not an image's all the annotation overrode); a request the
	// runtime cannot read (the annotation, the default) is handed to it as
	// a device plugin would, in NVIDIA_VISIBLE_DEVICES, read after NRI.
	if src <= fromEnv && byNvidiaRuntime(&cfg, &pod, &ctr) || nvidiaHandler(&cfg, &pod) && src >= fromAnnotation && count+migs > 0 {
		adj := deferred(&node, &ctr, sel, mig, src >= fromAnnotation, all)
		migConfig(&node, &ctr, &adj, all)
		return adj, true, nil
	}
	adj := build(&cfg, &node, &ctr, sel, mig, all)
	if driver && nvidiaHandler(&cfg, &pod) && src >= fromAnnotation {
		// The driver alone from the plugin: the runtime must give nothing,
		// not an image's all, and knows no none device in CDI mode.
		adj.Env[0].Value = "void"
	}
	migConfig(&node, &ctr, &adj, all)
	// Why not for the driver alone: extensions pair devices with GPUs, and there are none.
	if len(adj.GPUs) > 0 && len(cfg.Extensions) > 0 {
		in := Input{Node: node, Pod: pod, Ctr: ctr, GPUs: adj.GPUs}
		for _, ext := range cfg.Extensions {
			if err := ext.Apply(in, &adj); err != nil {
				return Adjustment{}, false, fmt.Errorf("pod %s/%s container %s: extension %s: %w", pod.Namespace, pod.Name, ctr.Name, ext.Name, err)
			}
		}
	}
	if err := checkRealMajor(&node, &adj); err != nil {
		return Adjustment{}, false, fmt.Errorf("pod %s/%s container %s: %w", pod.Namespace, pod.Name, ctr.Name, err)
	}
	return adj, true, nil
}

// byNvidiaRuntime says NVIDIA's runtime will give the container its GPUs:
// the pod runs under one of its handlers and the container names GPUs in
// NVIDIA_VISIBLE_DEVICES, as a device plugin sets it.
func byNvidiaRuntime(cfg *Config, pod *Pod, ctr *Container) bool {
	if !nvidiaHandler(cfg, pod) {
		return false
	}
	v, ok := visibleDevices(ctr.Env)
	v = strings.TrimSpace(v)
	return ok && v != "" && v != "void"
}

// skipIdleMIG leaves a GPU in MIG mode with no MIG device out of all, as
// NVIDIA's runtime's all device does (v1.20: whole GPUs not in MIG mode,
// and every MIG device with its GPU's node; nvcdi's lib-nvml.go): such a
// GPU runs no work.
func skipIdleMIG(node *NodeState, sel []bool) {
	for i, on := range node.MIGOn {
		if !on || i >= len(sel) {
			continue
		}
		has := false
		for k := range node.MIG {
			has = has || node.MIG[k].GPU == i
		}
		sel[i] = has
	}
}

// visibleDevices is NVIDIA_VISIBLE_DEVICES as NVIDIA's runtime reads it:
// unset in a legacy CUDA image (CUDA_VERSION without NVIDIA_REQUIRE_CUDA,
// its image.CUDA.IsLegacy) it is all.
func visibleDevices(env []string) (string, bool) {
	if v, ok := lookupEnv(env, VisibleDevicesEnv); ok {
		return v, true
	}
	cuda, _ := lookupEnv(env, "CUDA_VERSION")
	require, _ := lookupEnv(env, "NVIDIA_REQUIRE_CUDA")
	if cuda != "" && require == "" {
		return "all", true
	}
	return "", false
}

// nvidiaHandler says the pod runs under one of NVIDIA's runtime handlers.
func nvidiaHandler(cfg *Config, pod *Pod) bool {
	handlers := cfg.NvidiaRuntimeHandlers
	if handlers == nil {
		handlers = DefaultNvidiaRuntimeHandlers
	}
	return pod.RuntimeHandler != "" && slices.Contains(handlers, pod.RuntimeHandler)
}

// deferred is what a container NVIDIA's runtime will equip still lacks: the
// snapshot where the library the runtime mounts from this overlay's CDI spec
// (in /usr/lib64) looks for it, and with setEnv the GPUs to give named in
// NVIDIA_VISIBLE_DEVICES. The GPUs and MIG devices are recorded, as the
// runtime will give exactly those.
func deferred(node *NodeState, ctr *Container, sel, mig []bool, setEnv, all bool) Adjustment {
	var adj Adjustment
	visible := selection(node, sel, mig, &adj)
	if all {
		visible = "all" // the runtime's all device: every MIG device's nodes too
	}
	if setEnv {
		adj.Env = []EnvVar{{Key: VisibleDevicesEnv, Value: visible}}
	}
	sp, _ := SnapshotPathFor("/usr/lib64/libnvidia-ml.so.1")
	if !slices.Contains(ctr.Mounts, sp) {
		adj.Mounts = []Mount{{Source: node.Snapshot, Destination: sp, Type: "bind", Options: slices.Clone(bindOptions[:])}}
		adj.Mounts = appendState(adj.Mounts, node, ctr, sp, slices.Clone(bindOptions[:]))
	}
	adj.Hooks = pciHooks(node)
	return adj
}

// Selected says whether a container is one the plugin handles at all, from
// the pod alone: not a sandbox, not in kube-system or the plugin's own
// namespace, in an opted-in or allowlisted namespace, not opted out. It
// needs no node state, so callers can skip others before probing the node.
func Selected(cfg Config, optedIn map[string]bool, pod Pod, ctr Container) bool {
	if ctr.Sandbox {
		return false
	}
	ns := pod.Namespace
	if ns == "kube-system" || ns == cfg.OwnNamespace || ns == "" {
		return false
	}
	if !optedIn[ns] && !allowlisted(cfg.Namespaces, ns) {
		return false
	}
	v, ok := pod.Annotations[InjectAnnotation]
	return !ok || !strings.EqualFold(strings.TrimSpace(v), "false")
}

// isBool says whether an annotation's value is true or false, in any case,
// with spaces around.
func isBool(v string) bool {
	v = strings.TrimSpace(v)
	return strings.EqualFold(v, "true") || strings.EqualFold(v, "false")
}

// wanted says whether the container may be injected at all.
func wanted(cfg *Config, node *NodeState, pod *Pod, ctr *Container) bool {
	if !Selected(*cfg, node.OptedIn, *pod, *ctr) {
		return false
	}
	// Why nothing by default on a real driver: the mock would shadow real GPUs.
	return !node.RealDriver || cfg.AllowWithRealDriver
}

func allowlisted(list []string, ns string) bool {
	for _, n := range list {
		if n == ns || n == "*" {
			return true
		}
	}
	return false
}

// realMajor is the NVIDIA driver's registered character major.
const realMajor = 195

// checkRealMajor refuses a device node with NVIDIA's real major that is not
// one of the overlay's own nodes (an extension's mistake, say).
func checkRealMajor(node *NodeState, adj *Adjustment) error {
	for _, d := range adj.Devices {
		if d.Major != realMajor {
			continue
		}
		if !node.hasNode(d) {
			return fmt.Errorf("device %s has NVIDIA's real major %d:%d, which the node's overlay does not have", d.Path, d.Major, d.Minor)
		}
	}
	for _, r := range adj.DeviceRules {
		if r.Major == realMajor && r.Allow && !node.hasNumbers(r.Major, r.Minor) {
			return fmt.Errorf("device rule allows NVIDIA's real major %d:%d, which the node's overlay does not have", r.Major, r.Minor)
		}
	}
	return nil
}

func (n *NodeState) hasNode(d DeviceNode) bool {
	for i := range n.GPUs {
		if n.GPUs[i].Node == d {
			return true
		}
	}
	for _, c := range n.Control {
		if c == d {
			return true
		}
	}
	return false
}

func (n *NodeState) hasNumbers(major, minor int64) bool {
	for i := range n.GPUs {
		if g := n.GPUs[i].Node; g.Major == major && g.Minor == minor {
			return true
		}
	}
	for _, c := range n.Control {
		if c.Major == major && c.Minor == minor {
			return true
		}
	}
	return false
}

// check refuses a node state the decision cannot inject safely.
func (n *NodeState) check() error {
	var missing []string
	for _, p := range [...][2]string{{"library", n.Library}, {"nvidia-smi", n.NvidiaSMI}, {"snapshot", n.Snapshot}} {
		if !strings.HasPrefix(p[1], "/") {
			missing = append(missing, p[0])
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("node state: no absolute host path for the overlay's %s", strings.Join(missing, ", "))
	}
	if len(n.GPUs) == 0 {
		return fmt.Errorf("node state: overlay %s has no GPUs", n.DriverRoot)
	}
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if g.Index != i || g.UUID == "" || !strings.HasPrefix(g.Node.Path, "/dev/") {
			return fmt.Errorf("node state: GPU %d: want index %d, a UUID and a /dev node (have %d, %q, %q)", i, i, g.Index, g.UUID, g.Node.Path)
		}
	}
	ctl := false
	for _, c := range n.Control {
		if !strings.HasPrefix(c.Path, "/dev/") {
			return fmt.Errorf("node state: control node %q is not under /dev", c.Path)
		}
		ctl = ctl || c.Path == "/dev/nvidiactl"
	}
	if !ctl {
		// Without nvidiactl in the container the library would show every GPU.
		return fmt.Errorf("node state: no /dev/nvidiactl control node")
	}
	if n.InUse != nil && len(n.InUse) != len(n.GPUs) {
		return fmt.Errorf("node state: use counts for %d GPUs, the node has %d", len(n.InUse), len(n.GPUs))
	}
	return nil
}

// bindOptions are the options of every mount: read-only, no devices, no setuid.
var bindOptions = [...]string{"bind", "ro", "nosuid", "nodev"}

// selection puts the GPUs and MIG devices selected into adj (a MIG
// device comes with its GPU, as NVIDIA's runtime gives its GPU's node) and
// names them as NVIDIA_VISIBLE_DEVICES does: "none" for none, else the
// UUIDs of the GPUs given whole, then the MIG devices' (NVIDIA's device
// plugin names a MIG device alone, without its GPU). sel gains the MIG
// devices' GPUs.
func selection(node *NodeState, sel, mig []bool, adj *Adjustment) string {
	var whole []bool // the GPUs given whole, when MIG devices come too
	if len(mig) > 0 {
		whole = slices.Clone(sel)
	}
	for k, m := range mig {
		if m {
			adj.MIG = append(adj.MIG, k)
			sel[node.MIG[k].GPU] = true
		}
	}
	n := 0
	for _, s := range sel {
		if s {
			n++
		}
	}
	if n == 0 {
		return "none"
	}
	adj.GPUs = make([]int, 0, n)
	for i, s := range sel {
		if s {
			adj.GPUs = append(adj.GPUs, i)
		}
	}
	return joinUUIDs(node, adj.GPUs, whole, adj.MIG)
}

// Given names what adj gives as UUIDs, GPUs then MIG devices, for the
// caller's records (a MIG device's GPU is named too).
func Given(node *NodeState, adj *Adjustment) string {
	if len(adj.MIG) == 0 && len(adj.GPUs) > 0 && len(adj.Env) > 0 && adj.Env[0].Key == VisibleDevicesEnv {
		return adj.Env[0].Value // the same, as selection wrote it
	}
	return joinUUIDs(node, adj.GPUs, nil, adj.MIG)
}

// joinUUIDs is the comma list of the UUIDs of gpus (those whole marks,
// unless nil) and then of migs, in one allocation.
func joinUUIDs(node *NodeState, gpus []int, whole []bool, migs []int) string {
	n := 0
	for _, i := range gpus {
		n += len(node.GPUs[i].UUID) + 1
	}
	for _, k := range migs {
		n += len(node.MIG[k].UUID) + 1
	}
	var b strings.Builder
	b.Grow(n)
	add := func(u string) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(u)
	}
	for _, i := range gpus {
		if whole == nil || whole[i] {
			add(node.GPUs[i].UUID)
		}
	}
	for _, k := range migs {
		add(node.MIG[k].UUID)
	}
	return b.String()
}

// build makes the edits that give the GPUs and MIG devices selected, or
// the driver alone for none, leaving out what the spec already has: a CDI
// spec (nvidia-ctk cdi generate) brings the library, nvidia-smi and device
// nodes.
func build(cfg *Config, node *NodeState, ctr *Container, sel, mig []bool, all bool) Adjustment {
	var adj Adjustment
	visible := selection(node, sel, mig, &adj)

	libs := cfg.LibraryPaths
	if libs == nil {
		libs = DefaultLibraryPaths
	}
	opts := make([]string, len(bindOptions))
	copy(opts, bindOptions[:])
	opts = opts[:len(opts):len(opts)] // mounts share it; an append copies
	adj.Mounts = make([]Mount, 0, 2*len(libs)+1)
	// Why none of ours beside the spec's library: a CDI hook links
	// libnvidia-ml.so.1 to it, and our mount over that link would fight it.
	specLib := hasLibrary(ctr.Mounts)
	snapFor := libs
	if specLib {
		snapFor = ctr.Mounts
	} else {
		for _, l := range libs {
			if !slices.Contains(ctr.Mounts, l) {
				adj.Mounts = append(adj.Mounts, Mount{Source: node.Library, Destination: l, Type: "bind", Options: opts})
			}
		}
	}
	firstSnap := ""
	for _, l := range snapFor {
		if specLib && !isLibrary(l) {
			continue
		}
		sp, ok := SnapshotPathFor(l)
		if !ok {
			continue // Validate refuses it in libs
		}
		if firstSnap == "" {
			firstSnap = sp
		}
		if !hasDestination(adj.Mounts, sp) && !slices.Contains(ctr.Mounts, sp) {
			adj.Mounts = append(adj.Mounts, Mount{Source: node.Snapshot, Destination: sp, Type: "bind", Options: opts})
			adj.Mounts = appendState(adj.Mounts, node, ctr, sp, opts)
		}
	}
	if !slices.Contains(ctr.Mounts, NvidiaSMIPath) {
		adj.Mounts = append(adj.Mounts, Mount{Source: node.NvidiaSMI, Destination: NvidiaSMIPath, Type: "bind", Options: opts})
	}
	for _, b := range node.Binaries {
		if dst := "/usr/bin/" + path.Base(b); !slices.Contains(ctr.Mounts, dst) {
			adj.Mounts = append(adj.Mounts, Mount{Source: b, Destination: dst, Type: "bind", Options: opts})
		}
	}

	// A node already in the spec came with its cgroup rule: neither is added.
	// One at the same path with other numbers (a device plugin's) is replaced.
	adj.Devices = make([]DeviceNode, 0, len(adj.GPUs)+len(node.Control))
	for _, i := range adj.GPUs {
		if !hasNode(ctr.Devices, node.GPUs[i].Node) {
			adj.Devices = append(adj.Devices, node.GPUs[i].Node)
		}
	}
	for _, c := range node.Control {
		if !hasNode(ctr.Devices, c) {
			adj.Devices = append(adj.Devices, c)
		}
	}
	addNode := func(c DeviceNode) {
		if !hasNode(ctr.Devices, c) && !hasNode(adj.Devices, c) {
			adj.Devices = append(adj.Devices, c)
		}
	}
	for _, k := range adj.MIG {
		for _, c := range node.MIG[k].Caps {
			addNode(c)
		}
	}
	// A process sees the MIG devices whose capability nodes it has. "all"
	// gives every MIG device, as NVIDIA's toolkit's "all" device does; a
	// GPU in MIG mode named alone gives none of them. The monitor
	// capability shows them all.
	if all {
		for k := range node.MIG {
			for _, c := range node.MIG[k].Caps {
				addNode(c)
			}
		}
	}
	// A privileged container gets the host's /dev on a real node: every
	// GPU's and MIG device's nodes, so it sees them all, whatever it was
	// given (NVIDIA_VISIBLE_DEVICES names what it was given, and use
	// counts follow that).
	if ctr.Privileged {
		for i := range node.GPUs {
			addNode(node.GPUs[i].Node)
		}
		for k := range node.MIG {
			addNode(node.MIG[k].Caps[0])
			addNode(node.MIG[k].Caps[1])
		}
		if node.MIGMonitor != nil {
			addNode(*node.MIGMonitor)
		}
	}
	if ok, why := migCapability(ctr, &adj, all, MIGMonitorEnv); ok && node.MIGMonitor != nil {
		addNode(*node.MIGMonitor)
	} else if why != "" {
		adj.Warnings = append(adj.Warnings, why)
	}
	// NVIDIA's runtime gives the config capability for
	// NVIDIA_MIG_CONFIG_DEVICES=all (with the writable state, migConfig).
	if ok, _ := migCapability(ctr, &adj, all, MIGConfigEnv); ok && node.MIGConfig != nil {
		addNode(*node.MIGConfig)
	}
	adj.DeviceRules = make([]DeviceRule, 0, len(adj.Devices))
	for _, d := range adj.Devices {
		if !hasRule(adj.DeviceRules, d) {
			adj.DeviceRules = append(adj.DeviceRules, DeviceRule{Allow: true, Type: d.Type, Major: d.Major, Minor: d.Minor, Access: "rwm"})
		}
	}
	if ctr.UserNS {
		// runc cannot mknod in a user namespace: it binds each node from
		// the same path on the host, where a mock node has none (review).
		// The overlay's own are bound instead; the cgroup rules stay.
		// Read-only: a device node's writes do not go to its mount.
		for _, d := range adj.Devices {
			adj.Mounts = append(adj.Mounts, Mount{Source: path.Join(node.DriverRoot, d.Path), Destination: d.Path, Type: "bind", Options: []string{"bind", "ro", "nosuid"}})
		}
		adj.Devices = nil
	}

	// Set even over a CDI spec's void (NVIDIA's runtime leaves void there):
	// it records what the container holds, which Synchronize reads back
	// after a restart.
	adj.Env = make([]EnvVar, 0, 2)
	adj.Env = append(adj.Env, EnvVar{Key: VisibleDevicesEnv, Value: visible})
	if _, set := lookupEnv(ctr.Env, SnapshotEnv); !set && firstSnap != "" {
		// A fallback for a library reached by another path; the user's own setting wins.
		adj.Env = append(adj.Env, EnvVar{Key: SnapshotEnv, Value: firstSnap})
	}
	adj.Hooks = pciHooks(node)
	return adj
}

// pciHooks show the node's PCI tree in the container's /sys and the
// driver's procfs files in its /proc/driver, as a real node shows every
// container all its PCI devices and the kernel module's procfs: to every
// container of an opted-in namespace, given GPUs, the driver alone or
// nothing (void: a DRA driver, which reads the GPUs' PCIe roots and the
// MIG capabilities there). Not an Extension: those pair devices with GPUs.
func pciHooks(node *NodeState) []Hook {
	if node.Hook == "" || node.Sys == "" {
		return nil
	}
	args := []string{"nvmock-hook", "pcisim", node.Sys}
	if node.Proc != "" || node.IBLive != "" {
		args = append(args, cmp.Or(node.Proc, "-"))
	}
	if node.IBLive != "" {
		args = append(args, node.IBLive)
	}
	return []Hook{{Path: node.Hook, Args: args}}
}

// hasLibrary says whether the spec mounts a libnvidia-ml.so* where the
// library finds its snapshot.
func hasLibrary(mounts []string) bool {
	for _, m := range mounts {
		if isLibrary(m) {
			return true
		}
	}
	return false
}

// isLibrary says whether p is a libnvidia-ml.so* in a directory the library
// recognises (SnapshotPathFor).
func isLibrary(p string) bool {
	base := p[strings.LastIndexByte(p, '/')+1:]
	if base != "libnvidia-ml.so" && !strings.HasPrefix(base, "libnvidia-ml.so.") {
		return false
	}
	_, ok := SnapshotPathFor(p)
	return ok
}

// hasNode says whether ds has d's path with d's numbers (file mode aside).
func hasNode(ds []DeviceNode, d DeviceNode) bool {
	for i := range ds {
		if ds[i].Path == d.Path && ds[i].Major == d.Major && ds[i].Minor == d.Minor {
			return true
		}
	}
	return false
}

func hasDestination(ms []Mount, dst string) bool {
	for i := range ms {
		if ms[i].Destination == dst {
			return true
		}
	}
	return false
}

func hasRule(rs []DeviceRule, d DeviceNode) bool {
	for _, r := range rs {
		if r.Type == d.Type && r.Major == d.Major && r.Minor == d.Minor {
			return true
		}
	}
	return false
}

// lookupEnv finds the last KEY=value of key, as runtimes resolve duplicates.
func lookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		kv := env[i]
		if len(kv) > len(key) && kv[len(key)] == '=' && kv[:len(key)] == key {
			return kv[len(key)+1:], true
		}
	}
	return "", false
}

// libDirs are the directories libnvml/snapshot.c recognises, in its order.
var libDirs = [...]string{"/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib", "/lib64"}

// SnapshotPathFor is where the library reads its snapshot when loaded from
// libPath (already resolved, as realpath(3) gives it), mirroring
// snapshot_path() in libnvml/snapshot.c: the library's directory minus a
// standard library directory suffix, plus /etc/nvmock/snapshot. ok is false
// when the directory is not one the library recognises.
func SnapshotPathFor(libPath string) (string, bool) {
	slash := strings.LastIndexByte(libPath, '/')
	if slash < 0 {
		return "", false
	}
	dir := libPath[:slash]
	for _, l := range libDirs {
		if strings.HasSuffix(dir, l) {
			return dir[:len(dir)-len(l)] + "/etc/nvmock/snapshot", true
		}
	}
	return "", false
}

// appendState shows the node's live state beside a snapshot mounted at sp,
// read-only, so that a container's settings change nothing, as a real
// container's without CAP_SYS_ADMIN do not ("Insufficient Permissions").
// A privileged container has it, and changes the node as on a real one
// (NVIDIA's MPS daemon sets the compute mode so): it gets it writable.
func appendState(ms []Mount, node *NodeState, ctr *Container, sp string, opts []string) []Mount {
	if node.State == "" {
		return ms
	}
	dst := path.Join(path.Dir(sp), "state")
	if hasDestination(ms, dst) || slices.Contains(ctr.Mounts, dst) {
		return ms
	}
	if i := slices.Index(opts, "ro"); ctr.Privileged && i >= 0 {
		opts = slices.Clone(opts)
		opts[i] = "rw"
	}
	return append(ms, Mount{Source: node.State, Destination: dst, Type: "bind", Options: opts})
}
