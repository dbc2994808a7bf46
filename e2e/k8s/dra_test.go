//go:build k8s

package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nvmock/nvmock/internal/testenv"
)

// NVIDIA's DRA driver for GPUs (sigs.k8s.io/dra-driver-nvidia-gpu v0.4.0),
// deployed with its own Helm chart on the node nvmock's chart made: its
// ResourceSlices describe the overlay's GPUs, and pods that claim GPUs
// through ResourceClaims see exactly the GPUs the scheduler allocated to
// them. hack/fetch-dra-driver.sh builds the driver, hack/k8s/dra-images.sh
// imports its image; docs/dra.md says what the driver needs of the node.

const (
	draVersion = "v0.4.0"
	draRelease = "nvidia-dra-driver-gpu"
	draNS      = "nvidia-dra-driver-gpu"
	// The image hack/k8s/dra-images.sh imports.
	draImage = "localhost/nvmock-e2e/dra-driver-nvidia-gpu"
	// The driver's names: its kubelet plugins, the DeviceClass its chart
	// makes, the CDI vendor of its per-claim specs.
	draGPUDriver = "gpu.nvidia.com"
	draCDDriver  = "compute-domain.nvidia.com"
	draGPUClass  = "gpu.nvidia.com"
	draCDISpecs  = "k8s.gpu.nvidia.com-claim_"
	// The hostPath the chart gives its CDI volume, whatever the node's
	// runtime reads (v0.4.0 has no value for it).
	draChartCDIDir = "/var/run/cdi"
)

// draGPUScript prints the GPUs a container sees and keeps it running.
const draGPUScript = "nvidia-smi -L; echo started; exec sleep 3600"

// draGPU is one GPU as the host's nvidia-smi (against the overlay) names it.
type draGPU struct {
	uuid, name, arch, cc string
	memMiB               int64
	line                 string // its nvidia-smi -L line
	pcieRoot             string // its host bridge in the overlay's PCI tree, e.g. pci0000:4d
}

// draEnv is the deployed driver.
type draEnv struct {
	c      *cluster
	gpus   []draGPU // the overlay's GPUs, in index order
	driver string   // the overlay's driver version
	// computeDomains: the compute-domain kubelet plugin runs (the overlay
	// has what it needs, see draProcDevices).
	computeDomains bool
	chart          string // the chart's directory
}

// TestDRADriver deploys the DRA driver once and runs its checks as
// subtests; it uninstalls the driver at the end (NVMOCK_K8S_KEEP keeps it).
func TestDRADriver(t *testing.T) {
	d := draDeploy(t, theCluster)
	t.Run("ResourceSlicesListOneDevicePerGPUWithItsAttributes", d.testResourceSlices)
	t.Run("APodWithAClaimTemplateSeesItsOneGPU", d.testClaimTemplate)
	t.Run("WithoutInjectionTheContainerLacksTheNodesSnapshot", d.testWithoutInjection)
	t.Run("TwoPodsSharingAClaimSeeTheSameGPU", d.testSharedClaim)
	t.Run("APodWithTwoClaimsSeesTwoGPUs", d.testTwoClaims)
	t.Run("ACELSelectorOnTheArchitectureMatches", d.testCELArchitecture)
	t.Run("ACELSelectorOnAnUnknownProductLeavesThePodPending", d.testCELNoMatch)
	t.Run("ClaimsCreatedAndDeletedTenTimesLeaveNothingBehind", d.testNoLeaks)
	t.Run("TheComputeDomainPluginPublishesChannelZeroAndADaemon", d.testComputeDomainSlices)
	t.Run("AComputeDomainRunsItsDaemonAndItsPod", d.testComputeDomainWorkload)
	t.Run("ATimeSlicingConfigSetsItsGPUsTimeslice", d.testTimeSlicing)
	t.Run("AnMPSConfigStartsAControlDaemonThePodReaches", d.testMPS)
	// Last: they partition a GPU, and restart the kubelet plugin.
	t.Run("AGPUInMIGModeIsPublishedAsItsMIGDevices", d.testMIGSlices)
	t.Run("DynamicMIGMakesTheMIGDeviceAClaimAsksFor", d.testDynamicMIG)
}

