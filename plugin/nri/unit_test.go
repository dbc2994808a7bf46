package nri

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"

	"github.com/nvmock/nvmock/plugin/inject"
)

// fakePlugin is a plugin on syntheticNode(gpus), no root or runtime needed.
func fakePlugin(t *testing.T, gpus int, cfg inject.Config) *Plugin {
	t.Helper()
	p, err := New(Options{OverlayRoot: t.TempDir(), Log: testLog(t), Inject: cfg})
	must(t, err)
	n := syntheticNode(gpus)
	p.node.probe = func(string) (inject.NodeState, error) { return n, nil }
	return p
}

func TestToNRIConvertsTheWholeAdjustment(t *testing.T) {
	opts := []string{"bind", "ro", "nosuid", "nodev"}
	in := inject.Adjustment{
		GPUs:        []int{1},
		Mounts:      []inject.Mount{{Source: "/o/lib.so.1", Destination: "/usr/lib64/libnvidia-ml.so.1", Type: "bind", Options: opts}},
		Devices:     []inject.DeviceNode{{Path: "/dev/nvidia1", Type: "c", Major: 195, Minor: 1, FileMode: 0o666}},
		DeviceRules: []inject.DeviceRule{{Allow: true, Type: "c", Major: 195, Minor: 1, Access: "rwm"}},
		Env:         []inject.EnvVar{{Key: "NVIDIA_VISIBLE_DEVICES", Value: "GPU-1"}},
		Hooks:       []inject.Hook{{Path: "/o/bin/nvmock-hook", Args: []string{"nvmock-hook", "pcisim", "/o/sysfs/sys"}}},
	}
	want := &api.ContainerAdjustment{}
	want.AddMount(&api.Mount{Source: "/o/lib.so.1", Destination: "/usr/lib64/libnvidia-ml.so.1", Type: "bind", Options: opts})
	want.AddDevice(&api.LinuxDevice{Path: "/dev/nvidia1", Type: "c", Major: 195, Minor: 1, FileMode: api.FileMode(uint32(0o666))})
	want.Linux.Resources = &api.LinuxResources{Devices: []*api.LinuxDeviceCgroup{
		{Allow: true, Type: "c", Major: api.Int64(int64(195)), Minor: api.Int64(int64(1)), Access: "rwm"}}}
	want.AddEnv("NVIDIA_VISIBLE_DEVICES", "GPU-1")
	want.AddHooks(&api.Hooks{CreateContainer: []*api.Hook{{Path: "/o/bin/nvmock-hook", Args: []string{"nvmock-hook", "pcisim", "/o/sysfs/sys"}}}})
	if got := toNRI(&in); !proto.Equal(got, want) {
		t.Errorf("toNRI:\n got %v\nwant %v", got, want)
	}
	if got := toNRI(&inject.Adjustment{}); !proto.Equal(got, &api.ContainerAdjustment{}) {
		t.Errorf("toNRI of nothing: %v", got)
	}
}

func TestCreateHonoursNamespaceLabels(t *testing.T) {
	p := fakePlugin(t, 2, inject.Config{})
	set := map[string]bool{"ml": true}
	p.optedIn.Store(&set)
	for _, tc := range []struct {
		ns   string
		want bool
	}{{"ml", true}, {"web", false}} {
		pd := &api.PodSandbox{Name: "p", Namespace: tc.ns}
		if got := p.adjust(pd, &api.Container{Id: tc.ns, Name: "c"}) != nil; got != tc.want {
			t.Errorf("namespace %s: injected %v, want %v", tc.ns, got, tc.want)
		}
	}
}

// A real driver that loads while the plugin runs (the GPU operator's driver
// container) stops injection from the next container on: the overlay is
// unchanged, but the plugin looks for the driver at each creation (found
// in review: the probe's answer was kept until the overlay changed).
func TestARealDriverLoadedLaterStopsInjection(t *testing.T) {
	p := fakePlugin(t, 2, inject.Config{Namespaces: []string{"*"}})
	proc := t.TempDir()
	p.node.procRoot = proc
	pd := &api.PodSandbox{Name: "p", Namespace: "ml"}
	if p.adjust(pd, &api.Container{Id: "c1", Name: "c"}) == nil {
		t.Fatal("no injection before the real driver loaded")
	}
	must(t, os.MkdirAll(filepath.Join(proc, "driver", "nvidia"), 0o755))
	if p.adjust(pd, &api.Container{Id: "c2", Name: "c"}) != nil {
		t.Error("injected after a real NVIDIA driver loaded")
	}
}

