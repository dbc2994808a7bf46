package inject

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// CDI kinds whose devices name this node's GPUs.
const (
	CDIKindMock   = "nvmock.io/gpu"
	CDIKindNVIDIA = "nvidia.com/gpu"
	// CDIKindRuntime is the kind of the devices NVIDIA's runtime makes a
	// spec for itself (its jit-cdi mode): NVIDIA_VISIBLE_DEVICES may name
	// them so.
	CDIKindRuntime = "runtime.nvidia.com/gpu"
)

// source is where choose found what the container gets.
type source int

const (
	fromSpec       source = iota // CDI devices or GPU nodes already in the spec
	fromMounts                   // a device plugin's volume-mounts list
	fromEnv                      // NVIDIA_VISIBLE_DEVICES
	fromAnnotation               // nvmock.io/gpus
	fromDefault                  // Config.DefaultGPUs
)

// DeviceListRoot is where a device plugin with the volume-mounts list
// strategy mounts /dev/null once per device it gives (.../<name>, or
// .../cdi/<vendor>/<class>/<name>), with NVIDIA_VISIBLE_DEVICES naming the
// directory; NVIDIA's runtime reads the names off the mounts.
const DeviceListRoot = "/var/run/nvidia-container-devices"

// choose marks in sel the GPUs the container gets, first source that says
// wins:
//
//  1. GPUs already in the spec: CDI devices of the two GPU kinds and
//     /dev/nvidiaN nodes (together). They come before the environment
//     because a CDI spec sets NVIDIA_VISIBLE_DEVICES=void beside its nodes.
//  2. Mounts under DeviceListRoot, as NVIDIA's runtime reads them when it
//     accepts device lists as volume mounts (Config.AcceptVolumeMounts; a
//     pod under NVIDIA's runtime always, as that runtime decides by its
//     own setting, which the plugin cannot see); none, or void among them,
//     falls through.
//  3. NVIDIA_VISIBLE_DEVICES: all; none (the driver without GPUs); void
//     (nothing); node indices, whole UUIDs, MIG devices and CDI names of
//     the GPU kinds, read as NVIDIA's toolkit reads it: set but empty is
//     void, and all, none or void anywhere in a list counts. Unset falls
//     through, but in a legacy CUDA image, where the toolkit takes all.
//     An "all" gives way to the annotation: CUDA images set it in their
//     environment, where a device plugin's list would replace it.
//  4. The pod annotation nvmock.io/gpus (request grammar, selectRequest);
//     none is the driver without GPUs, like the variable's none.
//  5. Config.DefaultGPUs, "all" when empty; its none is nothing at all, since
//     the pod asked for nothing.
//
// driver says the pod asked for none explicitly: the driver (library,
// nvidia-smi, control nodes) without GPUs, as NVIDIA's runtime gives it.
// all says the source asked for all GPUs, which gives every MIG device too.
// bad says why a source is bad, "" when sel is the answer (all false for
// none and void). Nothing a pod says becomes a path: values only select
// among the node's GPUs.
func choose(cfg *Config, node *NodeState, pod *Pod, ctr *Container, sel, mig []bool) (driver, all bool, src source, bad string) {
	found := false
	for _, name := range ctr.CDIDevices {
		kind, dev, _ := strings.Cut(name, "=")
		if !gpuKind(kind) {
			continue
		}
		found = true
		if dev == "all" {
			setAll(sel)
			all = true
			continue
		}
		if kind == CDIKindNVIDIA && isMIGName(dev) {
			k, why := node.lookupMIG(dev)
			if why != "" {
				return false, all, fromSpec, fmt.Sprintf("CDI device %s %s", quote(name), why)
			}
			mig[k] = true
			continue
		}
		i, why := node.lookup(dev, true)
		if why != "" {
			return false, all, fromSpec, fmt.Sprintf("CDI device %s %s", quote(name), why)
		}
		sel[i] = true
	}
	caps := map[string]bool{}
	for _, d := range ctr.Devices {
		if strings.HasPrefix(d.Path, "/dev/nvidia-caps/") {
			caps[d.Path] = true
		}
		if !isGPUNode(d.Path) {
			continue
		}
		found = true
		i := node.byPath(d.Path)
		if i < 0 {
			return false, all, fromSpec, fmt.Sprintf("device node %s is no GPU of this node", quote(d.Path))
		}
		sel[i] = true
	}
	// A GPU's node with the capability nodes of its MIG devices gives those
	// MIG devices, not the whole GPU, as a DRA driver's CDI spec for a MIG
	// claim has it (review: the GPU's UUID was named in
	// NVIDIA_VISIBLE_DEVICES).
	for k, m := range node.MIG {
		if sel[m.GPU] && caps[m.Caps[0].Path] && caps[m.Caps[1].Path] {
			mig[k] = true
		}
	}
	for k, m := range node.MIG {
		if mig[k] {
			sel[m.GPU] = false
		}
	}
	if found {
		return false, all, fromSpec, ""
	}

	volumes := cfg.AcceptVolumeMounts || nvidiaHandler(cfg, pod)
	if list := MountedList(ctr.NullMounts); list != "" && volumes {
		switch special(list) {
		case "all":
			setAll(sel)
			return false, true, fromMounts, ""
		case "none":
			return true, false, fromMounts, ""
		}
		if why := node.selectList(list, true, sel, mig); why != "" {
			return false, false, fromMounts, fmt.Sprintf("mounts under %s name %s: %s", DeviceListRoot, quote(list), why)
		}
		return false, false, fromMounts, ""
	}

	annotation := strings.TrimSpace(pod.Annotations[GPUsAnnotation])
	v, ok := visibleDevices(ctr.Env)
	if list := unqualify(v); ok && (special(list) != "all" || annotation == "") {
		switch special(list) {
		case "void":
		case "all":
			setAll(sel)
			all = true
		case "none":
			return true, all, fromEnv, ""
		default:
			if path.Clean(strings.TrimSpace(v)) == DeviceListRoot {
				if !volumes {
					// NVIDIA's runtime takes the path for a device name and fails.
					return false, false, fromEnv, fmt.Sprintf("env %s=%s names a device plugin's volume-mounts list, which this node does not read (NVIDIA's runtime reads it only with accept-nvidia-visible-devices-as-volume-mounts; here the chart's injection.acceptVolumeMounts, nvmock nri --accept-volume-mounts)", VisibleDevicesEnv, quote(v))
				}
				return false, false, fromEnv, fmt.Sprintf("env %s=%s names the volume-mounts device list, but no device is mounted under it", VisibleDevicesEnv, quote(v))
			}
			if why := node.selectList(list, true, sel, mig); why != "" {
				return false, all, fromEnv, fmt.Sprintf("env %s=%s %s", VisibleDevicesEnv, quote(v), why)
			}
		}
		return false, all, fromEnv, ""
	}

	if annotation != "" {
		if annotation == "none" {
			return true, false, fromAnnotation, ""
		}
		all = annotation == "all"
		if why := node.selectRequest(annotation, sel, mig); why != "" {
			return false, all, fromAnnotation, fmt.Sprintf("annotation %s=%s %s", GPUsAnnotation, quote(annotation), why)
		}
		return false, all, fromAnnotation, ""
	}

	def := cfg.DefaultGPUs
	if def == "" {
		def = "all"
	}
	all = strings.TrimSpace(def) == "all"
	if why := node.selectRequest(def, sel, mig); why != "" {
		return false, all, fromDefault, fmt.Sprintf("config default GPUs %s %s", quote(def), why)
	}
	return false, all, fromDefault, ""
}

