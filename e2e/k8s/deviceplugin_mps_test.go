//go:build k8s

package k8s

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// mpsCapable is the node label NVIDIA's chart runs its MPS control daemon
// on; GFD's NFD sets it on a real node, and NFD does not run here.
const mpsCapable = "nvidia.com/mps.capable"

// NVIDIA's device plugin sharing each GPU by MPS, deployed by NVIDIA's
// chart with a config map: its MPS control daemon's pod puts every GPU in
// Exclusive_Process and starts nvidia-cuda-mps-control (the driver's, as
// the overlay ships it), the plugin offers two replicas a GPU, and a pod
// given one reaches the daemon through the pipe directory the plugin
// mounts. Without MPS again, the daemon's pod leaves and puts the GPUs
// back in Default.
func TestDevicePluginSharesEachGPUByMPS(t *testing.T) {
	c := theCluster
	c.nvidiaPlugin(t)
	gpus := len(c.truth)
	modes := func() string {
		t.Helper()
		return strings.TrimSpace(c.mustSMI(t, "--query-gpu=compute_mode", "--format=csv,noheader"))
	}
	all := func(mode string) string { return strings.TrimSpace(strings.Repeat(mode+"\n", gpus)) }
	if got := modes(); got != all("Default") {
		t.Fatalf("compute modes before MPS:\n%s\nwant Default on all %d GPUs", got, gpus)
	}

	c.labelNode(t, mpsCapable, "true")
	t.Cleanup(func() {
		// The label first: the daemon's pod leaves at once, rather than
		// restart without a config during the upgrade.
		c.labelNode(t, mpsCapable, "")
		// Uninstalled rather than upgraded: an upgrade that drops the
		// config map drops the chart's service account too, but the
		// DaemonSets' pods keep naming it (the API server refills
		// serviceAccountName from the deprecated serviceAccount field,
		// which the upgrade's patch leaves), and are refused.
		if err := c.helmUninstall(ctxT(t, 3*time.Minute), nvidiaRelease, nvidiaNS); err != nil {
			t.Error(err)
			return
		}
		c.nvidiaPlugin(t)
		if got := modes(); got != all("Default") {
			t.Errorf("compute modes after the MPS daemon left:\n%s\nwant Default again", got)
		}
	})
	mps := `version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
`
	ctx := ctxT(t, 4*time.Minute)
	err := c.nvidiaRelease(ctx, map[string]any{"config": map[string]any{"map": map[string]any{"mps": mps}, "default": "mps"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.waitAllocatable(ctx, 2*gpus); err != nil {
		t.Fatalf("two MPS replicas a GPU: %v%s", err, c.podLogs(nvidiaNS, ""))
	}
	if got := modes(); got != all("Exclusive_Process") {
		t.Errorf("compute modes under the MPS daemon:\n%s\nwant Exclusive_Process on all %d GPUs", got, gpus)
	}
	// GFD, given the same config, says the node can run the MPS daemon:
	// the label NFD publishes on a real node.
	l := c.gfdLabels(t)
	for deadline := time.Now().Add(time.Minute); l["nvidia.com/gpu.sharing-strategy"] != "mps" && time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		l = c.gfdLabels(t)
	}
	for k, v := range map[string]string{
		mpsCapable:                        "true",
		"nvidia.com/gpu.sharing-strategy": "mps",
		"nvidia.com/gpu.replicas":         "2",
	} {
		if l[k] != v {
			t.Errorf("GFD label %s=%q, want %q; all:\n%s", k, l[k], v, labelLines(l))
		}
	}
	if p := l["nvidia.com/gpu.product"]; !strings.HasSuffix(p, "-SHARED") {
		t.Errorf("GFD label nvidia.com/gpu.product=%q, want the product with -SHARED", p)
	}

	ns := c.namespace(t, true)
	p := c.pod("mps", "nvidia-smi -L; echo $CUDA_MPS_PIPE_DIRECTORY; echo get_default_active_thread_percentage | nvidia-cuda-mps-control; echo started; exec sleep 3600", 1)
	out := c.running(t, ns, p, "started")
	alloc := c.allocated(t, ns, "mps")
	if len(alloc) != 1 {
		t.Fatalf("the device plugin allocated %v, want one replica", alloc)
	}
	uuid, _, _ := strings.Cut(alloc[0], "::")
	// The daemon gives each client 100 / replicas per cent of the SMs.
	want := regexp.MustCompile(`^GPU 0: [^\n]* \(UUID: ` + uuid + `\)\n/mps/nvidia.com/gpu/pipe\n50.0\nstarted\n$`)
	if !want.MatchString(out) {
		t.Errorf("the MPS pod printed:\n%swant GPU 0 (%s), the plugin's pipe directory and the daemon's 50.0", out, uuid)
	}
}

// labelNode sets a label on the node, or removes it when value is "".
func (c *cluster) labelNode(t testing.TB, key, value string) {
	t.Helper()
	v := any(value)
	if value == "" {
		v = nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: v}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.cs.CoreV1().Nodes().Patch(ctxT(t, 10*time.Second), c.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("label node %s with %s=%q: %v", c.node, key, value, err)
	}
}
