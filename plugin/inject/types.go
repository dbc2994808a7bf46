package inject

import "slices"

// Annotations and labels the decision reads.
const (
	// InjectLabel on a namespace, with value InjectEnabled, opts its pods in.
	InjectLabel   = "nvmock.io/inject"
	InjectEnabled = "enabled"
	// InjectAnnotation "false" on a pod opts it out.
	InjectAnnotation = "nvmock.io/inject"
	// GPUsAnnotation on a pod asks for GPUs: all, none (the driver without
	// GPUs, as NVIDIA_VISIBLE_DEVICES=none), a count, or a list.
	GPUsAnnotation = "nvmock.io/gpus"
	// InfiniBandAnnotation "false" on a pod keeps its GPU containers out of
	// the node's InfiniBand planes.
	InfiniBandAnnotation = "nvmock.io/infiniband"
)

// VisibleDevicesEnv is the variable device plugins set and NVIDIA's runtime acts on.
const VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"

// SnapshotEnv points the library at its snapshot; set as a fallback only.
const SnapshotEnv = "NVMOCK_SNAPSHOT"

// Container paths. The library resolves its own path with realpath(3) and,
// when it sits in one of the standard library directories, reads the
// snapshot at <that dir minus the library directory>/etc/nvmock/snapshot;
// a bind-mounted file's realpath is its mount point, so a library mounted at
// /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 reads /etc/nvmock/snapshot.
const (
	NvidiaSMIPath = "/usr/bin/nvidia-smi"
)

// DefaultLibraryPaths are where the library is mounted unless configured:
// Debian's and Fedora's glibc search these without a loader cache entry, so
// unmodified programs that clear their environment dlopen it by name.
var DefaultLibraryPaths = []string{
	"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
	"/usr/lib64/libnvidia-ml.so.1",
}

// Config is the plugin's configuration, validated once at start (Validate).
type Config struct {
	// Namespaces are injected without a namespace label: the allowlist for
	// running without a cluster. "*" means every namespace.
	Namespaces []string
	// OwnNamespace is the plugin's namespace, never injected.
	OwnNamespace string
	// DefaultGPUs is what a container gets when nothing else says: the
	// annotation's grammar; "" means "all".
	DefaultGPUs string
	// AllowWithRealDriver injects even where a real NVIDIA driver is loaded.
	AllowWithRealDriver bool
	// LibraryPaths are the container paths the library is mounted at; nil
	// means DefaultLibraryPaths. Each must sit in a directory the library
	// recognises (SnapshotPathFor), so that it finds its snapshot.
	LibraryPaths []string
	// Extensions add more to a container given GPUs (InfiniBand, PCIe...),
	// in order, after the GPU edits.
	Extensions []Extension
	// NvidiaRuntimeHandlers are the runtime handlers (RuntimeClasses) that
	// run NVIDIA's container runtime in CDI mode, with a CDI spec made from
	// this overlay: it gives a container with NVIDIA_VISIBLE_DEVICES its
	// devices, library and nvidia-smi after the plugin has run, so the
	// plugin adds only the snapshot. nil means DefaultNvidiaRuntimeHandlers.
	NvidiaRuntimeHandlers []string
	// AcceptVolumeMounts reads a device plugin's volume-mounts list, as
	// NVIDIA's runtime does only with accept-nvidia-visible-devices-as-
	// volume-mounts set (its default: not).
	AcceptVolumeMounts bool
}

// DefaultNvidiaRuntimeHandlers are the handlers the GPU operator and
// nvidia-ctk runtime configure register NVIDIA's runtime under in CDI mode
// (nvidia-legacy runs nvidia-container-cli, which needs the kernel driver).
var DefaultNvidiaRuntimeHandlers = []string{"nvidia", "nvidia-cdi"}

// Extension adds edits to a container that gets GPUs, not to one given the
// driver alone ("none"). Apply may append to adj's slices; an error leaves
// the container untouched (Decide returns it).
type Extension struct {
	Name  string
	Apply func(in Input, adj *Adjustment) error
}

// Input is what an Extension sees: the decision's inputs and the chosen GPUs.
type Input struct {
	Node NodeState
	Pod  Pod
	Ctr  Container
	GPUs []int // node indices given to the container, ascending
}

// DeviceNode is a device node: in NodeState, the overlay's node with its
// numbers and the path it gets in a container; in a Container, one already
// in the spec.
type DeviceNode struct {
	Path         string // in the container: /dev/nvidia0
	Type         string // "c"
	Major, Minor int64
	FileMode     uint32 // permission bits, 0666 as the NVIDIA driver makes them
}

// GPU is one GPU of the node.
type GPU struct {
	Index int    // node index (and minor of its /dev/nvidia node)
	UUID  string // as the library reports it on this node
	Node  DeviceNode
}

