//go:build k8s

package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nvmock/nvmock/hostprep"
)

// helm upgrades that change the chart's DaemonSets under running pods: the
// node keeps what the pods use. Found in review on this node: the live
// init container wiped the MIG layout at every pod start, and a renamed
// pool uninstalled the node before the new pool's pod installed it again.

// A pool renamed by helm upgrade: the new DaemonSet's pod installs the
// same overlay and the old one's pod leaves it. The node stays a GPU node
// throughout: were gpu.present gone for a moment, the DaemonSet controller
// would delete NVIDIA's device plugin and GFD pods (their affinity is on
// it), and the driver root they mount would go with the install.
func TestARenamedPoolKeepsTheNodeAGPUNode(t *testing.T) {
	c := theCluster
	c.nvidiaPlugin(t)
	t.Cleanup(func() {
		if err := c.installNvmock(context.Background(), c.nvmockValues(nil)); err != nil {
			t.Errorf("restore the suite's values: %v", err)
		}
	})
	nvidiaPods := func() map[string]string {
		pods, err := c.cs.CoreV1().Pods(nvidiaNS).List(ctxT(t, 10*time.Second), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids := map[string]string{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				uids[p.Name] = string(p.UID)
			}
		}
		return uids
	}
	before := nvidiaPods()
	if len(before) == 0 {
		t.Fatalf("no NVIDIA pods in %s", nvidiaNS)
	}

	gaps := c.watchGPUNode()
	const renamed = "renamed"
	ctx := ctxT(t, 4*time.Minute)
	pools := []any{map[string]any{"name": renamed, "profile": nvmockProfile}}
	if err := c.helmInstall(ctx, nvmockRelease, nvmockNS, nvmockChart(), c.nvmockValues(map[string]any{"pools": pools}), true); err != nil {
		t.Fatal(err)
	}
	if err := c.waitRollout(ctx, nvmockNS, nvmockRelease); err != nil {
		t.Fatal(err)
	}
	// The old pool's pod, whose preStop decides, is gone only after its
	// hook has run; then a moment for the DaemonSet controller to react.
	if err := c.waitNoPods(ctx, nvmockNS, "nvmock.io/pool="+nvmockPool); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if seen := gaps(); len(seen) > 0 {
		t.Errorf("the node was not a GPU node during the rename:\n%s", strings.Join(seen, "\n"))
	}

	after := nvidiaPods()
	for name, uid := range before {
		if after[name] != uid {
			t.Errorf("NVIDIA's pod %s (uid %s) was deleted during the rename; now %v", name, uid, after)
		}
	}
	var m hostprep.Manifest
	data, err := os.ReadFile(filepath.Join(c.overlayRoot(), hostprep.ManifestFile))
	if err == nil {
		err = json.Unmarshal(data, &m)
	}
	if want := nvmockNS + "/" + nvmockRelease + "-" + renamed; err != nil || m.Owner != want {
		t.Errorf("the install's manifest: owner %q (%v), want %s", m.Owner, err, want)
	}
	if err := c.waitAllocatable(ctx, len(c.gpuLines())); err != nil {
		t.Error(err)
	}
}

// A pool's MIG layout is made at install and holds across a rolling
// upgrade: the new pod's init containers find the node's MIG devices and
// keep them, and a pod holding one keeps seeing it.
func TestMIGLayoutHoldsAcrossARollingUpgrade(t *testing.T) {
	c := theCluster
	ns := c.namespace(t, true)
	t.Cleanup(func() {
		if err := c.installNvmock(context.Background(), c.nvmockValues(nil)); err != nil {
			t.Errorf("restore the suite's values: %v", err)
		}
		// The pool without its layout is another install: MIG off again.
		if out, _ := c.nodeSMI("-L"); strings.Contains(out, "MIG ") {
			t.Errorf("the layout removed, nvidia-smi -L on the node still shows MIG devices:\n%s", out)
		}
	})
	// Two GPUs of seven 1g.10gb each; the other six stay whole.
	pools := []any{map[string]any{"name": nvmockPool, "profile": nvmockProfile, "mig": "6-7=all-1g.10gb"}}
	c.upgradeNvmock(t, map[string]any{"pools": pools})
	host := c.mustSMI(t, "-L")
	if n := strings.Count(host, "MIG 1g.10gb"); n != 14 {
		t.Fatalf("pools[].mig 6-7=all-1g.10gb: nvidia-smi -L on the node shows %d MIG devices, want 14:\n%s", n, host)
	}

	p := c.pod("mig", gpuScript, 0)
	p.Annotations = map[string]string{"nvmock.io/gpus": "mig-1g.10gb"}
	before := c.running(t, ns, p, "started")
	if n := strings.Count(before, "MIG 1g.10gb"); n != 1 {
		t.Fatalf("the pod with nvmock.io/gpus: mig-1g.10gb printed:\n%swant one MIG device", before)
	}
	plugin := c.pluginPod(t)

	// Only the log level changes: the DaemonSet rolls its pod.
	c.upgradeNvmock(t, map[string]any{"pools": pools, "logLevel": "debug"})
	if c.pluginPod(t).UID == plugin.UID {
		t.Fatalf("helm upgrade did not roll nvmock's pod %s", plugin.Name)
	}
	if after := c.mustSMI(t, "-L"); after != host {
		t.Errorf("nvidia-smi -L on the node after a rolling upgrade:\n%s\nwant as before:\n%s", after, host)
	}
	out, err := c.exec(t, ns, "mig", "main", "nvidia-smi", "-L")
	if err != nil || out+"started\n" != before {
		t.Errorf("nvidia-smi -L in the MIG pod after a rolling upgrade: %v\n%s\nwant as at its start:\n%s", err, out, before)
	}
}