func (d *draEnv) testResourceSlices(t *testing.T) {
	c := d.c
	devs, err := c.draSlices(ctxT(t, 10*time.Second), draGPUDriver)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != len(d.gpus) {
		t.Errorf("ResourceSlices of %s list %d devices, want one per GPU: %d", draGPUDriver, len(devs), len(d.gpus))
	}
	byUUID := map[string]resourcev1.Device{}
	for _, dev := range devs {
		a := dev.Attributes
		if s := a["type"].StringValue; s == nil || *s != "gpu" {
			t.Errorf("device %s: type %v, want gpu", dev.Name, s)
		}
		if u := a["uuid"].StringValue; u != nil {
			byUUID[*u] = dev
		}
	}
	for _, g := range d.gpus {
		dev, ok := byUUID[g.uuid]
		if !ok {
			t.Errorf("no device with uuid %s (%s); devices: %v", g.uuid, g.name, slices.Sorted(maps.Keys(byUUID)))
			continue
		}
		a := dev.Attributes
		str := func(k string) string {
			if v := a[resourcev1.QualifiedName(k)].StringValue; v != nil {
				return *v
			}
			return "<unset>"
		}
		ver := func(k string) string {
			if v := a[resourcev1.QualifiedName(k)].VersionValue; v != nil {
				return *v
			}
			return "<unset>"
		}
		for _, f := range []struct{ attr, got, want string }{
			{"productName", str("productName"), g.name},
			{"architecture", str("architecture"), g.arch},
			// semver of nvidia-smi's compute_cap: 9.0 is 9.0.0.
			{"cudaComputeCapability", ver("cudaComputeCapability"), g.cc + ".0"},
			// Kubernetes' standard attribute, which the driver reads from
			// /sys in its container: pcisim's tree, through the plugin's hook.
			{"resource.kubernetes.io/pcieRoot", str("resource.kubernetes.io/pcieRoot"), g.pcieRoot},
		} {
			if f.got != f.want {
				t.Errorf("device %s (%s): %s %q, want %q (nvidia-smi on the host)", dev.Name, g.uuid, f.attr, f.got, f.want)
			}
		}
		mem, ok := dev.Capacity["memory"]
		if got := mem.Value.Value() >> 20; !ok || got != g.memMiB {
			t.Errorf("device %s (%s): memory capacity %s (%d MiB), want %d MiB (nvidia-smi on the host)", dev.Name, g.uuid, mem.Value.String(), got, g.memMiB)
		}
	}
	if t.Failed() {
		return
	}
	// The rest of what it publishes, for the log (docs/dra.md quotes it).
	dev := byUUID[d.gpus[0].uuid]
	var attrs []string
	for k, v := range dev.Attributes {
		b, _ := json.Marshal(v)
		attrs = append(attrs, fmt.Sprintf("%s=%s", k, b))
	}
	slices.Sort(attrs)
	mem := dev.Capacity["memory"].Value
	t.Logf("device %s: %s; capacity memory=%s", dev.Name, strings.Join(attrs, " "), mem.String())
}

func (d *draEnv) testClaimTemplate(t *testing.T) {
	c := d.c
	ns := d.namespace(t, true)
	c.draCreateTemplate(t, ns, draTemplate("one-gpu", "", 1))
	out := c.running(t, ns, c.draPod("one", draGPUScript, "one-gpu"), "started")
	if seen := d.seesItsAllocation(t, ns, "one", out); len(seen) != 1 {
		t.Errorf("pod one sees %d GPUs, want 1", len(seen))
	}
	dev, err := c.exec(t, ns, "one", "main", "sh", "-c", "ls /dev | grep '^nvidia[0-9]'")
	if err != nil || len(testenv.Lines(dev)) != 1 {
		t.Errorf("the pod's GPU device nodes: %v:\n%s\nwant one", err, dev)
	}
	// The library is the driver root's, mounted by the DRA driver's CDI spec
	// where the driver root has it (its hook links libnvidia-ml.so.1 to it);
	// nvmock's plugin adds none of its own beside it, only the snapshot.
	lib, err := c.exec(t, ns, "one", "main", "sh", "-c", "readlink -f /usr/lib64/libnvidia-ml.so.1; ls /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 2>&1; ls /etc/nvmock")
	if want := "/usr/lib64/libnvidia-ml.so." + d.driver; err != nil || !strings.HasPrefix(lib, want+"\n") || !strings.Contains(lib, "No such file") {
		t.Errorf("the pod's library: %v:\n%s\nwant libnvidia-ml.so.1 -> %s from the CDI spec, and no other", err, lib, want)
	}
	t.Logf("the claim's CDI spec: %s", c.draSpecSummary(t, d.claimUIDs(t, ns, "one")))
}

