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
	last := strconv.Itoa(len(d.gpus) - 1)
	run := func(args ...string) string { t.Helper(); return c.mustSMI(t, args...) }
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
	c.draCreateTemplate(t, ns, draMIGTemplate("one-mig", fmt.Sprintf(`device.attributes["gpu.nvidia.com"].profile == %q`, profile)))
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

// testDynamicMIG: with the driver's DynamicMIG gate, a Hopper GPU whose
// MIG is off is published as every MIG device its profiles and placements
// allow (partitionable devices sharing its memory slices), as on a real
// node with a 550+ driver, which answers them with MIG off; a claim for a
// 1g.10gb makes the kubelet plugin turn MIG on and create that GPU and
// compute instance through NVML when it prepares the claim (in its
// container, with the writable live state nvmock gives a container asking
// for the MIG config capability), the pod sees exactly it, and the host's
// nvidia-smi shows it; deleting the pod destroys it and turns MIG off.
func (d *draEnv) testDynamicMIG(t *testing.T) {
	c := d.c
	last := strconv.Itoa(len(d.gpus) - 1)
	parent := d.gpus[len(d.gpus)-1].uuid
	run := c.nodeSMI
	must := func(args ...string) string { t.Helper(); return c.mustSMI(t, args...) }
	if mode := must("-i", last, "--query-gpu=mig.mode.current", "--format=csv,noheader"); strings.TrimSpace(mode) != "Disabled" {
		t.Fatalf("GPU %s starts with MIG mode %q, want Disabled", last, mode)
	}
	d.withFeatureGates(t, map[string]any{"DynamicMIG": true})
	// Before the release goes back (cleanups run last first).
	t.Cleanup(func() {
		run("mig", "-i", last, "-dci")
		run("mig", "-i", last, "-dgi")
		run("-i", last, "-mig", "0")
	})
	var placements []string
	deadline := time.Now().Add(3 * time.Minute)
	for {
		devs, _ := c.draSlices(ctxT(t, 10*time.Second), draGPUDriver)
		placements = placements[:0]
		for _, dev := range devs {
			a := dev.Attributes
			if typ, par, prof := a["type"].StringValue, a["parentUUID"].StringValue, a["profile"].StringValue; typ != nil && *typ == "mig" &&
				par != nil && *par == parent && prof != nil && *prof == "1g.10gb" && len(dev.ConsumesCounters) > 0 {
				placements = append(placements, dev.Name)
			}
		}
		// h100's 1g.10gb has seven placements (0 to 6).
		if len(placements) == 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ResourceSlices: 1g.10gb devices of %s %v, want the seven placements as partitionable devices%s", parent, placements, c.podLogs(draNS, ""))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("dynamic 1g.10gb devices of GPU %s: %v", last, placements)

	ns := d.namespace(t, true)
	c.draCreateTemplate(t, ns, draMIGTemplate("dyn-mig",
		fmt.Sprintf(`device.attributes["gpu.nvidia.com"].profile == "1g.10gb" && device.attributes["gpu.nvidia.com"].parentUUID == %q`, parent)))
	out := c.running(t, ns, c.draPod("dyn", draGPUScript, "dyn-mig"), "started")
	m := regexp.MustCompile(`(?m)^GPU ` + last + `: .*\n  MIG 1g.10gb\s+Device  0: \(UUID: (MIG-[0-9a-f-]+)\)\n(GPU|\z)`).FindStringSubmatch(must("-L"))
	if m == nil {
		t.Fatalf("the host's nvidia-smi -L does not show GPU %s with one 1g.10gb made by the driver:\n%s", last, must("-L"))
	}
	re := regexp.MustCompile(`^GPU 0: .* \(UUID: ` + parent + `\)\n  MIG 1g.10gb\s+Device  0: \(UUID: ` + m[1] + `\)\nstarted\n$`)
	if !re.MatchString(out) {
		t.Errorf("pod printed:\n%swant GPU 0 (%s) with the MIG device %s the driver made", out, parent, m[1])
	}
	t.Logf("the driver made %s on GPU %s for the claim; the pod printed:\n%s", m[1], last, out)

	c.deletePod(ns, "dyn")
	deadline = time.Now().Add(3 * time.Minute)
	for {
		l, mode := must("-L"), must("-i", last, "--query-gpu=mig.mode.current", "--format=csv,noheader")
		if !strings.Contains(l, m[1]) && strings.TrimSpace(mode) == "Disabled" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the pod went: MIG mode %q, nvidia-smi -L:\n%swant %s destroyed and MIG off%s", mode, l, m[1], c.podLogs(draNS, ""))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// nodeSMI runs the overlay's nvidia-smi on the node, as an operator would.
func (c *cluster) nodeSMI(args ...string) (string, error) {
	out, err := exec.Command(filepath.Join(c.overlayRoot(), "driver", "usr", "bin", "nvidia-smi"), args...).CombinedOutput()
	return string(out), err
}

// mustSMI is nodeSMI, failing the test when nvidia-smi fails.
func (c *cluster) mustSMI(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.nodeSMI(args...)
	if err != nil {
		t.Fatalf("nvidia-smi %s on the node: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// draMIGTemplate is a ResourceClaimTemplate for one device of the driver's
// mig.nvidia.com class that the CEL expression selects.
func draMIGTemplate(name, cel string) *resourcev1.ResourceClaimTemplate {
	req := &resourcev1.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: cel}}}}
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "mig", Exactly: req}}}}},
	}
}