// helm uninstall after an upgrade whose pod cannot install: the failing
// pod's uninstall sidecar started before its install, so its preStop
// removes what the pool's earlier pod installed (and kept for it). Found
// on this node: with uninstall a plain container, it never started, and
// the node stayed installed, labels included.
func TestHelmUninstallAfterAFailedUpgradeLeavesTheNodeClean(t *testing.T) {
	c := theCluster
	t.Cleanup(func() {
		if err := c.installNvmock(context.Background(), c.nvmockValues(nil)); err != nil {
			t.Errorf("reinstall the chart: %v", err)
		}
	})
	// h100 has no 1g.5gb: hostprep install fails at every pod start. The
	// old pod serves on (maxUnavailable 0), so helm's --wait would wait
	// for its whole timeout: 20 s are enough to apply the upgrade.
	pools := []any{map[string]any{"name": nvmockPool, "profile": nvmockProfile, "mig": "0=all-1g.5gb"}}
	ctx := ctxT(t, 20*time.Second)
	if err := c.helmInstall(ctx, nvmockRelease, nvmockNS, nvmockChart(), c.nvmockValues(map[string]any{"pools": pools}), true); err == nil {
		t.Errorf("helm upgrade --wait to a pod that cannot install succeeded")
	}
	failing := c.failedInstall(t)
	if _, err := os.Stat(filepath.Join(c.overlayRoot(), hostprep.ManifestFile)); err != nil {
		t.Fatalf("the earlier pod's install is gone before helm uninstall: %v", err)
	}
	if err := c.helmUninstall(ctxT(t, 3*time.Minute), nvmockRelease, nvmockNS); err != nil {
		t.Fatal(err)
	}
	c.checkNodeClean(t, failing)
}