// claimUIDs are the UIDs of a pod's claims.
func (d *draEnv) claimUIDs(t testing.TB, ns, pod string) []string {
	t.Helper()
	p, err := d.c.cs.CoreV1().Pods(ns).Get(ctxT(t, 10*time.Second), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var uids []string
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.ResourceClaimName == nil {
			continue
		}
		cl, err := d.c.cs.ResourceV1().ResourceClaims(ns).Get(ctxT(t, 10*time.Second), *st.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids = append(uids, string(cl.UID))
	}
	return uids
}

// draSpecSummary is what the GPU plugin's CDI spec for claims gives a
// container: device nodes, mounts (container paths), hooks, environment.
func (c *cluster) draSpecSummary(t testing.TB, uids []string) string {
	t.Helper()
	var b strings.Builder
	for _, uid := range uids {
		p := filepath.Join(c.cdiDir(), draCDISpecs+uid+".yaml")
		data, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("the claim's CDI spec: %v", err)
			continue
		}
		var spec cdispec.Spec
		if err := yaml.Unmarshal(data, &spec); err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		edits := []cdispec.ContainerEdits{spec.ContainerEdits}
		for _, dev := range spec.Devices {
			edits = append(edits, dev.ContainerEdits)
		}
		var nodes, mounts, hooks, env []string
		for _, e := range edits {
			for _, n := range e.DeviceNodes {
				nodes = append(nodes, n.Path+" <- "+n.HostPath)
			}
			for _, m := range e.Mounts {
				mounts = append(mounts, m.ContainerPath+" <- "+m.HostPath)
			}
			for _, h := range e.Hooks {
				hooks = append(hooks, h.HookName+": "+strings.Join(h.Args, " "))
			}
			env = append(env, e.Env...)
		}
		fmt.Fprintf(&b, "\n%s (kind %s):\n  device nodes: %s\n  mounts: %s\n  hooks: %s\n  env: %s", filepath.Base(p), spec.Kind,
			strings.Join(nodes, ", "), strings.Join(mounts, ", "), strings.Join(hooks, "; "), strings.Join(env, " "))
	}
	return b.String()
}

// Without nvmock's injection (a namespace that did not opt in) the driver's
// CDI spec still gives the container the library, nvidia-smi and one GPU's
// device node, but not the node's snapshot (the mock's stand-in for the
// kernel driver's state): the library reports a built-in board. What
// nvmock's plugin adds to the spec is needed (docs/dra.md).
func (d *draEnv) testWithoutInjection(t *testing.T) {
	c := d.c
	ns := d.namespace(t, false)
	c.draCreateTemplate(t, ns, draTemplate("one-gpu", "", 1))
	out := c.running(t, ns, c.draPod("plain", draGPUScript, "one-gpu"), "started")
	got := uuidsIn(out)
	if len(got) != 1 {
		t.Fatalf("without injection: nvidia-smi -L printed:\n%s\nwant one GPU", out)
	}
	if slices.Contains(draUUIDs(d.gpus), got[0]) {
		t.Errorf("without injection the container still sees the node's UUID %s; the opted-in checks prove nothing", got[0])
	}
	if !strings.Contains(out, "showing the built-in a100 board, not this node's GPUs") {
		t.Errorf("without injection the library did not say the board is its built-in one:\n%s", out)
	}
}