// A pod's request the node cannot meet fails the container as it starts
// (its runtime hook), with the reason, as NVIDIA's runtime fails it there
// (review: refused at creation, a pod that never restarts waited for
// ever); on an overlay without the hook, its creation.
func TestARequestTheNodeCannotMeetFailsTheContainersStart(t *testing.T) {
	p := fakePlugin(t, 2, inject.Config{Namespaces: []string{"*"}})
	n := syntheticNode(2)
	n.Hook = "/o/bin/nvmock-hook"
	p.node.probe = func(string) (inject.NodeState, error) { return n, nil }
	pd := &api.PodSandbox{Name: "p", Namespace: "ml"}
	adj, err := p.create(pd, &api.Container{Id: "c", Name: "c", Env: []string{"NVIDIA_VISIBLE_DEVICES=9"}})
	want := &api.ContainerAdjustment{}
	want.AddHooks(&api.Hooks{CreateContainer: []*api.Hook{{Path: n.Hook, Args: []string{"nvmock-hook", "refuse",
		`nvmock: pod ml/p container c: env NVIDIA_VISIBLE_DEVICES="9" names index "9"; the node has GPUs 0-1`}}}})
	if err != nil || !proto.Equal(adj, want) {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=9:\n got %v, %v\nwant %v", adj, err, want)
	}
}

// Without the hook (an older overlay), a request the node cannot meet
// fails the container's creation with the reason; a default the node
// cannot meet is the plugin's own, and only warned about.
func TestCreateRefusesABadRequestAndWarnsOfABadDefault(t *testing.T) {
	p := fakePlugin(t, 2, inject.Config{Namespaces: []string{"*"}})
	pd := &api.PodSandbox{Name: "p", Namespace: "ml", Annotations: map[string]string{inject.GPUsAnnotation: "lots"}}
	adj, err := p.create(pd, &api.Container{Id: "c", Name: "c"})
	if adj != nil || err == nil || !strings.Contains(err.Error(), `nvmock: pod ml/p container c: annotation nvmock.io/gpus="lots" is not all, none, a count`) {
		t.Errorf("a pod with a bad request: %v, %v; want no adjustment and the reason", adj, err)
	}
	if rec := scrape(t, p); !strings.Contains(rec, "nvmock_nri_refused_total 1") {
		t.Errorf("refusal not counted:\n%s", grep(rec, "nvmock_nri_"))
	}
	p = fakePlugin(t, 2, inject.Config{Namespaces: []string{"*"}, DefaultGPUs: "3"})
	if p.adjust(&api.PodSandbox{Name: "p", Namespace: "ml"}, &api.Container{Id: "c", Name: "c"}) != nil {
		t.Error("injected under a default the node cannot meet")
	}
	if rec := scrape(t, p); !strings.Contains(rec, "nvmock_nri_warnings_total 1") || !strings.Contains(rec, "nvmock_nri_refused_total 0") {
		t.Errorf("a default the node cannot meet: want one warning, no refusal:\n%s", grep(rec, "nvmock_nri_"))
	}
}

func TestCreateReadsCDIDevicesFromAnnotations(t *testing.T) {
	p := fakePlugin(t, 4, inject.Config{Namespaces: []string{"*"}})
	pd := &api.PodSandbox{Name: "p", Namespace: "ml"}
	c := &api.Container{Id: "c", Name: "c", Annotations: map[string]string{"cdi.k8s.io/nvmock": "nvmock.io/gpu=2, nvmock.io/gpu=3"}}
	adj := p.adjust(pd, c)
	if v, _ := envOf(adj, inject.VisibleDevicesEnv); v != syntheticNode(4).GPUs[2].UUID+","+syntheticNode(4).GPUs[3].UUID {
		t.Errorf("%s = %q, want GPUs 2 and 3", inject.VisibleDevicesEnv, v)
	}
}

