//go:build k8s

package k8s

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The DRA driver on a partitioned GPU (static MIG): made with the real
// nvidia-smi on the node, its MIG devices are published in the GPU's place,
// each with its profile, UUID and parent, once the kubelet plugin restarts
// (it enumerates at start, as on a real node after mig-parted); a pod
// claiming one sees exactly it.
func (d *draEnv) testMIGSlices(t *testing.T) {
	c := d.c
	smi := filepath.Join(c.draDriverRoot(), "usr", "bin", "nvidia-smi")
	last := strconv.Itoa(len(d.gpus) - 1)
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(smi, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("nvidia-smi %s on the node: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	restart := func() {
		t.Helper()
		err := c.cs.CoreV1().Pods(draNS).DeleteCollection(ctxT(t, 30*time.Second), metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: "nvidia-dra-driver-gpu-component=kubelet-plugin"})
		if err != nil {
			t.Fatalf("restart the kubelet plugin: %v", err)
		}
	}
	run("-i", last, "-mig", "1")
	t.Cleanup(func() {
		run("mig", "-i", last, "-dci")
		run("mig", "-i", last, "-dgi")
		run("-i", last, "-mig", "0")
		restart()
		if err := c.draWaitSlices(ctxT(t, 3*time.Minute), draGPUDriver, len(d.gpus)); err != nil {
			t.Errorf("after MIG was undone: %v", err)
		}
	})
	run("mig", "-i", last, "-cgi", "9,19", "-C")
	m := regexp.MustCompile(`(?m)^GPU ` + last + `: .* \(UUID: (GPU-[0-9a-f-]+)\)\n  MIG (\S+)\s+Device  0: \(UUID: (MIG-[0-9a-f-]+)\)\n  MIG (\S+)\s+Device  1: \(UUID: (MIG-[0-9a-f-]+)\)`).FindStringSubmatch(run("-L"))
	if m == nil {
		t.Fatalf("nvidia-smi -L on the node lacks GPU %s's two MIG devices", last)
	}
	parent, want := m[1], map[string]string{m[3]: m[2], m[5]: m[4]}
	restart()

	deadline := time.Now().Add(3 * time.Minute)
	for {
		devs, err := c.draSlices(ctxT(t, 10*time.Second), draGPUDriver)
		got := map[string]string{}
		var gpus []string
		for _, dev := range devs {
			a := dev.Attributes
			typ, uuid, profile, par := a["type"].StringValue, a["uuid"].StringValue, a["profile"].StringValue, a["parentUUID"].StringValue
			switch {
			case typ != nil && *typ == "mig" && uuid != nil && profile != nil && par != nil && *par == parent:
				got[*uuid] = *profile
			case typ != nil && *typ == "gpu" && uuid != nil:
				gpus = append(gpus, *uuid)
			}
		}
		if err == nil && len(got) == 2 && got[m[3]] == want[m[3]] && got[m[5]] == want[m[5]] {
			if slices.Contains(gpus, parent) {
				t.Errorf("GPU %s in MIG mode is still published whole", parent)
			}
			if len(gpus) != len(d.gpus)-1 {
				t.Errorf("%d whole GPUs published beside the MIG devices, want %d", len(gpus), len(d.gpus)-1)
			}
			t.Logf("published MIG devices of %s: %v", parent, got)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ResourceSlices: MIG devices %v (%v), want %v of parent %s%s", got, err, want, parent, c.podLogs(draNS, ""))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Run("APodClaimingAMIGDeviceSeesExactlyIt", func(t *testing.T) { d.draMIGPod(t, parent, m[4], want) })
}

// draMIGPod: a pod claiming one MIG device of the profile through the
// driver's mig.nvidia.com class prints its GPU and exactly that MIG device
// with nvidia-smi -L, and has the device's two capability nodes. The
// driver's kubelet plugin reads the device's capability files in its
// container's /proc/driver/nvidia/capabilities to prepare the claim, which
// nvmock's runtime hook shows there.
func (d *draEnv) draMIGPod(t *testing.T, parent, profile string, uuids map[string]string) {
	c := d.c
	ns := d.namespace(t, true)
	cel := fmt.Sprintf(`device.attributes["gpu.nvidia.com"].profile == %q`, profile)
	req := &resourcev1.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: cel}}}}
	c.draCreateTemplate(t, ns, &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "one-mig"},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "mig", Exactly: req}}}}},
	})
	out := c.running(t, ns, c.draPod("mig", draGPUScript, "one-mig"), "started")
	t.Logf("the claim's CDI spec: %s", c.draSpecSummary(t, d.claimUIDs(t, ns, "mig")))
	alloc := d.allocated(t, ns, "mig")
	if len(alloc) != 1 || uuids[alloc[0]] != profile {
		t.Fatalf("the scheduler allocated %v, want one %s device of %v", alloc, profile, uuids)
	}
	re := regexp.MustCompile(`^GPU 0: .* \(UUID: ` + parent + `\)\n  MIG ` + regexp.QuoteMeta(profile) + `\s+Device  0: \(UUID: ` + alloc[0] + `\)\nstarted\n$`)
	if !re.MatchString(out) {
		t.Errorf("pod printed:\n%swant GPU 0 (%s) with its MIG device %s alone", out, parent, alloc[0])
	}
	caps, err := c.exec(t, ns, "mig", "main", "ls", "/dev/nvidia-caps")
	if err != nil || len(strings.Fields(caps)) != 2 {
		t.Errorf("the pod's capability nodes: %v:\n%s\nwant the GPU and compute instance's two", err, caps)
	}
}
