//go:build k8s

package k8s

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
)

// The chart's tests: the release TestMain installed, helm upgrade and helm
// uninstall, each checked on the node and in unmodified containers.

const nvmockDaemonSet = nvmockRelease + "-" + nvmockPool

func TestChartMakesTheNodeAGPUNodeAndItsPluginRegisters(t *testing.T) {
	c := theCluster
	ctx := ctxT(t, time.Minute)

	// The DaemonSet, scheduled by the real controller on the node.
	ds, err := c.cs.AppsV1().DaemonSets(nvmockNS).Get(ctx, nvmockDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := ds.Status; s.DesiredNumberScheduled != 1 || s.NumberReady != 1 {
		t.Errorf("DaemonSet %s: %d scheduled, %d ready; want 1 and 1", ds.Name, s.DesiredNumberScheduled, s.NumberReady)
	}
	p := c.pluginPod(t)
	if p.Spec.NodeName != c.node || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Kind != "DaemonSet" || p.OwnerReferences[0].Name != ds.Name {
		t.Errorf("pod %s on %q owned by %v; want on %s, owned by DaemonSet %s", p.Name, p.Spec.NodeName, p.OwnerReferences, c.node, ds.Name)
	}

	// Its init containers installed the overlay, the CDI spec, the NFD
	// file and the node's labels, then applied the live values (none: a
	// static node). The uninstall sidecar before them runs on.
	if len(p.Status.InitContainerStatuses) != 3 {
		t.Fatalf("pod %s: %d init container statuses, want uninstall, hostprep and live", p.Name, len(p.Status.InitContainerStatuses))
	}
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == "uninstall" {
			if s.State.Running == nil {
				t.Errorf("the uninstall sidecar: %+v, want running", s.State)
			}
		} else if st := s.State.Terminated; st == nil || st.ExitCode != 0 {
			t.Errorf("init container %s: %+v, want exited 0", s.Name, s.State)
		}
	}
	out := c.logs(t, nvmockNS, p.Name, "hostprep")
	if want := fmt.Sprintf("8 x NVIDIA H100 80GB HBM3 (profile %s, node %s)", nvmockProfile, c.node); !strings.Contains(out, want) {
		t.Errorf("hostprep printed:\n%s\nwant a line with %q", out, want)
	}
	link, err := os.Readlink(filepath.Join(c.overlayRoot(), "driver"))
	if err != nil || !strings.HasPrefix(link, "overlays/") {
		t.Errorf("driver root %s/driver: %q, %v; want a link into overlays/", c.overlayRoot(), link, err)
	}
	for _, f := range []string{filepath.Join(c.cdiDir(), hostprep.CDIFile), filepath.Join(c.nfdDir(), hostprep.NFDFile)} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("install wrote no %s: %v", f, err)
		}
	}
	node, err := c.cs.CoreV1().Nodes().Get(ctx, c.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range nodeLabels(t) {
		if node.Labels[k] != v {
			t.Errorf("node label %s=%q, want %q", k, node.Labels[k], v)
		}
	}

	// The plugin: ready on its port, registered with containerd.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + p.Status.PodIP + ":9464/readyz")
	if err != nil {
		t.Errorf("plugin /readyz: %v", err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusOK {
		t.Errorf("plugin /readyz: %s", resp.Status)
	}
	clog, err := os.ReadFile(filepath.Join(c.dir, "logs", "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(clog), `registered as \"10-nvmock\"`) {
		t.Errorf("containerd's log has no registration of the plugin 10-nvmock:\n%s", grepLines(string(clog), "nri", 20))
	}

	// An unmodified container in an opted-in namespace sees the node's GPUs.
	ns := c.namespace(t, true)
	r := c.run(t, ns, c.pod("smi", "nvidia-smi -L", 0))
	if r.phase != corev1.PodSucceeded || !slices.Equal(testenv.Lines(r.out), c.gpuLines()) {
		t.Errorf("nvidia-smi -L in a pod (%s):\n%s\nwant the node's GPUs:\n%s", r.phase, r.out, strings.Join(c.gpuLines(), "\n"))
	}
}

func TestHelmUpgradeRollsThePluginAndLeavesRunningGPUPodsAlone(t *testing.T) {
	c := theCluster
	ns := c.namespace(t, true)
	// ibping -S holds a umad device across the upgrade: the old daemon's
	// going must not end it (the shim moves it to the new daemon).
	gpu := c.pod("long", "nvidia-smi -L; ibping -C mlx5_0 -S & echo started; exec sleep 3600", 0)
	gpu.Annotations = map[string]string{"nvmock.io/gpus": "2"}
	gpu.Spec.Containers[0].Image = c.image("rdma")
	before := c.running(t, ns, gpu, "started")
	if got := uuidsIn(before); len(got) != 2 {
		t.Fatalf("the pod with nvmock.io/gpus: 2 printed:\n%s", before)
	}
	smiBefore, err := c.exec(t, ns, "long", "main", "nvidia-smi", "-L")
	if err != nil || smiBefore != strings.SplitN(before, "started", 2)[0] {
		t.Fatalf("exec nvidia-smi -L: %v:\n%s\nwant what the pod printed at start:\n%s", err, smiBefore, before)
	}
	const ping = "ibping -C mlx5_0 -c 1 $(($(cat /sys/class/infiniband/mlx5_0/ports/1/lid)))"
	if out, err := c.exec(t, ns, "long", "main", "sh", "-c", ping); err != nil || !strings.Contains(out, "Pong from") {
		t.Errorf("ibping to the pod's own ibping -S before the upgrade: %v:\n%s", err, out)
	}
	podBefore, _ := c.cs.CoreV1().Pods(ns).Get(ctxT(t, 10*time.Second), "long", metav1.GetOptions{})
	plugin := c.pluginPod(t)
	link, _ := os.Readlink(filepath.Join(c.overlayRoot(), "driver"))

	// A changed value changes the pod template: the DaemonSet rolls its pod.
	t.Cleanup(func() {
		if err := c.installNvmock(context.Background(), c.nvmockValues(nil)); err != nil {
			t.Errorf("restore the suite's values: %v", err)
		}
	})
	if err := c.installNvmock(ctxT(t, 4*time.Minute), c.nvmockValues(map[string]any{"logLevel": "debug"})); err != nil {
		t.Fatal(err)
	}
	rolled := c.pluginPod(t)
	if rolled.UID == plugin.UID {
		t.Fatalf("helm upgrade did not roll the plugin's pod %s", plugin.Name)
	}
	if !slices.Contains(rolled.Spec.Containers[0].Args, "--log-level=debug") {
		t.Errorf("the new pod %s runs %q, want --log-level=debug", rolled.Name, rolled.Spec.Containers[0].Args)
	}

	// The GPU pod kept running, untouched, and its nvidia-smi still works.
	podAfter, err := c.cs.CoreV1().Pods(ns).Get(ctxT(t, 10*time.Second), "long", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if podAfter.UID != podBefore.UID || podAfter.Status.Phase != corev1.PodRunning || podAfter.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the GPU pod after the upgrade: %s (uid %s, was %s)", podState(podAfter), podAfter.UID, podBefore.UID)
	}
	smiAfter, err := c.exec(t, ns, "long", "main", "nvidia-smi", "-L")
	if err != nil || smiAfter != smiBefore {
		t.Errorf("exec nvidia-smi -L after the upgrade: %v:\n%s\nwant as before:\n%s", err, smiAfter, smiBefore)
	}
	// The ibping -S started before the upgrade answers through the new
	// daemon (it comes back within a second of the old one's going).
	var pong string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(time.Second) {
		pong, err = c.exec(t, ns, "long", "main", "sh", "-c", ping)
		if (err == nil && strings.Contains(pong, "Pong from")) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || !strings.Contains(pong, "Pong from") {
		t.Errorf("ibping to the pod's own ibping -S after the upgrade: %v:\n%s", err, pong)
	}
	// The old pod's preStop kept the overlay (the DaemonSet still runs on
	// the node), and the new pod's install found the same inputs.
	if after, _ := os.Readlink(filepath.Join(c.overlayRoot(), "driver")); after != link {
		t.Errorf("the driver root moved from %s to %s across the upgrade", link, after)
	}
	if out := c.logs(t, nvmockNS, rolled.Name, "hostprep"); !strings.Contains(out, "unchanged:") {
		t.Errorf("the new pod's hostprep printed:\n%s\nwant unchanged: (the same inputs over the kept overlay)", out)
	}
	// And the new plugin serves new containers.
	r := c.run(t, ns, c.pod("after", "nvidia-smi -L", 0))
	if !slices.Equal(testenv.Lines(r.out), c.gpuLines()) {
		t.Errorf("nvidia-smi -L in a pod created after the upgrade:\n%s\nwant the node's GPUs", r.out)
	}
}

// A helm upgrade that moves overlayRoot moves each node's install: the old
// pod's preStop uninstalls from the old root (its DaemonSet now installs
// elsewhere), the new pod installs at the new one, and pods created then
// get their GPUs. Found in review: the old root stayed, and the new install
// stopped at the CDI spec the old one had written.
func TestHelmUpgradeThatMovesTheOverlayRootMovesTheInstall(t *testing.T) {
	c := theCluster
	ns := c.namespace(t, true)
	moved := c.overlayRoot() + "-moved"
	t.Cleanup(func() {
		if err := c.installNvmock(context.Background(), c.nvmockValues(nil)); err != nil {
			t.Errorf("restore the suite's values: %v", err)
		}
		if _, err := os.Lstat(filepath.Join(moved, "driver")); err == nil {
			t.Errorf("moving back left the driver root in %s", moved)
		}
		os.RemoveAll(moved)
	})
	ctx := ctxT(t, 4*time.Minute)
	if err := c.helmInstall(ctx, nvmockRelease, nvmockNS, nvmockChart(), c.nvmockValues(map[string]any{"overlayRoot": moved}), true); err != nil {
		t.Fatal(err)
	}
	if err := c.waitRollout(ctx, nvmockNS, nvmockRelease); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(c.overlayRoot(), "driver")); err == nil {
		t.Errorf("the old root %s still has its driver root", c.overlayRoot())
	}
	if link, err := os.Readlink(filepath.Join(moved, "driver")); err != nil || !strings.HasPrefix(link, "overlays/") {
		t.Errorf("the new root %s: driver root %q, %v", moved, link, err)
	}
	r := c.run(t, ns, c.pod("moved", "nvidia-smi -L", 0))
	if !slices.Equal(testenv.Lines(r.out), c.gpuLines()) {
		t.Errorf("nvidia-smi -L in a pod created after the move:\n%s\nwant the node's GPUs", r.out)
	}
}

func TestHelmUninstallLeavesTheNodeClean(t *testing.T) {
	c := theCluster
	ns := c.namespace(t, true)
	plugin := c.pluginPod(t)
	// Put the release back for the tests after this one, whatever happens.
	t.Cleanup(func() {
		if err := c.installNvmock(context.Background(), c.nvmockValues(nil)); err != nil {
			t.Errorf("reinstall the chart: %v", err)
		}
	})
	if err := c.helmUninstall(ctxT(t, 3*time.Minute), nvmockRelease, nvmockNS); err != nil {
		t.Fatal(err)
	}

	c.checkNodeClean(t, plugin.Name)

	t.Run("no injection", func(t *testing.T) {
		// No plugin: a new container in an opted-in namespace is left alone.
		if r := c.run(t, ns, c.pod("after", probeScript, 0)); r.out != untouched {
			t.Errorf("a pod after helm uninstall printed:\n%s\nwant:\n%s", r.out, untouched)
		}
	})
}

// checkNodeClean checks what a release's uninstall leaves: no file install
// wrote, no node label, and no failed preStop hook on the pod plugin.
func (c *cluster) checkNodeClean(t *testing.T, plugin string) {
	t.Helper()
	t.Run("files", func(t *testing.T) {
		// The preStop uninstall removed every file install wrote; only the
		// empty directories the kubelet made for the hostPath volumes stay.
		var left []string
		_ = filepath.WalkDir(c.overlayRoot(), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				left = append(left, p)
			}
			return nil
		})
		if len(left) > 0 {
			t.Errorf("%d files left in the overlay root %s, among them %v", len(left), c.overlayRoot(), left[:min(len(left), 5)])
		}
		for _, f := range []string{filepath.Join(c.cdiDir(), hostprep.CDIFile), filepath.Join(c.nfdDir(), hostprep.NFDFile)} {
			if _, err := os.Lstat(f); err == nil {
				t.Errorf("%s is left", f)
			}
		}
	})

	t.Run("labels", func(t *testing.T) {
		node, err := c.cs.CoreV1().Nodes().Get(ctxT(t, 10*time.Second), c.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k := range nodeLabels(t) {
			if v, ok := node.Labels[k]; ok {
				t.Errorf("node label %s=%s is left", k, v)
			}
		}
		evs, err := c.cs.CoreV1().Events(nvmockNS).List(ctxT(t, 10*time.Second),
			metav1.ListOptions{FieldSelector: "reason=FailedPreStopHook,involvedObject.name=" + plugin})
		if err == nil && len(evs.Items) > 0 {
			// The event says only that it failed; the kubelet logs the hook's output.
			t.Errorf("pod %s: %s; the kubelet logged:\n%s", plugin, evs.Items[0].Message, c.preStopFailures())
		}
	})
}

// preStopFailures are the kubelet's log entries for failed preStop hooks,
// with the hooks' output.
func (c *cluster) preStopFailures() string {
	data, err := os.ReadFile(filepath.Join(c.dir, "logs", "kubelet.log"))
	if err != nil {
		return err.Error()
	}
	var out []string
	in := false
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, "PreStop hook failed") {
			in = true
		}
		if in {
			out = append(out, l)
		}
		if in && strings.HasPrefix(l, " > ") {
			in = false
		}
	}
	return strings.Join(out, "\n")
}