func TestCreateSkipsQuietlyWithoutAnOverlay(t *testing.T) {
	p := fakePlugin(t, 2, inject.Config{Namespaces: []string{"*"}})
	p.node.probe = func(root string) (inject.NodeState, error) {
		return inject.NodeState{}, fmt.Errorf("probe overlay in %s: no hostprep.json: %w", root, fs.ErrNotExist)
	}
	if p.adjust(&api.PodSandbox{Name: "p", Namespace: "ml"}, &api.Container{Id: "c", Name: "c"}) != nil {
		t.Error("injected without an overlay")
	}
	m := scrape(t, p)
	if !strings.Contains(m, `nvmock_nri_skipped_total{reason="no_overlay"} 1`) || !strings.Contains(m, `nvmock_nri_errors_total{reason="probe"} 0`) {
		t.Errorf("want one no_overlay skip and no error:\n%s", grep(m, "nvmock_nri_"))
	}
}

// A broken overlay is counted once per container the plugin would handle,
// not for every container on the node.
func TestContainersNotSelectedAreNotCountedAgainstABrokenOverlay(t *testing.T) {
	p := fakePlugin(t, 2, inject.Config{Namespaces: []string{"ml"}})
	p.node.probe = func(string) (inject.NodeState, error) { return inject.NodeState{}, errors.New("corrupt snapshot") }
	for _, ns := range []string{"kube-system", "web", "ml"} {
		if p.adjust(&api.PodSandbox{Name: "p", Namespace: ns}, &api.Container{Id: ns, Name: "c"}) != nil {
			t.Errorf("namespace %s: injected with a broken overlay", ns)
		}
	}
	m := scrape(t, p)
	if !strings.Contains(m, `nvmock_nri_errors_total{reason="probe"} 1`) {
		t.Errorf("want one probe error (namespace ml only):\n%s", grep(m, "nvmock_nri_errors_total"))
	}
}

func TestToContainerReadsTheSpec(t *testing.T) {
	c := &api.Container{Name: "c", Env: []string{"A=1"},
		Mounts: []*api.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/usr/lib64/libnvidia-ml.so.535.261.03", Type: "bind", Source: "/var/lib/nvmock/driver/usr/lib64/libnvidia-ml.so.535.261.03"},
			{Destination: "/var/run/nvidia-container-devices/0", Type: "bind", Source: "/dev/null"},
		},
		Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{
			{Path: "/dev/nvidia1", Type: "c", Major: 195, Minor: 1, FileMode: api.FileMode(uint32(0o666))}}},
		CDIDevices: []*api.CDIDevice{{Name: "nvidia.com/gpu=1"}},
	}
	want := inject.Container{Name: "c", Env: []string{"A=1"},
		CDIDevices: []string{"nvidia.com/gpu=1"},
		Devices:    []inject.DeviceNode{{Path: "/dev/nvidia1", Type: "c", Major: 195, Minor: 1, FileMode: 0o666}},
		Mounts:     []string{"/proc", "/usr/lib64/libnvidia-ml.so.535.261.03", "/var/run/nvidia-container-devices/0"},
		NullMounts: []string{"/var/run/nvidia-container-devices/0"},
	}
	if got := toContainer(c); !reflect.DeepEqual(got, want) {
		t.Errorf("toContainer:\n got %+v\nwant %+v", got, want)
	}
	if got := toContainer(&api.Container{Name: "c"}); got.Mounts != nil {
		t.Errorf("a spec without mounts gave %q", got.Mounts)
	}
	userns := &api.Container{Name: "c", Linux: &api.LinuxContainer{Namespaces: []*api.LinuxNamespace{{Type: "mount"}, {Type: "user", Path: "/proc/7/ns/user"}}}}
	if !toContainer(userns).UserNS || toContainer(c).UserNS {
		t.Errorf("user namespace: with one %v, without %v; want true, false", toContainer(userns).UserNS, toContainer(c).UserNS)
	}
	// containerd's rule for a privileged container: every device.
	priv := &api.Container{Name: "c", Linux: &api.LinuxContainer{Resources: &api.LinuxResources{Devices: []*api.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}}}}
	deny := &api.Container{Name: "c", Linux: &api.LinuxContainer{Resources: &api.LinuxResources{Devices: []*api.LinuxDeviceCgroup{
		{Allow: false, Access: "rwm"}, {Allow: true, Type: "c", Major: api.Int64(1), Minor: api.Int64(3), Access: "rwm"}}}}}
	if !toContainer(priv).Privileged || toContainer(deny).Privileged || toContainer(c).Privileged {
		t.Errorf("privileged: allow-all %v, deny-all and one device %v, no rules %v; want true, false, false",
			toContainer(priv).Privileged, toContainer(deny).Privileged, toContainer(c).Privileged)
	}
}

