package inject

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/libnvml/snapshot"
)

const (
	testSeed   = "inject-test-node"
	testDriver = "/var/lib/nvmock/driver"
)

// testNode is an installed overlay of n GPUs as NodeStateFromOverlay reads
// it: inert /dev/null numbers, or NVIDIA's real ones (--real-device-numbers).
func testNode(n int, real bool) NodeState {
	node := NodeState{
		DriverRoot: testDriver,
		Overlay:    "/var/lib/nvmock/overlays/0123456789abcdef/driver",
		Library:    testDriver + "/usr/lib64/libnvidia-ml.so.1",
		NvidiaSMI:  testDriver + "/usr/bin/nvidia-smi",
		Snapshot:   testDriver + "/etc/nvmock/snapshot",
		OptedIn:    map[string]bool{"ml": true, "kube-system": true, "nvmock": true},
	}
	dev := func(name string, major, minor int64) DeviceNode {
		if !real {
			major, minor = 1, 3
		}
		return DeviceNode{Path: "/dev/" + name, Type: "c", Major: major, Minor: minor, FileMode: 0o666}
	}
	for i := 0; i < n; i++ {
		node.GPUs = append(node.GPUs, GPU{Index: i, UUID: snapshot.UUID("a100", testSeed, i), Node: dev("nvidia"+strconv.Itoa(i), 195, int64(i))})
	}
	node.Control = []DeviceNode{dev("nvidiactl", 195, 255), dev("nvidia-uvm", 511, 0), dev("nvidia-uvm-tools", 511, 1)}
	return node
}

func uuid(i int) string { return snapshot.UUID("a100", testSeed, i) }

var testConfig = Config{OwnNamespace: "nvmock"}

// volConfig reads device plugins' volume-mounts lists.
var volConfig = Config{OwnNamespace: "nvmock", AcceptVolumeMounts: true}

// withMounts is c with mounts at those container paths in its spec.
func withMounts(c Container, dsts ...string) Container {
	c.Mounts = append(slices.Clone(c.Mounts), dsts...)
	return c
}

// withNullMounts mounts /dev/null at each of dsts, as a device plugin's
// volume-mounts list does.
func withNullMounts(c Container, dsts ...string) Container {
	c = withMounts(c, dsts...)
	c.NullMounts = append(slices.Clone(c.NullMounts), dsts...)
	return c
}

func pod(ns string, ann ...string) Pod {
	p := Pod{Namespace: ns, Name: "train", Annotations: map[string]string{}}
	for i := 0; i+1 < len(ann); i += 2 {
		p.Annotations[ann[i]] = ann[i+1]
	}
	return p
}

var ctr = Container{Name: "trainer", Env: []string{"PATH=/usr/bin:/bin", "HOME=/root"}}

func withEnv(c Container, kv ...string) Container {
	c.Env = append(append([]string(nil), c.Env...), kv...)
	return c
}

var ro = []string{"bind", "ro", "nosuid", "nodev"}

// gave is the adjustment that gives the GPUs with the default library paths.
func gave(node NodeState, gpus ...int) Adjustment {
	a := Adjustment{
		GPUs: gpus,
		Mounts: []Mount{
			{Source: node.Library, Destination: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", Type: "bind", Options: ro},
			{Source: node.Library, Destination: "/usr/lib64/libnvidia-ml.so.1", Type: "bind", Options: ro},
			{Source: node.Snapshot, Destination: "/etc/nvmock/snapshot", Type: "bind", Options: ro},
			{Source: node.NvidiaSMI, Destination: "/usr/bin/nvidia-smi", Type: "bind", Options: ro},
		},
	}
	var uuids []string
	for _, i := range gpus {
		a.Devices = append(a.Devices, node.GPUs[i].Node)
		uuids = append(uuids, node.GPUs[i].UUID)
	}
	a.Devices = append(a.Devices, node.Control...)
	seen := map[[2]int64]bool{}
	for _, d := range a.Devices {
		if !seen[[2]int64{d.Major, d.Minor}] {
			seen[[2]int64{d.Major, d.Minor}] = true
			a.DeviceRules = append(a.DeviceRules, DeviceRule{Allow: true, Type: "c", Major: d.Major, Minor: d.Minor, Access: "rwm"})
		}
	}
	a.Env = []EnvVar{{VisibleDevicesEnv, strings.Join(uuids, ",")}, {SnapshotEnv, "/etc/nvmock/snapshot"}}
	return a
}

// voidDriver is driverOnly under NVIDIA's runtime: void for the runtime.
func voidDriver(n NodeState) Adjustment {
	a := driverOnly(n)
	a.Env[0].Value = "void"
	return a
}

// driverOnly is the adjustment that gives the driver without GPUs ("none").
func driverOnly(node NodeState) Adjustment {
	a := gave(node)
	a.Env[0].Value = "none"
	return a
}

func all(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func warned(msg string) Adjustment { return Adjustment{Warnings: []string{msg}} }

type decideCase struct {
	name string
	cfg  Config
	node NodeState
	pod  Pod
	ctr  Container
	want Adjustment
	ok   bool
	err  string // substring of the error; "" for none
}

func runDecide(t *testing.T, cases []decideCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok, err := Decide(c.cfg, c.node, c.pod, c.ctr)
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("error: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("error %v, want one containing %q", err, c.err)
			}
			if ok != c.ok {
				t.Errorf("ok = %v, want %v", ok, c.ok)
			}
			if d := diff(got, c.want); d != "" {
				t.Errorf("adjustment differs:\n%s", d)
			}
			checkInvariants(t, c.node, got, ok)
		})
	}
}

// checkInvariants holds for every answer: ok says there are edits; nothing
// touches the loader's environment but the umad shim's preload (static
// programs ignore it, glibc and musl ones load it: ibshim/umad's tests);
// mounts come only from the overlay; nothing carries NVIDIA's real major
// unless the overlay's nodes do.
func checkInvariants(t *testing.T, node NodeState, a Adjustment, ok bool) {
	t.Helper()
	if ok == a.Empty() {
		t.Errorf("ok = %v but Empty() = %v", ok, a.Empty())
	}
	for _, e := range a.Env {
		shim := e.Key == "LD_PRELOAD" && node.IB != nil && slices.Contains(strings.FieldsFunc(e.Value, func(r rune) bool { return r == ':' || r == ' ' }), ibShimPath)
		if strings.HasPrefix(e.Key, "LD_") && !shim {
			t.Errorf("sets %s: a musl or static image could break", e.Key)
		}
	}
	for _, m := range a.Mounts {
		ib := node.IB != nil && (m.Source == node.IB.Shim || m.Source == node.IB.Provider || m.Source == node.IB.SocketDir || m.Source == node.IB.DevDir)
		dev := strings.HasPrefix(m.Source, node.DriverRoot+"/dev/") // a user namespace's nodes
		if m.Source != node.Library && m.Source != node.NvidiaSMI && m.Source != node.Snapshot && !strings.HasPrefix(m.Source, "/sys/") && !ib && !dev {
			t.Errorf("mount source %s is not one of the overlay's files", m.Source)
		}
		if !strings.Contains(strings.Join(m.Options, ","), "ro") {
			t.Errorf("mount %s is not read-only", m.Destination)
		}
	}
	for _, d := range a.Devices {
		if d.Major == 195 && !node.hasNode(d) {
			t.Errorf("device %s has the real major without the overlay having it", d.Path)
		}
	}
}