func (d *draEnv) testSharedClaim(t *testing.T) {
	c := d.c
	ns := d.namespace(t, true)
	c.draCreateClaim(t, ns, "shared", draClaimSpec("", 1))
	var seen [][]string
	for _, p := range []string{"a", "b"} {
		c.create(t, ns, c.draPod(p, draGPUScript, "claim:shared"))
	}
	for _, p := range []string{"a", "b"} {
		c.waitPod(t, ns, p, 2*time.Minute, "Running", podRunning)
		seen = append(seen, d.seesItsAllocation(t, ns, p, c.waitLog(t, ns, p, "started")))
	}
	if len(seen[0]) != 1 || !slices.Equal(seen[0], seen[1]) {
		t.Errorf("pods sharing a claim see %v and %v, want the same one GPU", seen[0], seen[1])
	}
	cl, err := c.cs.ResourceV1().ResourceClaims(ns).Get(ctxT(t, 10*time.Second), "shared", metav1.GetOptions{})
	if err != nil || len(cl.Status.ReservedFor) != 2 {
		t.Errorf("claim shared: %v, reserved for %v, want both pods", err, cl.Status.ReservedFor)
	}
}

func (d *draEnv) testTwoClaims(t *testing.T) {
	c := d.c
	ns := d.namespace(t, true)
	c.draCreateTemplate(t, ns, draTemplate("one-gpu", "", 1))
	out := c.running(t, ns, c.draPod("two", draGPUScript, "one-gpu", "one-gpu"), "started")
	seen := d.seesItsAllocation(t, ns, "two", out)
	if len(seen) != 2 || seen[0] == seen[1] {
		t.Errorf("a pod with two claims sees %v, want two distinct GPUs", seen)
	}
}

func (d *draEnv) testCELArchitecture(t *testing.T) {
	c := d.c
	ns := d.namespace(t, true)
	arch := d.gpus[0].arch
	c.draCreateTemplate(t, ns, draTemplate("arch", fmt.Sprintf("device.attributes[%q].architecture == %q", draGPUDriver, arch), 1))
	out := c.running(t, ns, c.draPod("arch", draGPUScript, "arch"), "started")
	if seen := d.seesItsAllocation(t, ns, "arch", out); len(seen) != 1 {
		t.Errorf("a claim for one %s GPU: the pod sees %v", arch, seen)
	}
}