// A container given the driver alone ("none") holds no GPU: use counts,
// Synchronize and release all leave the GPUs to others.
func TestTheDriverAloneHoldsNoGPU(t *testing.T) {
	p := fakePlugin(t, 4, inject.Config{Namespaces: []string{"*"}})
	node := syntheticNode(4)
	u := func(i int) string { return node.GPUs[i].UUID }
	inUse := func(want ...int) {
		t.Helper()
		p.node.mu.Lock()
		defer p.node.mu.Unlock()
		if !reflect.DeepEqual(p.node.node.InUse, want) {
			t.Errorf("use counts %v, want %v", p.node.node.InUse, want)
		}
	}
	running := api.ContainerState_CONTAINER_RUNNING
	p.synchronize([]*api.Container{
		{Id: "a", State: running, Env: []string{inject.VisibleDevicesEnv + "=" + u(0) + "," + u(1)}, Annotations: injected},
		{Id: "b", State: running, Env: []string{inject.VisibleDevicesEnv + "=none"}, Annotations: injected},
	})
	inUse(1, 1, 0, 0)

	none := &api.PodSandbox{Name: "p", Namespace: "ml", Annotations: map[string]string{inject.GPUsAnnotation: "none"}}
	adj := p.adjust(none, &api.Container{Id: "d", Name: "c"})
	if v, _ := envOf(adj, inject.VisibleDevicesEnv); v != "none" {
		t.Errorf("%s = %q, want none", inject.VisibleDevicesEnv, v)
	}
	var paths []string
	for _, d := range adj.GetLinux().GetDevices() {
		paths = append(paths, d.GetPath())
	}
	if want := []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}; !reflect.DeepEqual(paths, want) {
		t.Errorf("devices %q, want the control nodes alone", paths)
	}
	inUse(1, 1, 0, 0)

	one := &api.PodSandbox{Name: "p", Namespace: "ml", Annotations: map[string]string{inject.GPUsAnnotation: "1"}}
	if v, _ := envOf(p.adjust(one, &api.Container{Id: "e", Name: "c"}), inject.VisibleDevicesEnv); v != u(2) {
		t.Errorf("got %q, want GPU 2, the first unused", v)
	}
	inUse(1, 1, 1, 0)
	p.release("d")
	p.release("b")
	inUse(1, 1, 1, 0)
	p.release("a")
	inUse(0, 0, 1, 0)
}

// GPUs NVIDIA's runtime gives (a pod of its handler) are counted as the
// plugin's own, by index too, and stay counted when the counts are
// rebuilt: after another plugin's container (a rolling update) and after
// Synchronize. Review: they were recorded by the variable the plugin set,
// which it sets not, and a count request then got GPU 0.
func TestGPUsLeftToNvidiasRuntimeStayCounted(t *testing.T) {
	p := fakePlugin(t, 3, inject.Config{Namespaces: []string{"*"}, DefaultGPUs: "1"})
	n := syntheticNode(3)
	nv := &api.PodSandbox{Name: "nv", Namespace: "ml", RuntimeHandler: "nvidia"}
	held := &api.Container{Id: "a", Name: "c", State: api.ContainerState_CONTAINER_RUNNING, Env: []string{inject.VisibleDevicesEnv + "=0"}}
	if adj := p.adjust(nv, held); adj == nil {
		t.Fatal("the container under NVIDIA's runtime was not handled")
	}
	pd := &api.PodSandbox{Name: "p", Namespace: "ml"}
	p.adjust(pd, &api.Container{Id: "x", Name: "c", Env: []string{inject.VisibleDevicesEnv + "=" + n.GPUs[1].UUID},
		Annotations: map[string]string{InjectedAnnotation: "old-pod"}})
	if got, _ := envOf(p.adjust(pd, &api.Container{Id: "b", Name: "c"}), inject.VisibleDevicesEnv); got != n.GPUs[2].UUID {
		t.Errorf("after a rolling update's container, a count of 1 got %q; want GPU 2 (0 is the runtime's, 1 the other plugin's)", got)
	}
	p.release("b")
	held.Annotations = injected // as create marked it
	p.synchronize([]*api.Container{held})
	if got, _ := envOf(p.adjust(pd, &api.Container{Id: "c", Name: "c"}), inject.VisibleDevicesEnv); got != n.GPUs[1].UUID {
		t.Errorf("after Synchronize, a count of 1 got %q; want GPU 1 (0 is the runtime's, by index)", got)
	}
}

