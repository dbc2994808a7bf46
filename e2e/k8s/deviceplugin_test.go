//go:build k8s

package k8s

import (
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/ptr"

	"github.com/nvmock/nvmock/internal/testenv"
)

// NVIDIA's device plugin and GPU feature discovery, deployed with NVIDIA's
// chart, on the node nvmock's chart made: the node offers the overlay's
// GPUs, GFD describes the board, and each pod that asks for GPUs sees
// exactly the ones the device plugin allocated to it (nvmock's plugin reads
// the allocation from NVIDIA_VISIBLE_DEVICES; no NVIDIA runtime).

// gpuScript prints the GPUs a container sees and keeps it running.
const gpuScript = "nvidia-smi -L; echo started; exec sleep 3600"

func TestDevicePluginOffersTheNodesGPUs(t *testing.T) {
	c := theCluster
	c.nvidiaPlugin(t)
	node, err := c.cs.CoreV1().Nodes().Get(ctxT(t, 10*time.Second), c.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := int64(len(c.gpuLines()))
	capacity, allocatable := node.Status.Capacity[gpuResource], node.Status.Allocatable[gpuResource]
	if want != 8 || capacity.Value() != want || allocatable.Value() != want {
		t.Errorf("node %s: %s capacity %s, allocatable %s; want the overlay's %d (8)", c.node, gpuResource, capacity.String(), allocatable.String(), want)
	}
}

// The device plugin reads each GPU's NUMA node from sysfs, which the
// runtime hook shows its container as the node's PCI tree, and tells the
// kubelet; the kubelet's Topology Manager and the pod resources API
// (NFD's topology updater, NUMA-aware schedulers) take it from there.
func TestTheKubeletKnowsEachGPUsNUMANode(t *testing.T) {
	c := theCluster
	c.nvidiaPlugin(t)
	resp, err := c.podResources(t).GetAllocatableResources(ctxT(t, 10*time.Second), &podresources.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatalf("pod resources API: GetAllocatableResources: %v", err)
	}
	got := map[string]string{}
	for _, d := range resp.Devices {
		if d.ResourceName != string(gpuResource) {
			continue
		}
		var nodes []string
		for _, n := range d.GetTopology().GetNodes() {
			nodes = append(nodes, fmt.Sprint(n.ID))
		}
		for _, id := range d.DeviceIds {
			got[id] = strings.Join(nodes, ",")
		}
	}
	p := testenv.Profile(t, nvmockProfile, 0)
	want := map[string]string{}
	for i, id := range c.uuids() {
		want[id] = fmt.Sprint(p.Topology.NUMANodes[i%len(p.Topology.NUMANodes)])
	}
	if !maps.Equal(got, want) {
		t.Errorf("the kubelet's allocatable %s, by UUID to NUMA node:\n  %v\nwant the profile's:\n  %v", gpuResource, got, want)
	}
}

func TestGFDLabelsDescribeTheBoard(t *testing.T) {
	c := theCluster
	c.nvidiaPlugin(t)
	got := c.gfdLabels(t)

	// The truth: the real nvidia-smi on the host against the overlay.
	smi := filepath.Join(c.overlayRoot(), "driver", "usr", "bin", "nvidia-smi")
	q, err := exec.Command(smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits", "-i", "0").Output()
	if err != nil {
		t.Fatalf("nvidia-smi --query-gpu on the host: %v", err)
	}
	f := strings.Split(strings.TrimSpace(string(q)), ", ")
	if len(f) != 3 {
		t.Fatalf("nvidia-smi --query-gpu printed %q", q)
	}
	full, err := exec.Command(smi, "-q").Output()
	if err != nil {
		t.Fatalf("nvidia-smi -q on the host: %v", err)
	}
	cuda, arch := smiField(string(full), "CUDA Version"), smiField(string(full), "Product Architecture")
	want := map[string]string{
		"nvidia.com/gpu.product":                strings.ReplaceAll(f[0], " ", "-"),
		"nvidia.com/gpu.count":                  fmt.Sprint(len(c.gpuLines())),
		"nvidia.com/gpu.memory":                 f[1],
		"nvidia.com/gpu.family":                 strings.ToLower(arch),
		"nvidia.com/cuda.driver.major":          strings.Split(f[2], ".")[0],
		"nvidia.com/cuda.driver-version.full":   f[2],
		"nvidia.com/cuda.runtime-version.major": strings.Split(cuda, ".")[0],
		"nvidia.com/cuda.runtime-version.full":  cuda,
		// From the GPUs' PCI class in the pod's /sys: pcisim's tree, shown
		// by the plugin's hook (unknown without it).
		"nvidia.com/gpu.mode": "compute",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("GFD label %s=%q, want %q (nvidia-smi on the host)", k, got[k], v)
		}
	}
	// hostprep labels the node as GFD would: the same values for the keys both set.
	for k, v := range nodeLabels(t) {
		if g, ok := got[k]; ok && g != v {
			t.Errorf("GFD says %s=%q, hostprep labelled the node %q", k, g, v)
		}
	}
	if t.Failed() {
		t.Logf("GFD's labels:\n%s", labelLines(got))
	}
}

// smiField is the value of "NAME : value" in nvidia-smi -q output.
func smiField(out, name string) string {
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func labelLines(m map[string]string) string {
	var l []string
	for k, v := range m {
		l = append(l, k+"="+v)
	}
	slices.Sort(l)
	return strings.Join(l, "\n")
}

func TestAPodWithOneGPUSeesTheGPUTheDevicePluginAllocated(t *testing.T) {
	c := theCluster
	c.nvidiaPlugin(t)
	ns := c.namespace(t, true)
	out := c.running(t, ns, c.pod("one", gpuScript, 1), "started")
	c.seesItsAllocation(t, ns, "one", out)
	dev, err := c.exec(t, ns, "one", "main", "sh", "-c", "ls /dev | grep '^nvidia[0-9]'")
	if err != nil || len(testenv.Lines(dev)) != 1 {
		t.Errorf("the pod's GPU device nodes: %v:\n%s\nwant one", err, dev)
	}
}

func TestTwoPodsGetDifferentGPUs(t *testing.T) {
	c := theCluster
	c.nvidiaPlugin(t)
	ns := c.namespace(t, true)
	c.create(t, ns, c.pod("a", gpuScript, 1))
	c.create(t, ns, c.pod("b", gpuScript, 1))
	var got []string
	for _, p := range []string{"a", "b"} {
		c.waitPod(t, ns, p, 2*time.Minute, "Running", podRunning)
		got = append(got, c.seesItsAllocation(t, ns, p, c.waitLog(t, ns, p, "started")))
	}
	if got[0] == got[1] {
		t.Errorf("both pods see %s", got[0])
	}
}

func TestDeploymentReplicasEachSeeOneGPU(t *testing.T) {
	c := theCluster
	c.nvidiaPlugin(t)
	ns := c.namespace(t, true)
	labels := map[string]string{"app": "gpu"}
	spec := c.podSpec(gpuScript, 1)
	spec.RestartPolicy = corev1.RestartPolicyAlways
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
	if _, err := c.cs.AppsV1().Deployments(ns).Create(ctxT(t, 10*time.Second), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := c.waitPods(t, ns, "app=gpu", 2, podRunning)
	var got []string
	for _, p := range pods {
		got = append(got, c.seesItsAllocation(t, ns, p.Name, c.waitLog(t, ns, p.Name, "started")))
	}
	if got[0] == got[1] {
		t.Errorf("both replicas see %s", got[0])
	}
}

func TestJobCompletionsEachSeeOneGPU(t *testing.T) {
	c := theCluster
	c.nvidiaPlugin(t)
	ns := c.namespace(t, true)
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
		Spec: batchv1.JobSpec{
			Completions: ptr.To[int32](2), Parallelism: ptr.To[int32](2), BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: c.podSpec("nvidia-smi -L", 1)},
		},
	}
	if _, err := c.cs.BatchV1().Jobs(ns).Create(ctxT(t, 10*time.Second), j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := c.waitPods(t, ns, "batch.kubernetes.io/job-name=gpu", 2, podFinished)
	for _, p := range pods {
		out := c.logs(t, ns, p.Name, "")
		u := uuidsIn(out)
		if p.Status.Phase != corev1.PodSucceeded || len(u) != 1 || !slices.Contains(c.uuids(), u[0]) {
			t.Errorf("job pod %s (%s) printed:\n%s\nwant one of the node's GPUs", p.Name, p.Status.Phase, out)
		}
	}
	// The job controller counts the pods after they end.
	deadline := time.Now().Add(30 * time.Second)
	for {
		job, err := c.cs.BatchV1().Jobs(ns).Get(ctxT(t, 10*time.Second), "gpu", metav1.GetOptions{})
		if err == nil && job.Status.Succeeded == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job: %v, status %+v, want 2 succeeded", err, job.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