// NodeState is what the decision needs to know about the node; a prober
// (NodeStateFromOverlay, plus the caller's cluster watch and bookkeeping)
// gathers it.
type NodeState struct {
	// Host paths of the overlay's files, as bind-mount sources.
	DriverRoot string // <root>/driver, the stable symlink
	Overlay    string // what DriverRoot resolved to when probed (to notice a switch)
	Library    string // DriverRoot/usr/lib64/libnvidia-ml.so.1
	NvidiaSMI  string // DriverRoot/usr/bin/nvidia-smi
	Snapshot   string // DriverRoot/etc/nvmock/snapshot
	// Binaries are the driver's other programs a container with GPUs gets
	// at /usr/bin, as NVIDIA's runtime mounts them: the MPS control
	// daemon and server (hostprep.MPSBinaries), when the overlay has them.
	Binaries []string
	// State is the node's live state (package live), shown beside the
	// snapshot; "" when the install has none (an older one).
	State string
	// The overlay's PCI tree and the runtime hook that shows it in a
	// container's /sys; "" when the overlay has none (an older install).
	Sys, Hook string
	// Proc is the overlay's procfs files (driver/, devices), which the
	// hook shows at the container's /proc/driver and /proc/devices; ""
	// when there is no hook.
	Proc string
	// IBLive is the node's live InfiniBand port state (hostprep.IBLiveDir),
	// whose ports directories the hook shows over the tree's; "" when the
	// node has none.
	IBLive string

	// IB is the node's InfiniBand planes; nil when the overlay has none.
	IB *IBNode

	GPUs    []GPU        // in index order
	Control []DeviceNode // nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset: given with any GPU
	// MIG is the node's MIG devices (ProbeMIG), MIGGen the live state's
	// generation they were read at.
	MIG []MIGDevice
	// MIGMonitor is the MIG monitor capability's node; nil when the
	// overlay has none (a board without MIG).
	MIGMonitor *DeviceNode
	// MIGConfig is the MIG config capability's node (nvidia-cap1), which
	// the library asks of a process that makes or destroys instances.
	MIGConfig *DeviceNode
	MIGGen    uint64
	// MIGOn[i] says GPUs[i] is in MIG mode, where work runs on its MIG
	// devices only; nil is none.
	MIGOn []bool
	// MIGInUse[k] counts the containers given MIG[k]; nil is all zero.
	MIGInUse []int

	// InUse[i] counts the containers currently given GPUs[i]; nil is all
	// zero. The caller keeps it from the GPUs of the Adjustments it applied.
	InUse []int
	// RealDriver says a real NVIDIA kernel driver is loaded.
	RealDriver bool
	// OptedIn is the set of namespaces labelled nvmock.io/inject=enabled.
	OptedIn map[string]bool
}

// Pod is the pod a container belongs to.
type Pod struct {
	Namespace, Name string
	Annotations     map[string]string
	RuntimeHandler  string // the pod's runtime handler ("" for the default runtime)
}

// Container is the container being created, as its spec stands.
type Container struct {
	Name string
	// Sandbox marks a pod sandbox (pause) container: never touched.
	Sandbox bool
	Env     []string // KEY=value, as in the OCI spec
	// CDIDevices are fully qualified CDI names already requested
	// (nvidia.com/gpu=0), from the CRI request or the container's
	// cdi.k8s.io annotations.
	CDIDevices []string
	Devices    []DeviceNode // device nodes already in the spec
	// Mounts are the container paths of mounts already in the spec (a CDI
	// spec's library and nvidia-smi, say): build adds only what is missing.
	Mounts []string
	// NullMounts are the destinations of those whose source is /dev/null:
	// NVIDIA's runtime reads a device plugin's volume-mounts list from
	// these alone.
	NullMounts []string
	Args       []string // the process it runs, for the name it shows as (Processes)
	// Privileged: the spec allows every device (containerd's allow-all
	// device rule for a privileged container).
	Privileged bool
	// UserNS: the container has a user namespace of its own (a pod with
	// hostUsers: false).
	UserNS bool
}

// Mount is a bind mount into the container.
type Mount struct {
	Source      string // host path
	Destination string // container path
	Type        string // "bind"
	Options     []string
}

// DeviceRule is a device cgroup rule.
type DeviceRule struct {
	Allow        bool
	Type         string // "c"
	Major, Minor int64
	Access       string // "rwm"
}

// EnvVar is one variable to set (replacing any of the same name).
type EnvVar struct{ Key, Value string }

// Adjustment is what to change in one container. Decide returns ok=true
// exactly when it holds an edit; Warnings can come with either answer and
// are for the caller to log and count.
type Adjustment struct {
	GPUs        []int // node indices given, ascending (MIG devices' GPUs too); the caller records them in InUse
	MIG         []int // indices in NodeState.MIG of the MIG devices given
	Mounts      []Mount
	Devices     []DeviceNode
	DeviceRules []DeviceRule
	Env         []EnvVar
	Hooks       []Hook // OCI createContainer hooks
	Warnings    []string
}

// Hook is an OCI hook: a host path and its argv.
type Hook struct {
	Path string
	Args []string
}

// WithPIDFile is the runtime hook asked also to write the container's pid
// on the node to path (nvmock-hook's PIDFILE, after PROC and IBLIVE).
func (h Hook) WithPIDFile(path string) Hook {
	args := slices.Clone(h.Args)
	for len(args) < 5 {
		args = append(args, "-")
	}
	h.Args = append(args, path)
	return h
}

// Empty says the adjustment changes nothing (warnings aside).
func (a *Adjustment) Empty() bool {
	return len(a.GPUs) == 0 && len(a.Mounts) == 0 && len(a.Devices) == 0 && len(a.DeviceRules) == 0 && len(a.Env) == 0 && len(a.Hooks) == 0
}
