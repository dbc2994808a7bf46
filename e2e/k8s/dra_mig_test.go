//go:build k8s

package k8s

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The DRA driver on a partitioned GPU (static MIG): made with the real
// nvidia-smi on the node, its MIG devices are published in the GPU's place,
// each with its profile, UUID and parent, once the kubelet plugin restarts
// (it enumerates at start, as on a real node after mig-parted).
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
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ResourceSlices: MIG devices %v (%v), want %v of parent %s%s", got, err, want, parent, c.podLogs(draNS, ""))
		}
		time.Sleep(500 * time.Millisecond)
	}
}