func TestDecideWhoIsInjected(t *testing.T) {
	n8 := testNode(8, false)
	realDriver := testNode(8, false)
	realDriver.RealDriver = true
	allowlist := testConfig
	allowlist.Namespaces = []string{"ci"}
	star := testConfig
	star.Namespaces = []string{"*"}
	allowReal := testConfig
	allowReal.AllowWithRealDriver = true
	sandbox := ctr
	sandbox.Sandbox = true

	runDecide(t, []decideCase{
		{name: "a container in an opted-in namespace gets every GPU by default",
			cfg: testConfig, node: n8, pod: pod("ml"), ctr: ctr, want: gave(n8, all(8)...), ok: true},
		{name: "a container in a namespace nobody opted in is left untouched",
			cfg: testConfig, node: n8, pod: pod("web"), ctr: ctr},
		{name: "a namespace on the config allowlist is injected without a label",
			cfg: allowlist, node: n8, pod: pod("ci"), ctr: ctr, want: gave(n8, all(8)...), ok: true},
		{name: "the allowlist does not open other namespaces",
			cfg: allowlist, node: n8, pod: pod("web"), ctr: ctr},
		{name: "an allowlist of star injects any namespace",
			cfg: star, node: n8, pod: pod("web"), ctr: ctr, want: gave(n8, all(8)...), ok: true},
		{name: "kube-system is never injected even when labelled and allowlisted by star",
			cfg: star, node: n8, pod: pod("kube-system"), ctr: ctr},
		{name: "the plugin's own namespace is never injected even when labelled",
			cfg: star, node: n8, pod: pod("nvmock"), ctr: ctr},
		{name: "a pod annotated nvmock.io/inject=false is left untouched",
			cfg: testConfig, node: n8, pod: pod("ml", InjectAnnotation, "false"), ctr: ctr},
		{name: "the opt-out ignores case and spaces",
			cfg: testConfig, node: n8, pod: pod("ml", InjectAnnotation, " False "), ctr: ctr},
		{name: "an inject annotation of true changes nothing",
			cfg: testConfig, node: n8, pod: pod("ml", InjectAnnotation, "true"), ctr: ctr, want: gave(n8, all(8)...), ok: true},
		{name: "an inject annotation that is neither true nor false is refused, not read as true",
			cfg: testConfig, node: n8, pod: pod("ml", InjectAnnotation, "no"), ctr: ctr,
			err: `pod ml/train container trainer: annotation nvmock.io/inject="no" is neither true nor false`},
		{name: "so is an InfiniBand opt-out that says neither",
			cfg: testConfig, node: n8, pod: pod("ml", InfiniBandAnnotation, "nope"), ctr: ctr,
			err: `annotation nvmock.io/infiniband="nope" is neither true nor false`},
		{name: "a pod sandbox is never touched",
			cfg: testConfig, node: n8, pod: pod("ml"), ctr: sandbox},
		{name: "a node with a real NVIDIA driver injects nothing by default",
			cfg: testConfig, node: realDriver, pod: pod("ml"), ctr: ctr},
		{name: "a node with a real NVIDIA driver injects when the config allows it",
			cfg: allowReal, node: realDriver, pod: pod("ml"), ctr: ctr, want: gave(realDriver, all(8)...), ok: true},
		{name: "a node without an overlay leaves containers untouched",
			cfg: testConfig, node: NodeState{OptedIn: map[string]bool{"ml": true}}, pod: pod("ml"), ctr: ctr},
		{name: "a pod without a namespace is left untouched",
			cfg: star, node: n8, pod: pod(""), ctr: ctr},
	})
}

