//go:build k8s

package k8s

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// NVIDIA's device plugin with the mixed MIG strategy, in its pod, on a
// node with a partitioned GPU: it offers the GPU's MIG devices as
// nvidia.com/mig-1g.10gb beside the other GPUs, and a pod asking for one
// sees its GPU with exactly the MIG device the plugin allocated. The
// plugin finds a MIG device's capability nodes through its container's
// /proc/driver/nvidia-caps/mig-minors, which nvmock's runtime hook shows.
func TestDevicePluginMixedStrategyGivesAPodAMIGDevice(t *testing.T) {
	c := theCluster
	c.nvidiaPlugin(t)
	run := func(args ...string) string { t.Helper(); return c.mustSMI(t, args...) }
	gpus := len(c.truth)
	last := strconv.Itoa(gpus - 1)
	run("-i", last, "-mig", "1")
	t.Cleanup(func() {
		run("mig", "-i", last, "-dci")
		run("mig", "-i", last, "-dgi")
		run("-i", last, "-mig", "0")
		ctx := ctxT(t, 4*time.Minute)
		if err := c.nvidiaRelease(ctx, nil); err != nil {
			t.Error(err)
		} else if err := c.waitAllocatable(ctx, gpus); err != nil {
			t.Errorf("after MIG was undone: %v", err)
		}
	})
	run("mig", "-i", last, "-cgi", "19,19", "-C")
	m := regexp.MustCompile(`(?m)^GPU ` + last + `: .* \(UUID: (GPU-[0-9a-f-]+)\)\n  MIG 1g.10gb\s+Device  0: \(UUID: (MIG-[0-9a-f-]+)\)\n  MIG 1g.10gb\s+Device  1: \(UUID: (MIG-[0-9a-f-]+)\)\n`).FindStringSubmatch(run("-L"))
	if m == nil {
		t.Fatalf("nvidia-smi -L on the node lacks GPU %s's two 1g.10gb devices", last)
	}
	parent := m[1]

	ctx := ctxT(t, 4*time.Minute)
	if err := c.nvidiaRelease(ctx, map[string]any{"migStrategy": "mixed"}); err != nil {
		t.Fatal(err)
	}
	const mig = corev1.ResourceName("nvidia.com/mig-1g.10gb")
	if err := c.waitResource(ctx, mig, 2); err != nil {
		t.Fatal(err)
	}
	if err := c.waitAllocatable(ctx, gpus-1); err != nil {
		t.Errorf("whole GPUs beside the MIG devices: %v", err)
	}

	ns := c.namespace(t, true)
	p := c.pod("mig", gpuScript, 0)
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{mig: resource.MustParse("1")}
	out := c.running(t, ns, p, "started")
	alloc := c.allocatedOf(t, ns, "mig", mig)
	if len(alloc) != 1 || (alloc[0] != m[2] && alloc[0] != m[3]) {
		t.Fatalf("the device plugin allocated %v, want one of %s, %s", alloc, m[2], m[3])
	}
	re := regexp.MustCompile(`^GPU 0: .* \(UUID: ` + parent + `\)\n  MIG 1g.10gb\s+Device  0: \(UUID: ` + alloc[0] + `\)\nstarted\n$`)
	if !re.MatchString(out) {
		t.Errorf("pod printed:\n%swant GPU 0 (%s) with the MIG device %s alone", out, parent, alloc[0])
	}
}