// gpuKind says whether CDI devices of kind name this node's GPUs in a
// spec or a device plugin's list. The runtime's own kind is only read in
// NVIDIA_VISIBLE_DEVICES: no spec file has it (the runtime makes its
// spec after containerd's CDI resolution and NRI).
func gpuKind(kind string) bool { return kind == CDIKindMock || kind == CDIKindNVIDIA }

// MountedList reads a device plugin's volume-mounts list as NVIDIA's
// runtime does: each mount of /dev/null under DeviceListRoot (mounts, their
// destinations) names one device (a CDI name of a GPU kind under cdi/); ""
// for none, void among them, or names only of other kinds.
func MountedList(mounts []string) string {
	var names []string
	for _, m := range mounts {
		rest, found := strings.CutPrefix(path.Clean(m), DeviceListRoot+"/")
		if !found || rest == "" {
			continue
		}
		if rest == "void" {
			return ""
		}
		if strings.HasPrefix(rest, "imex/") { // IMEX channels: not GPUs
			continue
		}
		if cdi, isCDI := strings.CutPrefix(rest, "cdi/"); isCDI {
			// vendor/class/name or vendor/class=name
			if i := strings.IndexByte(cdi, '='); i < 0 {
				if parts := strings.SplitN(cdi, "/", 3); len(parts) == 3 {
					cdi = parts[0] + "/" + parts[1] + "=" + parts[2]
				}
			}
			kind, dev, _ := strings.Cut(cdi, "=")
			if !gpuKind(kind) {
				continue
			}
			rest = dev
		}
		if !slices.Contains(names, rest) {
			names = append(names, rest)
		}
	}
	return strings.Join(names, ",")
}