func TestDecideGivesTheOverlayPieces(t *testing.T) {
	// One answer written out in full, so the shape is pinned without gave().
	n8 := testNode(8, true)
	c := withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=1,3")
	got, ok, err := Decide(testConfig, n8, pod("ml"), c)
	if err != nil || !ok {
		t.Fatalf("Decide = ok %v, err %v", ok, err)
	}
	opts := []string{"bind", "ro", "nosuid", "nodev"}
	want := Adjustment{
		GPUs: []int{1, 3},
		Mounts: []Mount{
			{Source: "/var/lib/nvmock/driver/usr/lib64/libnvidia-ml.so.1", Destination: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", Type: "bind", Options: opts},
			{Source: "/var/lib/nvmock/driver/usr/lib64/libnvidia-ml.so.1", Destination: "/usr/lib64/libnvidia-ml.so.1", Type: "bind", Options: opts},
			{Source: "/var/lib/nvmock/driver/etc/nvmock/snapshot", Destination: "/etc/nvmock/snapshot", Type: "bind", Options: opts},
			{Source: "/var/lib/nvmock/driver/usr/bin/nvidia-smi", Destination: "/usr/bin/nvidia-smi", Type: "bind", Options: opts},
		},
		Devices: []DeviceNode{
			{Path: "/dev/nvidia1", Type: "c", Major: 195, Minor: 1, FileMode: 0o666},
			{Path: "/dev/nvidia3", Type: "c", Major: 195, Minor: 3, FileMode: 0o666},
			{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255, FileMode: 0o666},
			{Path: "/dev/nvidia-uvm", Type: "c", Major: 511, Minor: 0, FileMode: 0o666},
			{Path: "/dev/nvidia-uvm-tools", Type: "c", Major: 511, Minor: 1, FileMode: 0o666},
		},
		DeviceRules: []DeviceRule{
			{Allow: true, Type: "c", Major: 195, Minor: 1, Access: "rwm"},
			{Allow: true, Type: "c", Major: 195, Minor: 3, Access: "rwm"},
			{Allow: true, Type: "c", Major: 195, Minor: 255, Access: "rwm"},
			{Allow: true, Type: "c", Major: 511, Minor: 0, Access: "rwm"},
			{Allow: true, Type: "c", Major: 511, Minor: 1, Access: "rwm"},
		},
		Env: []EnvVar{
			{Key: "NVIDIA_VISIBLE_DEVICES", Value: uuid(1) + "," + uuid(3)},
			{Key: "NVMOCK_SNAPSHOT", Value: "/etc/nvmock/snapshot"},
		},
	}
	if d := diff(got, want); d != "" {
		t.Errorf("adjustment differs:\n%s", d)
	}
	// The inert overlay's nodes all share /dev/null's numbers: one rule.
	inert, _, _ := Decide(testConfig, testNode(8, false), pod("ml"), c)
	if want := []DeviceRule{{Allow: true, Type: "c", Major: 1, Minor: 3, Access: "rwm"}}; diff(inert.DeviceRules, want) != "" {
		t.Errorf("inert rules = %+v, want %+v", inert.DeviceRules, want)
	}
}

func TestDecideWhichGPUs(t *testing.T) {
	n8 := testNode(8, false)
	used := testNode(8, false)
	used.InUse = []int{2, 1, 0, 1, 0, 3, 0, 1}
	twins := testNode(2, false)
	twins.GPUs[0].UUID, twins.GPUs[1].UUID = "GPU-aaaa-0001", "GPU-aaaa-0002"
	defNone := testConfig
	defNone.DefaultGPUs = "none"
	defTwo := testConfig
	defTwo.DefaultGPUs = "2"
	defBad := testConfig
	defBad.DefaultGPUs = "0,9"
	ml := pod("ml")
	gpus := func(v string) Pod { return pod("ml", GPUsAnnotation, v) }
	cdi := func(names ...string) Container { c := ctr; c.CDIDevices = names; return c }
	devs := func(c Container, nodes ...DeviceNode) Container { c.Devices = nodes; return c }
	w := func(msg string) Adjustment {
		return warned("pod ml/train container trainer: " + msg + "; giving it no GPUs")
	}
	e := func(msg string) string { return "pod ml/train container trainer: " + msg }

	runDecide(t, []decideCase{
		// (a) the environment
		{name: "NVIDIA_VISIBLE_DEVICES with node indices gives those GPUs",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=3,1"), want: gave(n8, 1, 3), ok: true},
		{name: "NVIDIA_VISIBLE_DEVICES with UUIDs, hex in any case, gives those GPUs",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES="+uuid(5)+", "+strings.ToUpper(uuid(2))), want: gave(n8, 2, 5), ok: true},
		// Review: NVIDIA's runtime reads names with go-nvlib, which wants GPU-
		// as written, and takes CDI names in the variable (its cdi and jit-cdi
		// modes); nvmock refused those containers.
		{name: "a UUID that starts gpu- is refused, as NVIDIA's runtime refuses it",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES="+strings.ToLower(uuid(2))),
			err: e(`env NVIDIA_VISIBLE_DEVICES="` + strings.ToLower(uuid(2)) + `" names "` + strings.ToLower(uuid(2)) + `"; NVIDIA's runtime takes UUIDs that start GPU- in capitals`)},
		{name: "CDI names in NVIDIA_VISIBLE_DEVICES give their GPUs",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1,runtime.nvidia.com/gpu="+uuid(3)+",5"), want: gave(n8, 1, 3, 5), ok: true},
		{name: "nvidia.com/gpu=all in NVIDIA_VISIBLE_DEVICES gives every GPU",
			cfg: defNone, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all"), want: gave(n8, all(8)...), ok: true},
		// Review: the toolkit's image.CUDA.IsLegacy.
		{name: "a legacy CUDA image without the variable gets every GPU, as from NVIDIA's runtime",
			cfg: defNone, node: n8, pod: ml, ctr: withEnv(ctr, "CUDA_VERSION=8.0.61"), want: gave(n8, all(8)...), ok: true},
		{name: "a CUDA image that states its requirement does not",
			cfg: defNone, node: n8, pod: ml, ctr: withEnv(ctr, "CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4")},
		{name: "a CDI name of another kind is no GPU: the runtime gives it",
			cfg: testConfig, node: n8, pod: gpus("all"), ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=nvidia.com/imex-channel=0")},
		{name: "a CDI name of a GPU the node lacks is refused",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=9"),
			err: e(`env NVIDIA_VISIBLE_DEVICES="nvidia.com/gpu=9" names index "9"; the node has GPUs 0-7`)},
		// NVIDIA's runtime refuses a prefix and a profile name; nvmock's
		// annotation takes both.
		{name: "a UUID prefix in NVIDIA_VISIBLE_DEVICES is refused",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES="+uuid(2)[:14]),
			err: e(`env NVIDIA_VISIBLE_DEVICES="` + uuid(2)[:14] + `" names "` + uuid(2)[:14] + `", only the start of GPU 2's UUID; NVIDIA's runtime takes whole UUIDs`)},
		{name: "a MIG profile in NVIDIA_VISIBLE_DEVICES is refused",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=0,mig-1g.5gb"),
			err: e(`env NVIDIA_VISIBLE_DEVICES="0,mig-1g.5gb" has "mig-1g.5gb", a MIG profile, which only the annotation nvmock.io/gpus takes`)},
		{name: "NVIDIA_VISIBLE_DEVICES=all gives every GPU",
			cfg: defNone, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=all"), want: gave(n8, all(8)...), ok: true},
		{name: "NVIDIA_VISIBLE_DEVICES=void gives nothing at all",
			cfg: testConfig, node: n8, pod: gpus("all"), ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=void")},
		{name: "NVIDIA_VISIBLE_DEVICES=none gives the driver without GPUs",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=none"), want: driverOnly(n8), ok: true},
		// NVIDIA's toolkit: set but empty is void; all, none and void count
		// anywhere in a list, void first (image.NewVisibleDevices).
		{name: "an empty NVIDIA_VISIBLE_DEVICES is void, whatever the annotation",
			cfg: testConfig, node: n8, pod: gpus("0,"), ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=")},
		{name: "a blank NVIDIA_VISIBLE_DEVICES is void",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES= , ")},
		{name: "all in a list gives every GPU",
			cfg: defNone, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=0,all"), want: gave(n8, all(8)...), ok: true},
		{name: "none in a list gives the driver without GPUs",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=0, none"), want: driverOnly(n8), ok: true},
		{name: "void in a list wins over all",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=all,void")},
		{name: "the last NVIDIA_VISIBLE_DEVICES in the spec counts",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=4"), want: gave(n8, 4), ok: true},
		{name: "the environment wins over the annotation",
			cfg: testConfig, node: n8, pod: gpus("none"), ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=6"), want: gave(n8, 6), ok: true},
		{name: "NVIDIA_VISIBLE_DEVICES naming an index the node lacks is refused",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=1,9"),
			err: e(`env NVIDIA_VISIBLE_DEVICES="1,9" names index "9"; the node has GPUs 0-7`)},
		{name: "NVIDIA_VISIBLE_DEVICES naming an unknown UUID is refused",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=GPU-nope"),
			err: e(`env NVIDIA_VISIBLE_DEVICES="GPU-nope" names "GPU-nope", no GPU of this node`)},
		{name: "NVIDIA_VISIBLE_DEVICES with a MIG device the node lacks is refused",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=0:1"),
			err: e(`env NVIDIA_VISIBLE_DEVICES="0:1" names MIG device "0:1", which this node does not have`)},
		{name: "a UUID prefix shared by two GPUs is refused",
			cfg: testConfig, node: twins, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=GPU-aaaa"),
			err: e(`env NVIDIA_VISIBLE_DEVICES="GPU-aaaa" names "GPU-aaaa", a prefix of more than one GPU's UUID`)},
		{name: "a bare GPU- names no GPU and is refused",
			cfg: testConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=GPU-"),
			err: e(`env NVIDIA_VISIBLE_DEVICES="GPU-" names "GPU-", no GPU of this node`)},

		// An image's all (CUDA images set it) gives way to the annotation,
		// as to a device plugin's list (review: the annotation was ignored).
		{name: "the annotation wins over an image's all",
			cfg: testConfig, node: n8, pod: gpus("2"), ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=all"), want: gave(n8, 0, 1), ok: true},
		{name: "the annotation's none wins over an image's all",
			cfg: testConfig, node: n8, pod: gpus("none"), ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=all"), want: driverOnly(n8), ok: true},
		{name: "an image's all without the annotation is all",
			cfg: defTwo, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=all"), want: gave(n8, all(8)...), ok: true},

		// A device plugin's volume-mounts list, as NVIDIA's runtime reads it
		// with accept-nvidia-visible-devices-as-volume-mounts.
		{name: "mounts under the device list directory name the GPUs",
			cfg: volConfig, node: n8, pod: gpus("all"), ctr: withMounts(withNullMounts(withEnv(ctr, "NVIDIA_VISIBLE_DEVICES="+DeviceListRoot),
				DeviceListRoot+"/"+uuid(3), DeviceListRoot+"/1"), "/data"), want: gave(n8, 1, 3), ok: true},
		{name: "CDI names in the device list, in both forms",
			cfg: volConfig, node: n8, pod: ml, ctr: withNullMounts(withEnv(ctr, "NVIDIA_VISIBLE_DEVICES="+DeviceListRoot),
				DeviceListRoot+"/cdi/nvidia.com/gpu/2", DeviceListRoot+"/cdi/nvidia.com/gpu=5", DeviceListRoot+"/imex/channel0"), want: gave(n8, 2, 5), ok: true},
		{name: "void in the device list falls back to the variable",
			cfg: volConfig, node: n8, pod: ml, ctr: withNullMounts(withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=4"), DeviceListRoot+"/void", DeviceListRoot+"/1"),
			want: gave(n8, 4), ok: true},
		// Review: NVIDIA's runtime reads only mounts of /dev/null as the list.
		{name: "a file mounted under the device list directory names no device",
			cfg: volConfig, node: n8, pod: ml, ctr: withMounts(withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=1"), DeviceListRoot+"/config.yaml"),
			want: gave(n8, 1), ok: true},
		{name: "the device list directory with nothing mounted under it is refused",
			cfg: volConfig, node: n8, pod: ml, ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES="+DeviceListRoot),
			err: e(`env NVIDIA_VISIBLE_DEVICES="/var/run/nvidia-container-devices" names the volume-mounts device list, but no device is mounted under it`)},
		{name: "a device list naming a GPU the node lacks is refused",
			cfg: volConfig, node: n8, pod: ml, ctr: withNullMounts(ctr, DeviceListRoot+"/9"),
			err: e(`mounts under /var/run/nvidia-container-devices name "9": names index "9"; the node has GPUs 0-7`)},

		// Without it (its default) the mounts are no list and the variable
		// names a device no node has: the container fails.
		{name: "a volume-mounts list on a node that does not read them is refused",
			cfg: testConfig, node: n8, pod: ml, ctr: withNullMounts(withEnv(ctr, "NVIDIA_VISIBLE_DEVICES="+DeviceListRoot), DeviceListRoot+"/1"),
			err: e(`env NVIDIA_VISIBLE_DEVICES="/var/run/nvidia-container-devices" names a device plugin's volume-mounts list, which this node does not read (NVIDIA's runtime reads it only with accept-nvidia-visible-devices-as-volume-mounts; here the chart's injection.acceptVolumeMounts, nvmock nri --accept-volume-mounts)`)},
		{name: "mounts under the device list directory are no list on a node that does not read them",
			cfg: testConfig, node: n8, pod: ml, ctr: withNullMounts(withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=4"), DeviceListRoot+"/1"),
			want: gave(n8, 4), ok: true},

		// (a) CDI devices and device nodes already in the spec
		{name: "a CDI nvidia.com/gpu device by index gives that GPU despite the spec's void",
			cfg: testConfig, node: n8, pod: gpus("all"), ctr: withEnv(cdi("nvidia.com/gpu=0"), "NVIDIA_VISIBLE_DEVICES=void"), want: gave(n8, 0), ok: true},
		{name: "CDI nvmock.io/gpu devices by UUID give those GPUs",
			cfg: testConfig, node: n8, pod: ml, ctr: cdi("nvmock.io/gpu="+uuid(7), "nvmock.io/gpu=2"), want: gave(n8, 2, 7), ok: true},
		{name: "a CDI all device gives every GPU",
			cfg: defNone, node: n8, pod: ml, ctr: cdi("nvmock.io/gpu=all"), want: gave(n8, all(8)...), ok: true},
		{name: "CDI devices of other kinds are not GPUs and fall through",
			cfg: testConfig, node: n8, pod: gpus("1"), ctr: cdi("example.com/nic=eth1"), want: gave(n8, 0), ok: true},
		{name: "a CDI GPU device naming no GPU of the node is refused",
			cfg: testConfig, node: n8, pod: ml, ctr: cdi("nvidia.com/gpu=gpu0"),
			err: e(`CDI device "nvidia.com/gpu=gpu0" has "gpu0", neither a GPU index nor a UUID`)},
		{name: "a /dev/nvidia node from a device plugin gives that GPU with the overlay's numbers",
			cfg: testConfig, node: n8, pod: ml, ctr: devs(ctr, DeviceNode{Path: "/dev/nvidia2", Type: "c", Major: 195, Minor: 2}), want: gave(n8, 2), ok: true},
		{name: "device nodes and CDI devices in the spec add up",
			cfg: testConfig, node: n8, pod: ml, ctr: devs(cdi("nvidia.com/gpu=5"), DeviceNode{Path: "/dev/nvidia2"}), want: gave(n8, 2, 5), ok: true},
		{name: "control nodes in the spec are not GPUs and fall through",
			cfg: testConfig, node: n8, pod: gpus("3,"), ctr: devs(ctr, DeviceNode{Path: "/dev/nvidiactl"}, DeviceNode{Path: "/dev/nvidia-uvm"}), want: gave(n8, 3), ok: true},
		{name: "a /dev/nvidia node the overlay lacks is refused",
			cfg: testConfig, node: n8, pod: ml, ctr: devs(ctr, DeviceNode{Path: "/dev/nvidia12"}),
			err: e(`device node "/dev/nvidia12" is no GPU of this node`)},

		// (b) the annotation
		{name: "the annotation all gives every GPU over a default of none",
			cfg: defNone, node: n8, pod: gpus("all"), ctr: ctr, want: gave(n8, all(8)...), ok: true},
		{name: "the annotation none gives the driver without GPUs",
			cfg: testConfig, node: n8, pod: gpus("none"), ctr: ctr, want: driverOnly(n8), ok: true},
		{name: "a count of 0 gives nothing at all",
			cfg: testConfig, node: n8, pod: gpus("0"), ctr: ctr},
		{name: "a count picks the least used GPUs, lower index on a tie",
			cfg: testConfig, node: used, pod: gpus("3"), ctr: ctr, want: gave(used, 2, 4, 6), ok: true},
		{name: "a count on an idle node picks the first GPUs",
			cfg: testConfig, node: n8, pod: gpus(" 2 "), ctr: ctr, want: gave(n8, 0, 1), ok: true},
		{name: "a count of every GPU gives them all",
			cfg: testConfig, node: used, pod: gpus("8"), ctr: ctr, want: gave(used, all(8)...), ok: true},
		{name: "a list of indices and UUIDs gives those GPUs once each",
			cfg: testConfig, node: n8, pod: gpus("5, 0," + uuid(5)), ctr: ctr, want: gave(n8, 0, 5), ok: true},
		{name: "a single UUID gives that GPU",
			cfg: testConfig, node: n8, pod: gpus(uuid(4)), ctr: ctr, want: gave(n8, 4), ok: true},
		{name: "a unique UUID prefix in any case gives that GPU",
			cfg: testConfig, node: n8, pod: gpus(strings.ToLower(uuid(3)[:14]) + "," + strings.ToUpper(uuid(6))), ctr: ctr, want: gave(n8, 3, 6), ok: true},
		{name: "a single index with a trailing comma gives that GPU",
			cfg: testConfig, node: n8, pod: gpus("7,"), ctr: ctr, want: gave(n8, 7), ok: true},
		{name: "an empty annotation falls through to the default",
			cfg: defTwo, node: n8, pod: gpus(""), ctr: ctr, want: gave(n8, 0, 1), ok: true},
		{name: "a count above the node's GPUs is refused",
			cfg: testConfig, node: n8, pod: gpus("9"), ctr: ctr,
			err: e(`annotation nvmock.io/gpus="9" asks for more GPUs than the node's 8`)},
		{name: "a negative count is refused",
			cfg: testConfig, node: n8, pod: gpus("-1"), ctr: ctr,
			err: e(`annotation nvmock.io/gpus="-1" is not all, none, a count or a comma list of GPU indices and UUIDs, MIG devices and mig-<profile>`)},
		{name: "a word is refused",
			cfg: testConfig, node: n8, pod: gpus("lots"), ctr: ctr,
			err: e(`annotation nvmock.io/gpus="lots" is not all, none, a count or a comma list of GPU indices and UUIDs, MIG devices and mig-<profile>`)},
		{name: "a path never becomes a path and is refused",
			cfg: testConfig, node: n8, pod: gpus("../../etc/passwd,0"), ctr: ctr,
			err: e(`annotation nvmock.io/gpus="../../etc/passwd,0" has "../../etc/passwd", neither a GPU index nor a UUID`)},
		{name: "a list of nothing but commas is refused",
			cfg: testConfig, node: n8, pod: gpus(",,"), ctr: ctr,
			err: e(`annotation nvmock.io/gpus=",," names no GPU`)},
		{name: "a huge count is refused",
			cfg: testConfig, node: n8, pod: gpus("99999999999999999999999"), ctr: ctr,
			err: e(`annotation nvmock.io/gpus="99999999999999999999999" asks for more GPUs than the node's 8`)},
		{name: "a very long bad value is cut in the refusal",
			cfg: testConfig, node: n8, pod: gpus(strings.Repeat("x", 100)), ctr: ctr,
			err: e(`annotation nvmock.io/gpus="` + strings.Repeat("x", 64) + `"... is not all, none, a count or a comma list of GPU indices and UUIDs, MIG devices and mig-<profile>`)},

		// (c) the default
		{name: "a default of none leaves containers without a request untouched",
			cfg: defNone, node: n8, pod: ml, ctr: ctr},
		{name: "a default count picks GPUs like the annotation",
			cfg: defTwo, node: used, pod: ml, ctr: ctr, want: gave(used, 2, 4), ok: true},
		{name: "a default the node cannot meet gives no GPUs with a warning",
			cfg: defBad, node: n8, pod: ml, ctr: ctr,
			want: w(`config default GPUs "0,9" names index "9"; the node has GPUs 0-7`)},
	})
}

func TestDecideEnvironmentAndLibraryPaths(t *testing.T) {
	n2 := testNode(2, false)
	custom := testConfig
	custom.LibraryPaths = []string{"/usr/lib64/libnvidia-ml.so.1", "/opt/nv/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"}
	ownSnap := gave(n2, 0, 1)
	ownSnap.Env = ownSnap.Env[:1]
	customWant := gave(n2, 0, 1)
	customWant.Mounts = []Mount{
		{Source: n2.Library, Destination: "/usr/lib64/libnvidia-ml.so.1", Type: "bind", Options: ro},
		{Source: n2.Library, Destination: "/opt/nv/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", Type: "bind", Options: ro},
		{Source: n2.Snapshot, Destination: "/etc/nvmock/snapshot", Type: "bind", Options: ro},
		{Source: n2.Snapshot, Destination: "/opt/nv/etc/nvmock/snapshot", Type: "bind", Options: ro},
		{Source: n2.NvidiaSMI, Destination: "/usr/bin/nvidia-smi", Type: "bind", Options: ro},
	}
	runDecide(t, []decideCase{
		{name: "a container's own NVMOCK_SNAPSHOT is kept",
			cfg: testConfig, node: n2, pod: pod("ml"), ctr: withEnv(ctr, "NVMOCK_SNAPSHOT=/data/h100"), want: ownSnap, ok: true},
		{name: "each configured library path gets the snapshot where the library looks",
			cfg: custom, node: n2, pod: pod("ml"), ctr: ctr, want: customWant, ok: true},
	})
}

func TestDecideNoneGivesTheDriverWithoutGPUs(t *testing.T) {
	n8 := testNode(8, true)
	defNone := testConfig
	defNone.DefaultGPUs = "none"
	ctl := ctr
	ctl.Devices = []DeviceNode{n8.Control[0]}
	ctlWant := driverOnly(n8)
	ctlWant.Devices = n8.Control[1:]
	ctlWant.DeviceRules = ctlWant.DeviceRules[1:]

	runDecide(t, []decideCase{
		{name: "the annotation none gives the library, nvidia-smi and control nodes but no GPU node",
			cfg: testConfig, node: n8, pod: pod("ml", GPUsAnnotation, " none "), ctr: ctr, want: driverOnly(n8), ok: true},
		{name: "NVIDIA_VISIBLE_DEVICES=none gives the driver even when the annotation asks for all",
			cfg: testConfig, node: n8, pod: pod("ml", GPUsAnnotation, "all"), ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=none"), want: driverOnly(n8), ok: true},
		{name: "NVIDIA_VISIBLE_DEVICES=void leaves the container untouched",
			cfg: testConfig, node: n8, pod: pod("ml", GPUsAnnotation, "none"), ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=void")},
		{name: "a default of none leaves a container that asked for nothing untouched",
			cfg: defNone, node: n8, pod: pod("ml"), ctr: ctr},
		{name: "a CDI GPU in the spec wins over the annotation none",
			cfg: testConfig, node: n8, pod: pod("ml", GPUsAnnotation, "none"), ctr: Container{Name: "trainer", CDIDevices: []string{"nvidia.com/gpu=2"}}, want: gave(n8, 2), ok: true},
		{name: "the driver alone adds only the control nodes the spec lacks",
			cfg: testConfig, node: n8, pod: pod("ml", GPUsAnnotation, "none"), ctr: ctl, want: ctlWant, ok: true},
	})
}

// cdiSpec is a container as containerd creates it after applying the CDI
// spec `nvidia-ctk cdi generate` writes for GPU 1: its libraries,
// nvidia-smi, /dev/nvidia1 and the control nodes, NVIDIA_VISIBLE_DEVICES=void
// (and a hook linking libnvidia-ml.so.1, which the spec does not show).
func cdiSpec(node NodeState) Container {
	return Container{
		Name:       "trainer",
		Env:        []string{"PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=void"},
		CDIDevices: []string{"nvidia.com/gpu=1"},
		Devices:    []DeviceNode{node.GPUs[1].Node, node.Control[0], node.Control[1], node.Control[2]},
		Mounts: []string{"/proc", "/dev", "/dev/pts", "/sys", "/etc/hostname", "/etc/resolv.conf",
			"/usr/lib64/libnvidia-ml.so.535.261.03", "/usr/lib64/libcuda.so.535.261.03", "/usr/bin/nvidia-smi"},
	}
}

func TestDecideAddsOnlyWhatTheSpecLacks(t *testing.T) {
	n8 := testNode(8, true)
	ml := pod("ml")
	mounts := func(c Container, m ...string) Container {
		c.Mounts = append(append([]string(nil), c.Mounts...), m...)
		return c
	}

	cdiWant := Adjustment{
		GPUs:   []int{1},
		Mounts: []Mount{{Source: n8.Snapshot, Destination: "/etc/nvmock/snapshot", Type: "bind", Options: ro}},
		Env:    []EnvVar{{VisibleDevicesEnv, uuid(1)}, {SnapshotEnv, "/etc/nvmock/snapshot"}},
	}
	optLib := cdiSpec(n8)
	optLib.Mounts = []string{"/opt/nvidia/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"}
	optWant := gave(n8, 1)
	optWant.Mounts = []Mount{{Source: n8.Snapshot, Destination: "/opt/nvidia/etc/nvmock/snapshot", Type: "bind", Options: ro},
		{Source: n8.NvidiaSMI, Destination: "/usr/bin/nvidia-smi", Type: "bind", Options: ro}}
	optWant.Devices, optWant.DeviceRules = nil, nil
	optWant.Env[1].Value = "/opt/nvidia/etc/nvmock/snapshot"

	partial := ctr
	partial.Devices = []DeviceNode{n8.Control[0], n8.Control[1]}
	partialWant := gave(n8, 0)
	partialWant.Devices = []DeviceNode{n8.GPUs[0].Node, n8.Control[2]}
	partialWant.DeviceRules = []DeviceRule{{Allow: true, Type: "c", Major: 195, Minor: 0, Access: "rwm"}, {Allow: true, Type: "c", Major: 511, Minor: 1, Access: "rwm"}}

	smiOnly := gave(n8, 0)
	smiOnly.Mounts = smiOnly.Mounts[:3]
	snapThere := gave(n8, 0)
	snapThere.Mounts = snapThere.Mounts[3:]
	ownPath := gave(n8, 0)
	ownPath.Mounts = ownPath.Mounts[2:]
	elsewhere := gave(n8, 0)

	runDecide(t, []decideCase{
		{name: "a CDI spec from nvidia-ctk gets only the snapshot beside its library and the GPU's UUID over void",
			cfg: testConfig, node: n8, pod: ml, ctr: cdiSpec(n8), want: cdiWant, ok: true},
		{name: "a spec's library elsewhere in a recognised tree gets the snapshot where that library looks",
			cfg: testConfig, node: n8, pod: ml, ctr: optLib, want: optWant, ok: true},
		{name: "a spec with some control nodes gets only the missing nodes and their rules",
			cfg: testConfig, node: n8, pod: pod("ml", GPUsAnnotation, "0,"), ctr: partial, want: partialWant, ok: true},
		{name: "a spec mounting nvidia-smi gets everything but nvidia-smi",
			cfg: testConfig, node: n8, pod: pod("ml", GPUsAnnotation, "0,"), ctr: mounts(ctr, "/usr/bin/nvidia-smi"), want: smiOnly, ok: true},
		{name: "a spec mounting the snapshot and a library gets neither again",
			cfg: testConfig, node: n8, pod: pod("ml", GPUsAnnotation, "0,"), ctr: mounts(ctr, "/etc/nvmock/snapshot", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so"), want: snapThere, ok: true},
		{name: "a spec mounting libnvidia-ml.so.1 at one of our paths gets no library mount",
			cfg: testConfig, node: n8, pod: pod("ml", GPUsAnnotation, "0,"), ctr: mounts(ctr, "/usr/lib64/libnvidia-ml.so.1"), want: ownPath, ok: true},
		{name: "a library where the mock cannot find its snapshot does not count",
			cfg: testConfig, node: n8, pod: pod("ml", GPUsAnnotation, "0,"), ctr: mounts(ctr, "/usr/local/nvidia/lib/libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.sox"), want: elsewhere, ok: true},
	})
}

// infiniband is an extension as a later InfiniBand package would write one.
var infiniband = Extension{Name: "infiniband", Apply: func(in Input, adj *Adjustment) error {
	uverbs := DeviceNode{Path: "/dev/infiniband/uverbs0", Type: "c", Major: 231, Minor: 192, FileMode: 0o666}
	adj.Devices = append(adj.Devices, uverbs)
	adj.DeviceRules = append(adj.DeviceRules, DeviceRule{Allow: true, Type: "c", Major: 231, Minor: 192, Access: "rwm"})
	adj.Env = append(adj.Env, EnvVar{"NVMOCK_IB_GPUS", strconv.Itoa(len(in.GPUs))})
	return nil
}}

func TestDecideExtensions(t *testing.T) {
	n8 := testNode(8, false)
	ib := testConfig
	ib.Extensions = []Extension{infiniband}
	failing := testConfig
	failing.Extensions = []Extension{infiniband, {Name: "pcie", Apply: func(Input, *Adjustment) error { return errors.New("no sysfs") }}}
	fakeReal := testConfig
	fakeReal.Extensions = []Extension{{Name: "bad", Apply: func(_ Input, adj *Adjustment) error {
		adj.Devices = append(adj.Devices, DeviceNode{Path: "/dev/nvidia9", Type: "c", Major: 195, Minor: 9})
		return nil
	}}}
	fakeRule := testConfig
	fakeRule.Extensions = []Extension{{Name: "bad", Apply: func(_ Input, adj *Adjustment) error {
		adj.DeviceRules = append(adj.DeviceRules, DeviceRule{Allow: true, Type: "c", Major: 195, Minor: 0, Access: "rwm"})
		return nil
	}}}
	withIB := gave(n8, 0, 1)
	withIB.Devices = append(withIB.Devices, DeviceNode{Path: "/dev/infiniband/uverbs0", Type: "c", Major: 231, Minor: 192, FileMode: 0o666})
	withIB.DeviceRules = append(withIB.DeviceRules, DeviceRule{Allow: true, Type: "c", Major: 231, Minor: 192, Access: "rwm"})
	withIB.Env = append(withIB.Env, EnvVar{"NVMOCK_IB_GPUS", "2"})

	runDecide(t, []decideCase{
		{name: "an extension adds its edits after the GPU edits and sees the chosen GPUs",
			cfg: ib, node: n8, pod: pod("ml", GPUsAnnotation, "2"), ctr: ctr, want: withIB, ok: true},
		{name: "an extension is not run for a container given the driver alone",
			cfg: ib, node: n8, pod: pod("ml", GPUsAnnotation, "none"), ctr: ctr, want: driverOnly(n8), ok: true},
		{name: "an extension is not run for a container given nothing",
			cfg: ib, node: n8, pod: pod("ml"), ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=void")},
		{name: "a failing extension leaves the container untouched with an error",
			cfg: failing, node: n8, pod: pod("ml"), ctr: ctr, err: "pod ml/train container trainer: extension pcie: no sysfs"},
		{name: "an extension adding NVIDIA's real major the overlay lacks is refused",
			cfg: fakeReal, node: n8, pod: pod("ml"), ctr: ctr, err: "device /dev/nvidia9 has NVIDIA's real major 195:9"},
		{name: "an extension allowing NVIDIA's real major the overlay lacks is refused",
			cfg: fakeRule, node: n8, pod: pod("ml"), ctr: ctr, err: "device rule allows NVIDIA's real major 195:0"},
	})
}

func TestDecideRefusesAnUnsafeNodeState(t *testing.T) {
	noCtl := testNode(2, false)
	noCtl.Control = noCtl.Control[1:]
	badUse := testNode(2, false)
	badUse.InUse = []int{1}
	noLib := testNode(2, false)
	noLib.Library = ""
	relSMI := testNode(2, false)
	relSMI.NvidiaSMI = "driver/usr/bin/nvidia-smi"
	noUUID := testNode(2, false)
	noUUID.GPUs[1].UUID = ""
	gap := testNode(2, false)
	gap.GPUs = gap.GPUs[1:]
	noGPUs := testNode(0, false)
	runDecide(t, []decideCase{
		{name: "a node without nvidiactl is refused: the library would show every GPU",
			cfg: testConfig, node: noCtl, pod: pod("ml"), ctr: ctr, err: "no /dev/nvidiactl control node"},
		{name: "use counts for the wrong number of GPUs are refused",
			cfg: testConfig, node: badUse, pod: pod("ml"), ctr: ctr, err: "use counts for 1 GPUs, the node has 2"},
		{name: "a node without the library's host path is refused",
			cfg: testConfig, node: noLib, pod: pod("ml"), ctr: ctr, err: "no absolute host path for the overlay's library"},
		{name: "a relative host path is refused",
			cfg: testConfig, node: relSMI, pod: pod("ml"), ctr: ctr, err: "overlay's nvidia-smi"},
		{name: "a GPU without a UUID is refused",
			cfg: testConfig, node: noUUID, pod: pod("ml"), ctr: ctr, err: "GPU 1: want index 1, a UUID"},
		{name: "GPUs out of index order are refused",
			cfg: testConfig, node: gap, pod: pod("ml"), ctr: ctr, err: "GPU 0: want index 0"},
		{name: "an overlay without GPUs is refused",
			cfg: testConfig, node: noGPUs, pod: pod("ml"), ctr: ctr, err: "has no GPUs"},
		{name: "an unsafe node state does not matter to a container that is not injected",
			cfg: testConfig, node: noCtl, pod: pod("web"), ctr: ctr},
	})
}

func TestDecideDoesNotShareStateBetweenCalls(t *testing.T) {
	n8 := testNode(8, false)
	a, _, _ := Decide(testConfig, n8, pod("ml"), ctr)
	a.Mounts[0].Options = append(a.Mounts[0].Options, "rw")
	a.Devices[0].Path = "/dev/changed"
	b, _, _ := Decide(testConfig, n8, pod("ml"), ctr)
	if d := diff(b, gave(n8, all(8)...)); d != "" {
		t.Errorf("changing one answer changed the next:\n%s", d)
	}
	if n8.GPUs[0].Node.Path != "/dev/nvidia0" {
		t.Errorf("changing an answer changed the node state")
	}
}

func TestSnapshotPathForMirrorsTheLibrary(t *testing.T) {
	for _, c := range []struct {
		lib, want string
		ok        bool
	}{
		{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/etc/nvmock/snapshot", true},
		{"/usr/lib64/libnvidia-ml.so.1", "/etc/nvmock/snapshot", true},
		{"/usr/lib/libnvidia-ml.so.1", "/etc/nvmock/snapshot", true},
		{"/lib64/libnvidia-ml.so.1", "/etc/nvmock/snapshot", true},
		{"/var/lib/nvmock/driver/usr/lib64/libnvidia-ml.so.1", "/var/lib/nvmock/driver/etc/nvmock/snapshot", true},
		{"/usr/local/nvmock/lib/libnvidia-ml.so.1", "", false},
		{"libnvidia-ml.so.1", "", false},
	} {
		got, ok := SnapshotPathFor(c.lib)
		if got != c.want || ok != c.ok {
			t.Errorf("SnapshotPathFor(%q) = %q, %v; want %q, %v", c.lib, got, ok, c.want, c.ok)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want []string // substrings; none for a valid config
	}{
		{name: "the zero config is valid", cfg: Config{}},
		{name: "a full config is valid", cfg: Config{Namespaces: []string{"*"}, OwnNamespace: "nvmock", DefaultGPUs: "0, GPU-abc",
			LibraryPaths: []string{"/usr/lib64/libnvidia-ml.so.1"}, Extensions: []Extension{infiniband}}},
		{name: "every problem is named at once", cfg: Config{Namespaces: []string{""}, DefaultGPUs: "lots",
			LibraryPaths: []string{"usr/lib64/libnvidia-ml.so.1", "/usr/local/lib/libnvidia-ml.so.1", "/usr/lib64/../lib64/libnvidia-ml.so.1"},
			Extensions:   []Extension{{Name: "x"}}},
			want: []string{`default GPUs: "lots" is not all`, "namespaces[0]: empty", `library paths[0]: "usr/lib64`, `library paths[1]: "/usr/local/lib/libnvidia-ml.so.1" is not in a directory`,
				"library paths[2]", "extensions[0]: needs a name and an Apply function"}},
		{name: "a default list with a bad entry is refused", cfg: Config{DefaultGPUs: "0,x"}, want: []string{`entry "x"`}},
		{name: "an empty library path list is refused", cfg: Config{LibraryPaths: []string{}}, want: []string{"library paths: empty"}},
		// Review: NRI refused the two mounts at one place in every GPU container.
		{name: "a library path named twice is refused", cfg: Config{LibraryPaths: []string{"/usr/lib64/libnvidia-ml.so.1", "/lib64/libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1"}},
			want: []string{`library paths[2]: "/usr/lib64/libnvidia-ml.so.1" repeats library paths[0]`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate passed; want %q", c.want)
			}
			for _, s := range c.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error lacks %q:\n%v", s, err)
				}
			}
		})
	}
}

// BenchmarkDecide is one container of an annotated pod, with an ordinary
// environment, on an 8-GPU node with half its GPUs in use.
func BenchmarkDecide(b *testing.B) {
	node := testNode(8, true)
	node.InUse = []int{1, 1, 0, 1, 0, 1, 0, 1}
	node.Sys, node.Hook = "/var/lib/nvmock/overlays/0123456789abcdef/sysfs/sys", "/var/lib/nvmock/overlays/0123456789abcdef/bin/nvmock-hook"
	for i := 0; i < 50; i++ {
		node.OptedIn["ns"+strconv.Itoa(i)] = true
	}
	p := pod("ml", GPUsAnnotation, "2", "app.kubernetes.io/name", "trainer", "kubectl.kubernetes.io/last-applied-configuration", strings.Repeat("x", 500))
	c := withEnv(ctr, "LANG=C.UTF-8", "PYTHONUNBUFFERED=1", "KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443", "TERM=xterm")
	cfg := Config{OwnNamespace: "nvmock", Extensions: nil}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := Decide(cfg, node, p, c); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkDecideAll gives all 8 GPUs by default (the largest answer).
func BenchmarkDecideAll(b *testing.B) {
	node := testNode(8, true)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := Decide(testConfig, node, pod("ml"), ctr); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// Under NVIDIA's runtime (a RuntimeClass handler it is registered as, in CDI
// mode with a spec made from this overlay), the runtime gives a container
// that names GPUs its devices, library and nvidia-smi after NRI has run; the
// plugin adds only what the runtime cannot, the snapshot, so every edit is
// in the spec once.
func TestDecideLeavesGPUsToNvidiasRuntime(t *testing.T) {
	n8 := testNode(8, true)
	snap := Mount{Source: n8.Snapshot, Destination: "/etc/nvmock/snapshot", Type: "bind", Options: ro}
	nvidia := func(p Pod) Pod { p.RuntimeHandler = "nvidia"; return p }
	for _, c := range []struct {
		name   string
		cfg    Config
		pod    Pod
		ctr    Container
		want   Adjustment
		wantOK bool
	}{
		{"a device plugin's GPU under the nvidia handler gets only the snapshot",
			testConfig, nvidia(pod("ml")), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES="+uuid(2)),
			Adjustment{GPUs: []int{2}, Mounts: []Mount{snap}}, true},
		{"indices name the GPUs the runtime will give",
			testConfig, nvidia(pod("ml")), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=1,5"),
			Adjustment{GPUs: []int{1, 5}, Mounts: []Mount{snap}}, true},
		{"none under the nvidia handler: the driver from the runtime, the snapshot from the plugin",
			testConfig, nvidia(pod("ml")), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=none"),
			Adjustment{Mounts: []Mount{snap}}, true},
		{"a snapshot already mounted is not mounted again",
			testConfig, nvidia(pod("ml")), Container{Name: "c", Env: []string{"NVIDIA_VISIBLE_DEVICES=0"}, Mounts: []string{"/etc/nvmock/snapshot"}},
			Adjustment{GPUs: []int{0}}, true},
		// Review: the plugin gave everything and set the variable, which the
		// runtime then read and gave all again.
		{"the annotation's GPUs are named for the runtime to give",
			testConfig, nvidia(pod("ml", GPUsAnnotation, "2")), ctr,
			Adjustment{GPUs: []int{0, 1}, Mounts: []Mount{snap}, Env: []EnvVar{{Key: VisibleDevicesEnv, Value: uuid(0) + "," + uuid(1)}}}, true},
		{"the default's too",
			Config{OwnNamespace: "nvmock", DefaultGPUs: "1"}, Pod{Namespace: "ml", Name: "t", RuntimeHandler: "nvidia"}, ctr,
			Adjustment{GPUs: []int{0}, Mounts: []Mount{snap}, Env: []EnvVar{{Key: VisibleDevicesEnv, Value: uuid(0)}}}, true},
		// void, not none: the runtime knows no none device in CDI mode,
		// and an image's all would give every GPU (review).
		{"the annotation's none is the plugin's driver, and void for the runtime",
			testConfig, nvidia(pod("ml", GPUsAnnotation, "none")), ctr, voidDriver(n8), true},
		{"the annotation's none over an image's all (e2e: the runtime got none)",
			testConfig, nvidia(pod("ml", GPUsAnnotation, "none")), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=all"), voidDriver(n8), true},
		{"the annotation's count over an image's all",
			testConfig, nvidia(pod("ml", GPUsAnnotation, "1")), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=all"),
			Adjustment{GPUs: []int{0}, Mounts: []Mount{snap}, Env: []EnvVar{{Key: VisibleDevicesEnv, Value: uuid(0)}}}, true},
		{"the annotation's all stays all for the runtime, which then gives the MIG devices too",
			testConfig, nvidia(pod("ml", GPUsAnnotation, "all")), ctr,
			Adjustment{GPUs: all(8), Mounts: []Mount{snap}, Env: []EnvVar{{Key: VisibleDevicesEnv, Value: "all"}}}, true},
		{"a legacy CUDA image's all is the runtime's to give",
			testConfig, nvidia(pod("ml")), withEnv(ctr, "CUDA_VERSION=8.0.61"),
			Adjustment{GPUs: all(8), Mounts: []Mount{snap}}, true},
		// Its own setting decides, which the plugin cannot see: the list is
		// read, and the runtime left to judge it (review: refused).
		{"a volume-mounts list is the runtime's to read, whatever the plugin's setting",
			testConfig, nvidia(pod("ml")), withNullMounts(withEnv(ctr, "NVIDIA_VISIBLE_DEVICES="+DeviceListRoot), DeviceListRoot+"/1"),
			Adjustment{GPUs: []int{1}, Mounts: []Mount{snap}}, true},
		{"void under the nvidia handler leaves the container untouched",
			testConfig, nvidia(pod("ml")), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=void"), Adjustment{}, false},
		{"another handler is the plugin's to equip",
			testConfig, Pod{Namespace: "ml", Name: "train", RuntimeHandler: "runc"}, withEnv(ctr, "NVIDIA_VISIBLE_DEVICES="+uuid(2)), gave(n8, 2), true},
		{"a handler configured as NVIDIA's is deferred to",
			Config{OwnNamespace: "nvmock", NvidiaRuntimeHandlers: []string{"nvidia-cdi"}}, Pod{Namespace: "ml", Name: "t", RuntimeHandler: "nvidia-cdi"},
			withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=3"), Adjustment{GPUs: []int{3}, Mounts: []Mount{snap}}, true},
		{"an empty handler list defers to none",
			Config{OwnNamespace: "nvmock", NvidiaRuntimeHandlers: []string{}}, nvidia(pod("ml")),
			withEnv(ctr, "NVIDIA_VISIBLE_DEVICES="+uuid(2)), gave(n8, 2), true},
		{"an unlabelled namespace is left alone whatever its handler",
			testConfig, nvidia(pod("other")), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=0"), Adjustment{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok, err := Decide(c.cfg, n8, c.pod, c.ctr)
			if err != nil || ok != c.wantOK {
				t.Fatalf("Decide = ok %v, err %v; want ok %v", ok, err, c.wantOK)
			}
			if d := diff(got, c.want); d != "" {
				t.Errorf("adjustment differs:\n%s", d)
			}
		})
	}
}

// The node's PCI tree goes to every container of an opted-in namespace, through
// the overlay's runtime hook, with the overlay's procfs files when it has
// them; an overlay without a hook (installed before pcisim) gives none, and
// a container left alone gets nothing.
func TestDecideShowsThePCITreeToEveryContainerOfAnOptedInNamespace(t *testing.T) {
	node := testNode(8, false)
	node.Sys = "/var/lib/nvmock/overlays/0123456789abcdef/sysfs/sys"
	node.Hook = "/var/lib/nvmock/overlays/0123456789abcdef/bin/nvmock-hook"
	want := []Hook{{Path: node.Hook, Args: []string{"nvmock-hook", "pcisim", node.Sys}}}
	withProc := node
	withProc.Proc = "/var/lib/nvmock/overlays/0123456789abcdef/driver/proc"
	wantProc := []Hook{{Path: node.Hook, Args: []string{"nvmock-hook", "pcisim", node.Sys, withProc.Proc}}}
	withLive, liveOnly := withProc, node
	withLive.IBLive = "/var/lib/nvmock/live/ib"
	liveOnly.IBLive = withLive.IBLive
	wantLive := []Hook{{Path: node.Hook, Args: []string{"nvmock-hook", "pcisim", node.Sys, withProc.Proc, withLive.IBLive}}}
	wantLiveOnly := []Hook{{Path: node.Hook, Args: []string{"nvmock-hook", "pcisim", node.Sys, "-", withLive.IBLive}}}
	nvidia := pod("ml")
	nvidia.RuntimeHandler = "nvidia"
	for _, c := range []struct {
		name  string
		node  NodeState
		pod   Pod
		ctr   Container
		hooks []Hook
	}{
		{"a container given GPUs", node, pod("ml", GPUsAnnotation, "2"), ctr, want},
		{"a container given the driver alone (a DRA driver)", node, pod("ml", GPUsAnnotation, "none"), ctr, want},
		{"a container whose GPUs NVIDIA's runtime gives", node, nvidia, withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=1"), want},
		{"a container asking for no GPUs at all (void)", node, pod("ml"), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=void"), want},
		{"a container given GPUs, with the driver's procfs", withProc, pod("ml", GPUsAnnotation, "2"), ctr, wantProc},
		{"void, with the driver's procfs (a DRA driver reading MIG capabilities)", withProc, pod("ml"), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=void"), wantProc},
		{"with the live InfiniBand ports", withLive, pod("ml", GPUsAnnotation, "2"), ctr, wantLive},
		{"with live InfiniBand ports and no procfs", liveOnly, pod("ml", GPUsAnnotation, "2"), ctr, wantLiveOnly},
		{"an overlay without the tree", testNode(8, false), pod("ml", GPUsAnnotation, "2"), ctr, nil},
		{"a namespace that did not opt in", node, pod("other"), ctr, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			adj, _, err := Decide(testConfig, c.node, c.pod, c.ctr)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(adj.Hooks, c.hooks, func(a, b Hook) bool { return a.Path == b.Path && slices.Equal(a.Args, b.Args) }) {
				t.Errorf("hooks %+v, want %+v", adj.Hooks, c.hooks)
			}
		})
	}
}

// A privileged container has every GPU's node, as the host's /dev gives it
// on a real node: it sees every GPU, whatever it was given; what it was
// given is what is named and counted.
func TestAPrivilegedContainerHasEveryGPUsNode(t *testing.T) {
	n8 := testNode(8, true)
	priv := ctr
	priv.Privileged = true
	for _, c := range []struct {
		name string
		pod  Pod
		gpus []int
	}{
		{"given one GPU", pod("ml", GPUsAnnotation, "1"), []int{0}},
		{"given the driver alone", pod("ml", GPUsAnnotation, "none"), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			adj, ok, err := Decide(testConfig, n8, c.pod, priv)
			if err != nil || !ok {
				t.Fatalf("ok %v, err %v", ok, err)
			}
			for i := range n8.GPUs {
				if !hasNode(adj.Devices, n8.GPUs[i].Node) || !hasRule(adj.DeviceRules, n8.GPUs[i].Node) {
					t.Errorf("no node or rule for GPU %d: %v", i, adj.Devices)
				}
			}
			if !slices.Equal(adj.GPUs, c.gpus) {
				t.Errorf("GPUs given %v, want %v", adj.GPUs, c.gpus)
			}
		})
	}
	adj, _, _ := Decide(testConfig, n8, pod("ml", GPUsAnnotation, "1"), ctr)
	if hasNode(adj.Devices, n8.GPUs[1].Node) {
		t.Errorf("an unprivileged container given GPU 0 has GPU 1's node")
	}
}

// The node's live state is read-only in a container, and writable in a
// privileged one, which changes node settings as on a real node (it has
// CAP_SYS_ADMIN); both as the plugin injects and beside NVIDIA's runtime.
func TestOnlyAPrivilegedContainerGetsTheStateWritable(t *testing.T) {
	n := testNode(2, true)
	n.State = "/var/lib/nvmock/live/state"
	priv := ctr
	priv.Privileged = true
	stateMount := func(adj Adjustment) []string {
		for _, m := range adj.Mounts {
			if m.Source == n.State {
				return m.Options
			}
		}
		return nil
	}
	for _, c := range []struct {
		name string
		pod  Pod
		ctr  Container
		want string
	}{
		{"a container", pod("ml", GPUsAnnotation, "1"), ctr, "ro"},
		{"a privileged container", pod("ml", GPUsAnnotation, "1"), priv, "rw"},
		{"a privileged container given the driver alone", pod("ml", GPUsAnnotation, "none"), priv, "rw"},
	} {
		t.Run(c.name, func(t *testing.T) {
			adj, ok, err := Decide(testConfig, n, c.pod, c.ctr)
			if err != nil || !ok {
				t.Fatalf("ok %v, err %v", ok, err)
			}
			opts := stateMount(adj)
			if !slices.Contains(opts, c.want) || !slices.Contains(opts, "nosuid") || !slices.Contains(opts, "nodev") {
				t.Errorf("state mount options %v, want %s, nosuid and nodev", opts, c.want)
			}
			// The snapshot beside it stays read-only.
			for _, m := range adj.Mounts {
				if m.Source == n.Snapshot && !slices.Contains(m.Options, "ro") {
					t.Errorf("snapshot mount %v is not read-only", m.Options)
				}
			}
		})
	}
}

// The driver's other programs (the MPS control daemon and server) come
// into a container with GPUs at /usr/bin, as NVIDIA's runtime mounts them,
// unless the spec has them already.
func TestTheDriversProgramsComeWithTheGPUs(t *testing.T) {
	n := testNode(2, true)
	n.Binaries = []string{testDriver + "/usr/bin/nvidia-cuda-mps-control", testDriver + "/usr/bin/nvidia-cuda-mps-server"}
	mounted := func(adj Adjustment) map[string]string {
		m := map[string]string{}
		for _, mt := range adj.Mounts {
			if strings.HasPrefix(mt.Destination, "/usr/bin/") {
				m[mt.Destination] = mt.Source
			}
		}
		return m
	}
	adj, ok, err := Decide(testConfig, n, pod("ml", GPUsAnnotation, "1"), ctr)
	if err != nil || !ok {
		t.Fatalf("ok %v, err %v", ok, err)
	}
	want := map[string]string{"/usr/bin/nvidia-smi": n.NvidiaSMI,
		"/usr/bin/nvidia-cuda-mps-control": n.Binaries[0], "/usr/bin/nvidia-cuda-mps-server": n.Binaries[1]}
	if got := mounted(adj); !maps.Equal(got, want) {
		t.Errorf("programs mounted %v, want %v", got, want)
	}
	adj, _, _ = Decide(testConfig, n, pod("ml", GPUsAnnotation, "1"), withMounts(ctr, "/usr/bin/nvidia-cuda-mps-control"))
	if _, ok := mounted(adj)["/usr/bin/nvidia-cuda-mps-control"]; ok {
		t.Error("a program the spec mounts already is mounted again")
	}
}

// In a user namespace runc binds each device node from the same path on
// the host, where a mock node has none (review: such a container was never
// created): the overlay's nodes are bound instead, with their cgroup rules.
func TestDecideBindsTheNodesIntoAUserNamespace(t *testing.T) {
	n := testNode(4, false)
	c := ctr
	c.UserNS = true
	want := gave(n, 1)
	for _, d := range want.Devices {
		want.Mounts = append(want.Mounts, Mount{Source: n.DriverRoot + d.Path, Destination: d.Path, Type: "bind", Options: []string{"bind", "ro", "nosuid"}})
	}
	want.Devices = nil
	runDecide(t, []decideCase{{name: "GPU 1 in a user namespace", cfg: testConfig, node: n, pod: pod("ml", GPUsAnnotation, "1,"), ctr: c, want: want, ok: true}})
}
