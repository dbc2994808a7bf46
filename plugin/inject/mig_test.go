package inject

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/hostprep"
)

// migNode is an 8-GPU node whose GPU 1 holds a 3g.20gb (GPU instance 2,
// MIG device 0) and two 1g.5gb (GPU instances 8 and 7, MIG devices 1, 2).
func migNode() NodeState {
	n := testNode(8, false)
	capNode := func(gi, ci int) DeviceNode {
		return DeviceNode{Path: fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", hostprep.MIGCapMinor(1, gi, ci)), Type: "c", Major: 1, Minor: 3, FileMode: 0o666}
	}
	for k, m := range []struct {
		gi      int
		profile string
	}{{2, "3g.20gb"}, {7, "1g.5gb"}, {8, "1g.5gb"}} {
		n.MIG = append(n.MIG, MIGDevice{GPU: 1, Index: k, UUID: fmt.Sprintf("MIG-%08d-0000-5000-8000-000000000000", k), Profile: m.profile,
			Caps: [2]DeviceNode{capNode(m.gi, -1), capNode(m.gi, 0)}})
	}
	return n
}

// gaveMIG is gave for MIG devices k of node: their GPU's node, their
// capability nodes, and their UUIDs in NVIDIA_VISIBLE_DEVICES.
func gaveMIG(node NodeState, whole []int, k ...int) Adjustment {
	gpus := append([]int(nil), whole...)
	for _, i := range k {
		if g := node.MIG[i].GPU; !slices.Contains(gpus, g) {
			gpus = append(gpus, g)
		}
	}
	slices.Sort(gpus)
	a := gave(node, gpus...)
	a.MIG = k
	visible := ""
	for _, i := range gpus {
		if slices.Contains(whole, i) {
			visible += "," + node.GPUs[i].UUID
		}
	}
	for _, i := range k {
		a.Devices = append(a.Devices, node.MIG[i].Caps[0], node.MIG[i].Caps[1])
		visible += "," + node.MIG[i].UUID
	}
	a.Env[0].Value = visible[1:]
	return a
}

func TestDecideGivesMIGDevices(t *testing.T) {
	n := migNode()
	m := n.MIG
	busy := migNode()
	busy.MIGInUse = []int{0, 1, 0} // the first 1g.5gb is some container's
	runDecide(t, []decideCase{
		{name: "a MIG UUID from a device plugin gives that MIG device, its GPU's node and its capability nodes",
			cfg: testConfig, node: n, pod: pod("ml"), ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES="+m[1].UUID),
			want: gaveMIG(n, nil, 1), ok: true},
		{name: "a CDI name GPU:index gives that MIG device",
			cfg: testConfig, node: n, pod: pod("ml"), ctr: Container{Name: "c", CDIDevices: []string{"nvidia.com/gpu=1:0"}},
			want: gaveMIG(n, nil, 0), ok: true},
		// NVIDIA's runtime (v1.20, jit-cdi by default) reads names with
		// go-nvlib's IsMigUUID: MIG- as written, hex in any case.
		{name: "a MIG UUID with its hex in capitals gives that MIG device",
			cfg: testConfig, node: n, pod: pod("ml"), ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=MIG-"+strings.ToUpper(m[1].UUID[len("MIG-"):])),
			want: gaveMIG(n, nil, 1), ok: true},
		{name: "a MIG UUID in lower case is refused, as NVIDIA's runtime refuses it",
			cfg: testConfig, node: n, pod: pod("ml"), ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES="+strings.ToLower(m[1].UUID)),
			err: `pod ml/train container trainer: env NVIDIA_VISIBLE_DEVICES="` + strings.ToLower(m[1].UUID) + `" names "` + strings.ToLower(m[1].UUID) + `"; NVIDIA's runtime takes MIG UUIDs that start MIG- in capitals`},
		{name: "MIG devices and a whole GPU together",
			cfg: testConfig, node: n, pod: pod("ml"), ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=3,"+m[2].UUID+","+m[0].UUID),
			want: gaveMIG(n, []int{3}, 0, 2), ok: true},
		{name: "the annotation asks for MIG devices by profile",
			cfg: testConfig, node: n, pod: pod("ml", GPUsAnnotation, "mig-1g.5gb,mig-1g.5gb"), ctr: ctr,
			want: gaveMIG(n, nil, 1, 2), ok: true},
		{name: "a profile asked for gets its least used device",
			cfg: testConfig, node: busy, pod: pod("ml", GPUsAnnotation, "mig-1g.5gb"), ctr: ctr,
			want: gaveMIG(n, nil, 2), ok: true},
		{name: "a profile the node has too few of is refused",
			cfg: testConfig, node: n, pod: pod("ml", GPUsAnnotation, "mig-3g.20gb,mig-3g.20gb"), ctr: ctr,
			err: `pod ml/train container trainer: annotation nvmock.io/gpus="mig-3g.20gb,mig-3g.20gb" asks for a "3g.20gb" MIG device; the node has 1 x 3g.20gb, 2 x 1g.5gb`},
		{name: "a MIG UUID the node lacks is refused",
			cfg: testConfig, node: n, pod: pod("ml"), ctr: withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=MIG-nope"),
			err: `pod ml/train container trainer: env NVIDIA_VISIBLE_DEVICES="MIG-nope" names "MIG-nope", no MIG device of this node`},
	})
	// A count of whole GPUs passes over the GPUs in MIG mode, as NVIDIA's
	// device plugin never offers one as nvidia.com/gpu (QA: a count gave
	// GPUs in MIG mode, which CUDA cannot use whole).
	mixed := migNode()
	mixed.MIGOn = []bool{true, true, false, false, false, false, false, false}
	mixed.InUse = []int{0, 0, 0, 1, 1, 0, 0, 0}
	runDecide(t, []decideCase{
		{name: "a count takes the least used GPUs not in MIG mode",
			cfg: testConfig, node: mixed, pod: pod("ml", GPUsAnnotation, "3"), ctr: ctr,
			want: gave(mixed, 2, 5, 6), ok: true},
		{name: "a count past the GPUs not in MIG mode is refused",
			cfg: testConfig, node: mixed, pod: pod("ml", GPUsAnnotation, "7"), ctr: ctr,
			err: `pod ml/train container trainer: annotation nvmock.io/gpus="7" asks for 7 GPUs; 6 of the node's 8 are not in MIG mode (ask for MIG devices with mig-<profile>)`},
	})
	// A DRA driver's CDI spec for a MIG claim: the GPU's node and the MIG
	// device's two capability nodes. That MIG device is named, not its GPU.
	dra := Container{Name: "c", Devices: []DeviceNode{n.GPUs[1].Node, m[2].Caps[0], m[2].Caps[1]}, Env: []string{VisibleDevicesEnv + "=void"}}
	adj, ok, err := Decide(testConfig, n, pod("ml"), dra)
	if err != nil || !ok || !slices.Equal(adj.MIG, []int{2}) || !slices.Contains(adj.Env, EnvVar{VisibleDevicesEnv, m[2].UUID}) {
		t.Errorf("a DRA MIG claim's devices: ok %v, err %v, MIG %v, env %v; want MIG device 2 and its UUID", ok, err, adj.MIG, adj.Env)
	}
	if err := ValidateRequest("mig-1g.5gb,0:1,MIG-x"); err != nil {
		t.Errorf("ValidateRequest: %v", err)
	}
}

// What a container gets of MIG capabilities is what NVIDIA's toolkit gives:
// "all" every MIG device's two nodes (its "all" device is every full GPU
// not in MIG mode and every MIG device), a GPU in MIG mode named alone
// none (the library then shows it without MIG devices), and
// NVIDIA_MIG_MONITOR_DEVICES=all the monitor capability's node.
func TestDecideGivesMIGCapabilitiesAsNVIDIAsToolkit(t *testing.T) {
	n := migNode()
	monitor := DeviceNode{Path: "/dev/nvidia-caps/nvidia-cap2", Type: "c", Major: 1, Minor: 3, FileMode: 0o666}
	n.MIGMonitor = &monitor
	config := DeviceNode{Path: "/dev/nvidia-caps/nvidia-cap1", Type: "c", Major: 1, Minor: 3, FileMode: 0o666}
	n.MIGConfig = &config
	var every []DeviceNode
	for _, m := range n.MIG {
		every = append(every, m.Caps[0], m.Caps[1])
	}
	privileged := ctr
	privileged.Privileged = true
	for _, c := range []struct {
		name string
		pod  Pod
		ctr  Container
		want []DeviceNode
	}{
		{"NVIDIA_VISIBLE_DEVICES=all", pod("ml"), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=all"), every},
		{"the annotation all", pod("ml", GPUsAnnotation, "all"), ctr, every},
		{"the default (all)", pod("ml"), ctr, every},
		{"the MIG GPU named alone", pod("ml"), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=1,"), nil},
		{"two GPUs by count", pod("ml", GPUsAnnotation, "2"), ctr, nil},
		{"the monitor capability with one GPU", pod("ml", GPUsAnnotation, "1,"), withEnv(ctr, MIGMonitorEnv+"=all"), []DeviceNode{monitor}},
		// Privileged: the host's /dev, every MIG device's nodes and the monitor's.
		{"the config capability with one GPU", pod("ml", GPUsAnnotation, "1,"), withEnv(privileged, MIGConfigEnv+"=all"), append(slices.Clone(every), monitor, config)},
		{"not the config capability unprivileged", pod("ml", GPUsAnnotation, "1,"), withEnv(ctr, MIGConfigEnv+"=all"), nil},
		{"the MIG devices with the monitor capability", pod("ml"), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=all", MIGMonitorEnv+"=all"), append(slices.Clone(every), monitor)},
	} {
		t.Run(c.name, func(t *testing.T) {
			adj, ok, err := Decide(testConfig, n, c.pod, c.ctr)
			if err != nil || !ok {
				t.Fatalf("ok %v, err %v", ok, err)
			}
			var caps []DeviceNode
			for _, d := range adj.Devices {
				if len(d.Path) > len("/dev/nvidia-caps/") && d.Path[:len("/dev/nvidia-caps/")] == "/dev/nvidia-caps/" {
					caps = append(caps, d)
				}
			}
			if !slices.Equal(caps, c.want) {
				t.Errorf("capability nodes %v, want %v", caps, c.want)
			}
			for _, d := range caps {
				if !slices.ContainsFunc(adj.DeviceRules, func(r DeviceRule) bool { return r.Major == d.Major && r.Minor == d.Minor }) {
					t.Errorf("no cgroup rule for %s", d.Path)
				}
			}
			if v, _ := lookupEnv(c.ctr.Env, VisibleDevicesEnv); !strings.Contains(v, "MIG-") && slices.ContainsFunc(adj.Env, func(e EnvVar) bool {
				return e.Key == VisibleDevicesEnv && slices.Contains(strings.Split(e.Value, ","), n.MIG[0].UUID)
			}) {
				t.Errorf("MIG UUIDs named in %s: %v (the MIG devices given by all are not counted as in use)", VisibleDevicesEnv, adj.Env)
			}
		})
	}
}

// A container given GPUs that asks for a MIG capability NVIDIA's runtime
// will not give fails, as under the runtime (its CDI mode validates the
// request); void asks the runtime for nothing, so it runs with a warning
// (review: all of them ran, with a warning).
func TestMIGCapabilityRequestsNVIDIAsRuntimeRefuses(t *testing.T) {
	n := migNode()
	privileged := ctr
	privileged.Privileged = true
	for _, c := range []struct {
		name string
		ctr  Container
		want string // "" runs
	}{
		{"monitor, some MIG devices", withEnv(ctr, "NVIDIA_VISIBLE_DEVICES="+n.MIG[0].UUID, MIGMonitorEnv+"=all"), "NVIDIA_MIG_MONITOR_DEVICES=all in a container given some MIG devices"},
		{"config, some MIG devices", withEnv(privileged, "NVIDIA_VISIBLE_DEVICES="+n.MIG[0].UUID, MIGConfigEnv+"=all"), "NVIDIA_MIG_CONFIG_DEVICES=all in a container given some MIG devices"},
		{"monitor, a GPU index", withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=0", MIGMonitorEnv+"=0"), `NVIDIA_MIG_MONITOR_DEVICES="0": only all is supported`},
		{"config, yes", withEnv(privileged, "NVIDIA_VISIBLE_DEVICES=all", MIGConfigEnv+"=yes"), `NVIDIA_MIG_CONFIG_DEVICES="yes": only all is supported`},
		{"config, void", withEnv(privileged, "NVIDIA_VISIBLE_DEVICES=void", MIGConfigEnv+"=yes"), ""},
		{"monitor, all MIG devices", withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=all", MIGMonitorEnv+"=all"), ""},
	} {
		_, _, err := Decide(testConfig, n, pod("ml"), c.ctr)
		var re *RequestError
		if c.want == "" && err != nil || c.want != "" && (!errors.As(err, &re) || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// Under NVIDIA's runtime a MIG device is counted as given, whether a
// device plugin named it or the annotation asked for one, which is then
// named for the runtime (review: the MIG device was not recorded, and a
// later request could take it again).
func TestMIGDevicesLeftToNvidiasRuntimeAreRecorded(t *testing.T) {
	n := migNode()
	nvidia := func(p Pod) Pod { p.RuntimeHandler = "nvidia"; return p }
	for _, c := range []struct {
		name string
		pod  Pod
		ctr  Container
		env  string
	}{
		{"a device plugin's MIG UUID", nvidia(pod("ml")), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES="+n.MIG[1].UUID), ""},
		{"the annotation's profile", nvidia(pod("ml", GPUsAnnotation, "mig-1g.5gb")), ctr, n.MIG[1].UUID},
	} {
		t.Run(c.name, func(t *testing.T) {
			adj, ok, err := Decide(testConfig, n, c.pod, c.ctr)
			if err != nil || !ok {
				t.Fatalf("ok %v, err %v", ok, err)
			}
			if !slices.Equal(adj.MIG, []int{1}) || !slices.Equal(adj.GPUs, []int{1}) {
				t.Errorf("MIG %v, GPUs %v; want MIG device 1 on GPU 1", adj.MIG, adj.GPUs)
			}
			env, _ := lookupEnv(envStrings(adj.Env), VisibleDevicesEnv)
			if env != c.env || len(adj.Devices) != 0 {
				t.Errorf("%s=%q, devices %v; want %q and none (the runtime gives them)", VisibleDevicesEnv, env, adj.Devices, c.env)
			}
			if got := Given(&n, &adj); got != n.GPUs[1].UUID+","+n.MIG[1].UUID {
				t.Errorf("Given = %q", got)
			}
		})
	}
}

func envStrings(env []EnvVar) []string {
	var out []string
	for _, e := range env {
		out = append(out, e.Key+"="+e.Value)
	}
	return out
}

// NVIDIA's runtime's all device (v1.20, nvcdi's lib-nvml.go) is every
// whole GPU not in MIG mode and every MIG device: a GPU in MIG mode with
// no MIG device yet (-mig 1 before -cgi) is not among them, while one
// with MIG devices comes with its node (review: nvmock gave both).
func TestAllLeavesOutAGPUInMIGModeWithoutMIGDevices(t *testing.T) {
	n := migNode()
	n.MIGOn = make([]bool, len(n.GPUs))
	n.MIGOn[1], n.MIGOn[5] = true, true // GPU 1 has MIG devices, GPU 5 none
	for _, c := range []struct {
		name string
		pod  Pod
		ctr  Container
	}{
		{"NVIDIA_VISIBLE_DEVICES=all", pod("ml"), withEnv(ctr, "NVIDIA_VISIBLE_DEVICES=all")},
		{"the annotation all", pod("ml", GPUsAnnotation, "all"), ctr},
	} {
		t.Run(c.name, func(t *testing.T) {
			adj, ok, err := Decide(testConfig, n, c.pod, c.ctr)
			if err != nil || !ok {
				t.Fatalf("ok %v, err %v", ok, err)
			}
			has := func(i int) bool { return slices.Contains(adj.Devices, n.GPUs[i].Node) }
			if has(5) || slices.Contains(adj.GPUs, 5) {
				t.Errorf("GPU 5, in MIG mode with no MIG device, was given: GPUs %v", adj.GPUs)
			}
			if !has(1) || !has(0) || !has(7) {
				t.Errorf("GPUs 0, 1 (its MIG devices') and 7 not all given: GPUs %v", adj.GPUs)
			}
		})
	}
}

// Named reads back every form the decision takes from NVIDIA's interfaces,
// for a restarted plugin's counts (review: CDI names and GPU:index were
// dropped, and a count request then got a busy GPU).
func TestNamedReadsWhatNVIDIAsRuntimeReads(t *testing.T) {
	n := migNode()
	for _, c := range []struct {
		visible    string
		gpus, migs []int
	}{
		{"nvidia.com/gpu=0", []int{0}, nil},
		{"runtime.nvidia.com/gpu=3,nvidia.com/imex-channel=0", []int{3}, nil},
		{" 5 , " + n.GPUs[2].UUID + ",5", []int{2, 5}, nil},
		{"1:2,nvidia.com/gpu=1:0", []int{1}, []int{2, 0}},
		{n.MIG[1].UUID + ",7", []int{1, 7}, []int{1}},
		{"all", []int{0, 1, 2, 3, 4, 5, 6, 7}, nil},
		{"0,none", nil, nil},
		{"void", nil, nil},
		{"9,gpu-x,GPU-nope,1:9", nil, nil},
	} {
		gpus, migs := n.Named(c.visible)
		if !slices.Equal(gpus, c.gpus) || !slices.Equal(migs, c.migs) {
			t.Errorf("Named(%q) = %v, %v; want %v, %v", c.visible, gpus, migs, c.gpus, c.migs)
		}
	}
}