// containerd applies the CDI annotations of a container's CRI config, not
// its pod's: a pod's is no container's request (review: a sidecar's void
// was overridden).
func TestAPodsCDIAnnotationIsNoContainersRequest(t *testing.T) {
	p := fakePlugin(t, 4, inject.Config{Namespaces: []string{"*"}})
	pd := &api.PodSandbox{Name: "p", Namespace: "ml", Annotations: map[string]string{"cdi.k8s.io/x": "nvidia.com/gpu=1"}}
	adj := p.adjust(pd, &api.Container{Id: "s", Name: "sidecar", Env: []string{inject.VisibleDevicesEnv + "=void"}})
	if len(adj.GetLinux().GetDevices()) != 0 {
		t.Errorf("a void container of a pod with a CDI annotation got devices %v", adj.GetLinux().GetDevices())
	}
}

// Every error reason docs/kubernetes.md lists is there at zero from the
// start, so that alerts can rate() it (review: process and in_use were not).
func TestEveryErrorReasonIsThereAtZero(t *testing.T) {
	p := fakePlugin(t, 2, inject.Config{Namespaces: []string{"*"}})
	m := scrape(t, p)
	for _, r := range []string{"probe", "decide", "panic", "namespaces", "sync", "process", "in_use"} {
		if !strings.Contains(m, `nvmock_nri_errors_total{reason="`+r+`"} 0`) {
			t.Errorf("no errors_total{reason=%q} at zero:\n%s", r, grep(m, "nvmock_nri_errors_total"))
		}
	}
}

// injected marks a container a plugin of nvmock's handled, as create does.
var injected = map[string]string{InjectedAnnotation: "node-a"}

// Synchronize counts only what nvmock's plugins gave (a CUDA image's all
// elsewhere holds nothing: review), and reads a device plugin's
// volume-mounts list as create did (review: it read only the variable),
// of /dev/null only, and the CDI names left for NVIDIA's runtime (review:
// a restart forgot them, and a count request got a busy GPU).
func TestSynchronizeCountsWhatThePluginGave(t *testing.T) {
	p := fakePlugin(t, 5, inject.Config{Namespaces: []string{"*"}})
	running := api.ContainerState_CONTAINER_RUNNING
	p.synchronize([]*api.Container{
		{Id: "cuda", State: running, Env: []string{inject.VisibleDevicesEnv + "=all"}},
		{Id: "list", State: running, Env: []string{inject.VisibleDevicesEnv + "=" + inject.DeviceListRoot}, Annotations: injected,
			Mounts: []*api.Mount{{Source: "/dev/null", Destination: inject.DeviceListRoot + "/2"}, {Source: "/etc/cfg", Destination: inject.DeviceListRoot + "/1"}}},
		{Id: "cdi", State: running, Env: []string{inject.VisibleDevicesEnv + "=nvidia.com/gpu=0"}, Annotations: injected},
		{Id: "runtime", State: running, Env: []string{inject.VisibleDevicesEnv + "=runtime.nvidia.com/gpu=3, nvidia.com/imex-channel=0"}, Annotations: injected},
	})
	p.node.mu.Lock()
	defer p.node.mu.Unlock()
	if want := []int{1, 0, 1, 1, 0}; !reflect.DeepEqual(p.node.node.InUse, want) {
		t.Errorf("use counts %v, want %v", p.node.node.InUse, want)
	}
}
