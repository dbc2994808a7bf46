//go:build k8s

package k8s

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testMPS: with the driver's MPSSupport gate, a claim whose GpuConfig asks
// for MPS sharing makes the kubelet plugin put its GPU in
// Exclusive_Process and start a control daemon for it (a Deployment that
// runs the driver root's nvidia-cuda-mps-control, which the overlay
// ships); the pod gets the daemon's pipe directory from the claim's CDI
// spec and reaches it, and the daemon has the config's active thread
// percentage. When the pod goes, the daemon's Deployment goes too.
func (d *draEnv) testMPS(t *testing.T) {
	c := d.c
	d.withFeatureGates(t, map[string]any{"MPSSupport": true})

	ns := d.namespace(t, true)
	c.draCreateTemplate(t, ns, draSharingTemplate("mps", `{"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 40}}`))
	script := "nvidia-smi -L; echo $CUDA_MPS_PIPE_DIRECTORY; echo get_default_active_thread_percentage | nvidia-cuda-mps-control; echo started; exec sleep 3600"
	out := c.running(t, ns, c.draPod("mps", script, "mps"), "started")
	seen := uuidsIn(out)
	alloc := d.allocated(t, ns, "mps")
	if len(seen) != 1 || len(alloc) != 1 || seen[0] != alloc[0] {
		t.Fatalf("the pod sees %v, the scheduler allocated %v; want the one GPU. It printed:\n%s", seen, alloc, out)
	}
	idx := -1
	for i, g := range d.gpus {
		if g.uuid == alloc[0] {
			idx = i
		}
	}
	t.Cleanup(func() { c.nodeSMI("-i", strconv.Itoa(idx), "-c", "DEFAULT") })
	want := regexp.MustCompile(`^GPU 0: [^\n]* \(UUID: ` + alloc[0] + `\)\n/tmp/nvidia-mps\n40.0\nstarted\n$`)
	if !want.MatchString(out) {
		t.Errorf("the pod printed:\n%swant its GPU, the daemon's pipe directory and the config's 40.0", out)
	}
	mode := strings.TrimSpace(c.mustSMI(t, "-i", strconv.Itoa(idx), "--query-gpu=compute_mode", "--format=csv,noheader"))
	if mode != "Exclusive_Process" {
		t.Errorf("GPU %d's compute mode under its MPS daemon: %q, want Exclusive_Process", idx, mode)
	}

	daemons := func() []string {
		t.Helper()
		deps, err := c.cs.AppsV1().Deployments(draNS).List(ctxT(t, 10*time.Second), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, dep := range deps.Items {
			if strings.HasPrefix(dep.Name, "mps-control-daemon-") {
				names = append(names, dep.Name)
			}
		}
		return names
	}
	if n := daemons(); len(n) != 1 {
		t.Errorf("MPS daemon Deployments while the pod runs: %v, want one", n)
	}

	c.deletePod(ns, "mps")
	deadline := time.Now().Add(2 * time.Minute)
	for n := daemons(); len(n) != 0; n = daemons() {
		if time.Now().After(deadline) {
			t.Fatalf("the MPS daemon's Deployment %v is still there after the pod went%s", n, c.podLogs(draNS, ""))
		}
		time.Sleep(500 * time.Millisecond)
	}
}