// failedInstall waits for the pool's pod whose hostprep install has
// failed, checks that its uninstall sidecar runs, and returns its name.
func (c *cluster) failedInstall(t *testing.T) string {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	last := "no pod"
	for {
		pods, err := c.cs.CoreV1().Pods(nvmockNS).List(ctx, metav1.ListOptions{LabelSelector: "nvmock.io/pool=" + nvmockPool})
		if err == nil {
			for _, p := range pods.Items {
				failed, sidecar := false, false
				for _, s := range p.Status.InitContainerStatuses {
					switch s.Name {
					case "hostprep":
						for _, st := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
							failed = failed || st != nil && st.ExitCode != 0
						}
					case "uninstall":
						sidecar = s.State.Running != nil
					}
				}
				if failed && p.DeletionTimestamp == nil {
					if !sidecar {
						t.Errorf("pod %s: its install failed, and no uninstall sidecar runs: %s", p.Name, podState(&p))
					}
					if out := c.logs(t, nvmockNS, p.Name, "hostprep"); !strings.Contains(out, "1g.5gb") {
						t.Errorf("the failing hostprep printed:\n%s\nwant the layout it refused named", out)
					}
					return p.Name
				}
				last = p.Name + ": " + podState(&p)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no pod of pool %s with a failed install; last: %s%s", nvmockPool, last, c.podLogs(nvmockNS, ""))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// upgradeNvmock upgrades the suite's release to its values with extra's
// keys replaced, and waits for the rollout. Unlike installNvmock it
// neither reads the node's GPUs nor waits for NVIDIA's to match them (a
// MIG layout adds lines to nvidia-smi -L, not GPUs).
func (c *cluster) upgradeNvmock(t *testing.T, extra map[string]any) {
	t.Helper()
	ctx := ctxT(t, 4*time.Minute)
	if err := c.helmInstall(ctx, nvmockRelease, nvmockNS, nvmockChart(), c.nvmockValues(extra), true); err != nil {
		t.Fatal(err)
	}
	if err := c.waitRollout(ctx, nvmockNS, nvmockRelease); err != nil {
		t.Fatal(err)
	}
}

// watchGPUNode polls, every 50 ms, what makes the node a GPU node: the
// gpu.present label and the overlay root's driver root. The function it
// returns stops the polling and returns each change: when either went
// missing, and when both were back (none: the node stayed a GPU node).
func (c *cluster) watchGPUNode() func() []string {
	stop, done := make(chan struct{}), make(chan []string, 1)
	go func() {
		var seen []string
		last := ""
		for {
			select {
			case <-stop:
				done <- seen
				return
			case <-time.After(50 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			n, err := c.cs.CoreV1().Nodes().Get(ctx, c.node, metav1.GetOptions{})
			cancel()
			if err != nil {
				continue
			}
			_, lerr := os.Stat(filepath.Join(c.overlayRoot(), "driver", "usr", "bin", "nvidia-smi"))
			st := ""
			if v := n.Labels["nvidia.com/gpu.present"]; v != "true" {
				st = fmt.Sprintf("nvidia.com/gpu.present=%q ", v)
			}
			if lerr != nil {
				st += "no driver root: " + lerr.Error()
			}
			if st != last {
				what := st
				if what == "" {
					what = "a GPU node again"
				}
				seen = append(seen, time.Now().Format("15:04:05.000 ")+what)
				last = st
			}
		}
	}()
	return func() []string {
		close(stop)
		return <-done
	}
}

// A helm upgrade that makes a new overlay (here the pool's GPU count)
// leaves a running pod what it was given: its InfiniBand device nodes, the
// HCAs in its /sys, its /proc/driver. Found on this node: the install
// removed the old overlay, and those went empty while nvidia-smi still
// answered. Its ports then follow the node's new live state.
func TestAnUpgradeToANewOverlayLeavesRunningPodsTheirDevices(t *testing.T) {
	c := theCluster
	ns := c.namespace(t, true)
	t.Cleanup(func() {
		if err := c.installNvmock(context.Background(), c.nvmockValues(nil)); err != nil {
			t.Errorf("restore the suite's values: %v", err)
		}
	})
	const look = "echo devs=$(ls /dev/infiniband | wc -l) hcas=$(ls /sys/class/infiniband | wc -l) $(head -c 20 /proc/driver/nvidia/version)"
	p := c.pod("held", look+"; echo started; exec sleep 3600", 0)
	p.Spec.Containers[0].Image = c.image("rdma")
	before := strings.TrimSuffix(c.running(t, ns, p, "started"), "started\n")
	if !strings.Contains(before, "devs=37 hcas=12 NVRM version") {
		t.Fatalf("the pod at its start: %q", before)
	}
	pools := []any{map[string]any{"name": nvmockPool, "profile": nvmockProfile, "gpus": 4}}
	c.upgradeNvmock(t, map[string]any{"pools": pools})
	if out, err := c.exec(t, ns, p.Name, "main", "sh", "-c", look); err != nil || out != before {
		t.Errorf("the running pod after an upgrade to a new overlay: %v %q, want as at its start %q", err, out, before)
	}
	ctl := c.ctlInPod(t)
	t.Cleanup(func() { ctl("ib", "clear") })
	ctl("ib", "down", "mlx5_3")
	if out, err := c.exec(t, ns, p.Name, "main", "sh", "-c", "ibstat mlx5_3 | grep -m1 State:"); err != nil || !strings.Contains(out, "Down") {
		t.Errorf("ibstat mlx5_3 in the running pod after ctl ib down on the new overlay: %v %q", err, out)
	}
}

// Pods created all through a rolling upgrade get their GPUs: the new
// pod's plugin registers before the old one stops (maxSurge), and while
// both serve, the one the runtime calls second leaves the container to the
// first. Before, containers created while the pods changed places got
// nothing.
func TestPodsCreatedThroughARollingUpgradeGetTheirGPUs(t *testing.T) {
	c := theCluster
	ns := c.namespace(t, true)
	t.Cleanup(func() {
		if err := c.installNvmock(context.Background(), c.nvmockValues(nil)); err != nil {
			t.Errorf("restore the suite's values: %v", err)
		}
	})
	stop, done := make(chan struct{}), make(chan []string)
	go func() {
		var names []string
		for i := 0; ; {
			// A pod every 300 ms, but no more than 8 unfinished: on a
			// slow node a longer upgrade made more pods, which slowed
			// it further (962 pods, past helm's timeout, on a VM 3x
			// slower one day).
			busy, err := c.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "status.phase!=Succeeded,status.phase!=Failed"})
			if err == nil && len(busy.Items) < 8 {
				p := c.pod(fmt.Sprintf("roll-%d", i), "nvidia-smi -L", 0)
				if _, err := c.cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err == nil {
					names = append(names, p.Name)
					i++
				}
			}
			select {
			case <-stop:
				done <- names
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	plugin := c.pluginPod(t)
	c.upgradeNvmock(t, map[string]any{"logLevel": "debug"})
	time.Sleep(time.Second)
	close(stop)
	names := <-done
	if c.pluginPod(t).UID == plugin.UID {
		t.Fatalf("helm upgrade did not roll nvmock's pod %s", plugin.Name)
	}
	want := strings.Join(c.gpuLines(), "\n") + "\n"
	var bad []string
	for _, n := range names {
		c.waitPod(t, ns, n, 2*time.Minute, "finished", podFinished)
		if out := c.logs(t, ns, n, ""); out != want {
			bad = append(bad, fmt.Sprintf("%s: %q", n, out))
		}
	}
	t.Logf("%d pods created through the upgrade", len(names))
	if len(names) < 10 || len(bad) > 0 {
		t.Errorf("%d pods created through the upgrade; %d printed other than the node's GPUs:\n%s", len(names), len(bad), strings.Join(bad, "\n"))
	}
}