// unqualify reads the fully qualified CDI names NVIDIA's runtime takes in
// NVIDIA_VISIBLE_DEVICES (nvidia.com/gpu=0, runtime.nvidia.com/gpu=all,
// beside plain entries) as the devices they name. Names of other kinds (an
// IMEX channel) are no GPU of this node: they are left out, and the
// runtime gives them.
func unqualify(v string) string {
	if !strings.Contains(v, "=") {
		return v
	}
	var out []string
	for _, e := range strings.Split(v, ",") {
		kind, dev, qualified := strings.Cut(strings.TrimSpace(e), "=")
		switch {
		case !qualified:
			out = append(out, e)
		case gpuKind(kind) || kind == CDIKindRuntime:
			out = append(out, dev)
		}
	}
	return strings.Join(out, ",")
}

// special reads NVIDIA_VISIBLE_DEVICES as NVIDIA's toolkit does (its
// image.NewVisibleDevices): void when the list is empty or has void
// anywhere, else the first all or none in it; "" for a list of devices.
func special(v string) string {
	var list []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			list = append(list, e)
		}
	}
	if len(list) == 0 || slices.Contains(list, "void") {
		return "void"
	}
	for _, e := range list {
		if e == "all" || e == "none" {
			return e
		}
	}
	return ""
}

func setAll(sel []bool) {
	for i := range sel {
		sel[i] = true
	}
}

// isGPUNode says whether p is /dev/nvidia<digits>.
func isGPUNode(p string) bool {
	const pre = "/dev/nvidia"
	return len(p) > len(pre) && p[:len(pre)] == pre && digits(p[len(pre):])
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func (n *NodeState) byPath(p string) int {
	for i := range n.GPUs {
		if n.GPUs[i].Node.Path == p {
			return i
		}
	}
	return -1
}

// lookup finds a GPU by node index, UUID or, unless whole, unique UUID
// prefix, ignoring case. NVIDIA's interfaces (the variable, device-list
// mounts, CDI names) take whole UUIDs only, starting GPU- as written: its
// runtime (v1.20: jit-cdi by default) refuses others ("identifier is not a
// valid UUID or index").
func (n *NodeState) lookup(s string, whole bool) (int, string) {
	if digits(s) {
		v, err := strconv.Atoi(s)
		if err != nil || v >= len(n.GPUs) {
			return -1, fmt.Sprintf("names index %s; the node has GPUs 0-%d", quote(s), len(n.GPUs)-1)
		}
		return v, ""
	}
	if whole && hasPrefixFold(s, "GPU-") && !strings.HasPrefix(s, "GPU-") {
		// go-nvlib's IsGpuUUID, which NVIDIA's runtime reads names with.
		return -1, fmt.Sprintf("names %s; NVIDIA's runtime takes UUIDs that start GPU- in capitals", quote(s))
	}
	if hasPrefixFold(s, "GPU-") {
		found := -1
		for i := range n.GPUs {
			u := n.GPUs[i].UUID
			if strings.EqualFold(u, s) {
				return i, ""
			}
			if len(s) > len("GPU-") && hasPrefixFold(u, s) {
				if found >= 0 {
					return -1, fmt.Sprintf("names %s, a prefix of more than one GPU's UUID", quote(s))
				}
				found = i
			}
		}
		switch {
		case found >= 0 && whole:
			return -1, fmt.Sprintf("names %s, only the start of GPU %d's UUID; NVIDIA's runtime takes whole UUIDs", quote(s), found)
		case found >= 0:
			return found, ""
		}
		return -1, fmt.Sprintf("names %s, no GPU of this node", quote(s))
	}
	return -1, fmt.Sprintf("has %s, neither a GPU index nor a UUID", quote(s))
}

// selectList marks a comma list of indices and UUIDs, MIG devices (MIG-
// UUIDs, GPU:index) and, in nvmock's own requests, UUID prefixes and MIG
// profiles (mig-1g.5gb: one device of it); nvidia says the list is in one
// of NVIDIA's interfaces, which take neither. Empty entries are skipped,
// but at least one entry must be there.
func (n *NodeState) selectList(list string, nvidia bool, sel, mig []bool) string {
	named := false
	for list != "" {
		var e string
		e, list, _ = strings.Cut(list, ",")
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if p, ok := strings.CutPrefix(e, "mig-"); ok && !migUUIDTail(p) {
			if nvidia {
				return fmt.Sprintf("has %s, a MIG profile, which only the annotation %s takes", quote(e), GPUsAnnotation)
			}
			if why := n.selectMIGProfile(p, mig); why != "" {
				return why
			}
			named = true
			continue
		}
		if isMIGName(e) {
			if nvidia && hasPrefixFold(e, "MIG-") && !strings.HasPrefix(e, "MIG-") {
				return fmt.Sprintf("names %s; NVIDIA's runtime takes MIG UUIDs that start MIG- in capitals", quote(e))
			}
			k, why := n.lookupMIG(e)
			if why != "" {
				return why
			}
			mig[k] = true
			named = true
			continue
		}
		i, why := n.lookup(e, nvidia)
		if why != "" {
			return why
		}
		sel[i] = true
		named = true
	}
	if !named {
		return "names no GPU"
	}
	return ""
}

// selectRequest marks what a request asks for: "all"; "none"; a count N
// (a bare number: the N least used GPUs, lower index first on a tie); or a
// comma list of indices and UUIDs. A bare number is always a count: to name
// the single GPU with index 2, write "2," or its UUID.
func (n *NodeState) selectRequest(v string, sel, mig []bool) string {
	v = strings.TrimSpace(v)
	switch {
	case v == "all":
		setAll(sel)
	case v == "none":
	case digits(v):
		c, err := strconv.Atoi(v)
		if err != nil || c > len(n.GPUs) {
			return fmt.Sprintf("asks for more GPUs than the node's %d", len(n.GPUs))
		}
		// A GPU in MIG mode runs work on its MIG devices only: a count of
		// whole GPUs passes it over, as NVIDIA's device plugin does.
		if whole := len(n.GPUs) - n.inMIGMode(); c > whole {
			return fmt.Sprintf("asks for %d GPUs; %d of the node's %d are not in MIG mode (ask for MIG devices with mig-<profile>)", c, whole, len(n.GPUs))
		}
		n.leastUsed(c, sel)
	case strings.Contains(v, ",") || hasPrefixFold(v, "GPU-") || strings.HasPrefix(v, "mig-") || isMIGName(v):
		return n.selectList(v, false, sel, mig)
	default:
		return "is not all, none, a count or a comma list of GPU indices and UUIDs, MIG devices and mig-<profile>"
	}
	return ""
}

// inMIGMode counts the GPUs in MIG mode.
func (n *NodeState) inMIGMode() int {
	k := 0
	for _, on := range n.MIGOn {
		if on {
			k++
		}
	}
	return k
}

// leastUsed marks the c GPUs not in MIG mode with the lowest use counts,
// lower index first.
func (n *NodeState) leastUsed(c int, sel []bool) {
	for k := 0; k < c; k++ {
		best := -1
		for i := range sel {
			if sel[i] || (i < len(n.MIGOn) && n.MIGOn[i]) {
				continue
			}
			if best < 0 || n.use(i) < n.use(best) {
				best = i
			}
		}
		sel[best] = true
	}
}

func (n *NodeState) use(i int) int {
	if n.InUse == nil {
		return 0
	}
	return n.InUse[i]
}

// quote quotes a value for a message, cut to a length a log line can bear.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		return strconv.Quote(s[:max]) + "..."
	}
	return strconv.Quote(s)
}