func (d *draEnv) testCELNoMatch(t *testing.T) {
	c := d.c
	ns := d.namespace(t, true)
	const product = "NVIDIA Imaginary 1TB"
	c.draCreateTemplate(t, ns, draTemplate("none", fmt.Sprintf("device.attributes[%q].productName == %q", draGPUDriver, product), 1))
	c.create(t, ns, c.draPod("pending", draGPUScript, "none"))
	// The scheduler says it cannot allocate the claim, and the pod stays so.
	p := c.waitPod(t, ns, "pending", time.Minute, "unschedulable", func(p *corev1.Pod) (bool, error) {
		if p.Status.Phase != corev1.PodPending {
			return false, fmt.Errorf("pod is %s", p.Status.Phase)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	msg := ""
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled {
			msg = cond.Message
		}
	}
	time.Sleep(5 * time.Second)
	p, err := c.cs.CoreV1().Pods(ns).Get(ctxT(t, 10*time.Second), "pending", metav1.GetOptions{})
	if err != nil || p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
		t.Errorf("a claim for a %q: pod %v, phase %s on %q; want Pending, unscheduled", product, err, p.Status.Phase, p.Spec.NodeName)
	}
	t.Logf("the scheduler: %s", msg)
}

// Ten rounds of a claim, a pod that uses it, and both deleted: no
// ResourceClaim is left, the kubelet plugin's checkpoint lists no prepared
// claim and no per-claim CDI spec stays in the runtime's CDI directory.
func (d *draEnv) testNoLeaks(t *testing.T) {
	c := d.c
	ns := d.namespace(t, true)
	cdiBefore := c.draClaimSpecs(t)
	for i := range 10 {
		name := fmt.Sprintf("round-%d", i)
		c.draCreateClaim(t, ns, name, draClaimSpec("", 1))
		r := c.run(t, ns, c.draPod(name, "nvidia-smi -L", "claim:"+name))
		if r.phase != corev1.PodSucceeded || len(uuidsIn(r.out)) != 1 {
			t.Fatalf("round %d: pod %s printed:\n%s", i, r.phase, r.out)
		}
		c.deletePod(ns, name)
		if err := c.cs.ResourceV1().ResourceClaims(ns).Delete(ctxT(t, 10*time.Second), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := ctxT(t, time.Minute)
	var claims, prepared, specs []string
	for {
		claims, prepared, specs = c.draClaimsIn(t, ns), c.draPrepared(t), c.draClaimSpecs(t)
		if len(claims) == 0 && len(prepared) == 0 && len(specs) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("after 10 rounds: ResourceClaims left %v; prepared claims in the plugin's checkpoint %v; CDI claim specs %v (before: %v)",
				claims, prepared, specs, cdiBefore)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (c *cluster) draClaimsIn(t testing.TB, ns string) []string {
	t.Helper()
	l, err := c.cs.ResourceV1().ResourceClaims(ns).List(ctxT(t, 10*time.Second), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var n []string
	for _, cl := range l.Items {
		n = append(n, cl.Name)
	}
	return n
}

// draPrepared are the claims the GPU kubelet plugin's checkpoint lists as
// prepared or being prepared, as "UID (state)" (a completed entry keeps no
// name or namespace).
func (c *cluster) draPrepared(t testing.TB) []string {
	t.Helper()
	p := filepath.Join(c.env["KUBELET_ROOT"], "plugins", draGPUDriver, "checkpoint.json")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("the GPU plugin's checkpoint: %v", err)
	}
	var cp struct {
		V2 struct {
			PreparedClaims map[string]struct {
				State string `json:"checkpointState"`
			} `json:"preparedClaims"`
		} `json:"v2"`
	}
	if err := json.Unmarshal(data, &cp); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	var n []string
	for uid, cl := range cp.V2.PreparedClaims {
		n = append(n, uid+" ("+cl.State+")")
	}
	slices.Sort(n)
	return n
}

// draClaimSpecs are the per-claim CDI specs in the runtime's CDI directory.
func (c *cluster) draClaimSpecs(t testing.TB) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(c.cdiDir(), draCDISpecs+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The compute-domain plugin, where the overlay lets it start, publishes the
// node's own devices: IMEX channel 0 and one daemon (the other channels,
// up to the driver's 2048, are not per node; its controller hands them out).
func (d *draEnv) testComputeDomainSlices(t *testing.T) {
	c := d.c
	if !d.computeDomains {
		testenv.Missing(t, "the overlay's %s (hostprep does not render it yet; docs/dra.md)", c.draProcDevices())
	}
	ctx := ctxT(t, time.Minute)
	if err := c.draWaitSlices(ctx, draCDDriver, 2); err != nil {
		t.Fatal(err)
	}
	devs, err := c.draSlices(ctx, draCDDriver)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, dev := range devs {
		typ, id := "<unset>", int64(-1)
		if s := dev.Attributes["type"].StringValue; s != nil {
			typ = *s
		}
		if v := dev.Attributes["id"].IntValue; v != nil {
			id = *v
		}
		got = append(got, fmt.Sprintf("%s %s %d", dev.Name, typ, id))
	}
	slices.Sort(got)
	if want := []string{"channel-0 channel 0", "daemon-0 daemon 0"}; !slices.Equal(got, want) {
		t.Errorf("ResourceSlices of %s list %q, want %q", draCDDriver, got, want)
	}
}

// A ComputeDomain on this node runs its IMEX daemon pod (the controller's
// DaemonSet, on the node the workload landed on) and becomes Ready, and the
// pod that claims its channel starts. The board has no multi-node NVLink
// fabric (its cluster UUID is zero, as on a real HGX node), so the driver
// starts no IMEX daemon process and, as it does there, gives the pod no
// IMEX channel device node. Deleting the ComputeDomain removes its
// daemons and the node's label.
func (d *draEnv) testComputeDomainWorkload(t *testing.T) {
	c := d.c
	if !d.computeDomains {
		testenv.Missing(t, "the overlay's %s (hostprep does not render it yet; docs/dra.md)", c.draProcDevices())
	}
	// Not opted in: the pod asks for no GPU, and nvmock would give it all.
	ns := d.namespace(t, false)
	dyn, label := c.draComputeDomain(t, ns, "cd", 0)
	const script = "ls -l /dev/nvidia-caps-imex-channels 2>&1; echo started; exec sleep 3600"
	c.create(t, ns, c.draPod("imex", script, "cd-channel"))
	c.waitPod(t, ns, "imex", 3*time.Minute, "Running", podRunning)
	out := c.waitLog(t, ns, "imex", "started")
	if !strings.Contains(out, "No such file or directory") {
		t.Errorf("the ComputeDomain's pod on a node without a fabric clique lists IMEX channels:\n%s", out)
	}
	got, err := dyn.Resource(draComputeDomains).Namespace(ns).Get(ctxT(t, 10*time.Second), "cd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st, _, _ := unstructured.NestedString(got.Object, "status", "status"); st != "Ready" {
		t.Errorf("ComputeDomain status %q, want Ready", st)
	}
	daemons, err := c.cs.CoreV1().Pods(draNS).List(ctxT(t, 10*time.Second), metav1.ListOptions{LabelSelector: label})
	if err != nil || len(daemons.Items) != 1 || daemons.Items[0].Spec.NodeName != c.node {
		t.Errorf("IMEX daemon pods of the ComputeDomain (%s): %v %v, want one on %s", label, err, daemons, c.node)
	}
}

var draComputeDomains = schema.GroupVersionResource{Group: "resource.nvidia.com", Version: "v1beta1", Resource: "computedomains"}

// draComputeDomain creates ComputeDomain name in ns, of numNodes nodes, with
// the channel claim template name-channel, and returns a client for it and
// the label of its daemon pods. When the test ends, before the namespace
// goes, it deletes the ComputeDomain (the controller removes the daemons,
// then its finalizer) and checks that the node lost its label.
func (c *cluster) draComputeDomain(t *testing.T, ns, name string, numNodes int64) (dynamic.Interface, string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"numNodes": numNodes, "channel": map[string]any{"resourceClaimTemplate": map[string]any{"name": name + "-channel"}}},
	}}
	created, err := dyn.Resource(draComputeDomains).Namespace(ns).Create(ctxT(t, 10*time.Second), cd, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ComputeDomain: %v", err)
	}
	label := draCDLabel + "=" + string(created.GetUID())
	t.Cleanup(func() {
		if err := c.draDeleteComputeDomains(context.Background(), ns); err != nil {
			t.Error(err)
		}
		if err := c.waitNoPods(context.Background(), draNS, label); err != nil {
			t.Error(err)
		}
		n, err := c.cs.CoreV1().Nodes().Get(context.Background(), c.node, metav1.GetOptions{})
		if err == nil && n.Labels[draCDLabel] != "" {
			t.Errorf("node %s keeps the label %s=%s after the ComputeDomain is gone", c.node, draCDLabel, n.Labels[draCDLabel])
		}
	})
	return dyn, label
}

// draCDLabel marks the nodes of a ComputeDomain (its UID), and its daemon pods.
const draCDLabel = "resource.nvidia.com/computeDomain"

// draDeleteComputeDomains deletes the ComputeDomains in ns (all: "") and
// waits until they are gone, while the driver's controller, which removes
// their finalizers, runs. No CRD: nothing to delete.
func (c *cluster) draDeleteComputeDomains(ctx context.Context, ns string) error {
	dyn, err := dynamic.NewForConfig(c.cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		l, err := dyn.Resource(draComputeDomains).Namespace(ns).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) || err == nil && len(l.Items) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list ComputeDomains: %w", err)
		}
		for _, cd := range l.Items {
			if cd.GetDeletionTimestamp() == nil {
				if err := dyn.Resource(draComputeDomains).Namespace(cd.GetNamespace()).Delete(ctx, cd.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("delete ComputeDomain %s/%s: %w", cd.GetNamespace(), cd.GetName(), err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ComputeDomains still there: %d (%v)", len(l.Items), ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