// ValidateRequest checks a request's grammar (all, none, a count, a comma
// list of indices and UUIDs) without a node, for Config.DefaultGPUs.
func ValidateRequest(v string) error {
	t := strings.TrimSpace(v)
	switch {
	case t == "all", t == "none", digits(t):
		return nil
	case strings.Contains(t, ",") || hasPrefixFold(t, "GPU-") || strings.HasPrefix(t, "mig-") || isMIGName(t):
		named := false
		for _, e := range strings.Split(t, ",") {
			e = strings.TrimSpace(e)
			if e == "" {
				continue
			}
			if !digits(e) && !(hasPrefixFold(e, "GPU-") && len(e) > len("GPU-")) && !isMIGName(e) && !(strings.HasPrefix(e, "mig-") && len(e) > len("mig-")) {
				return fmt.Errorf("%q: entry %q is neither a GPU index nor a UUID", v, e)
			}
			named = true
		}
		if named {
			return nil
		}
	}
	return errors.New(strconv.Quote(v) + " is not all, none, a count or a comma list of GPU indices and UUIDs, MIG devices and mig-<profile>")
}

// hasPrefixFold is strings.HasPrefix ignoring case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// migUUIDTail says whether what follows "mig-" is a MIG UUID's (a UUID, or
// GPU-<uuid>/gi/ci), which a lower-case MIG UUID has, not a profile's.
func migUUIDTail(s string) bool {
	if hasPrefixFold(s, "GPU-") {
		return true
	}
	parts := strings.Split(s, "-")
	if len(parts) != 5 {
		return false
	}
	for k, p := range parts {
		if len(p) != []int{8, 4, 4, 4, 12}[k] {
			return false
		}
		for _, c := range p {
			if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
				return false
			}
		}
	}
	return true
}
