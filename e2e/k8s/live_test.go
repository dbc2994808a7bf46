//go:build k8s

package k8s

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nvmock/nvmock/internal/testenv"
)

// nvmock ctl run in the chart's pod (kubectl exec -c nri) changes the
// node's live state: a pod's nvidia-smi shows the load, and an XID makes
// NVIDIA's device plugin report the GPU unhealthy, so the kubelet offers
// one GPU fewer.
func TestCtlInTheChartsPodReachesPodsAndTheDevicePlugin(t *testing.T) {
	c := theCluster
	c.nvidiaPlugin(t)
	ctl := c.ctlInPod(t)
	n := len(c.truth)
	t.Cleanup(func() {
		// Back to a healthy node for the tests after: clear, then restart
		// the device plugin, which never marks a GPU healthy again.
		ctl("clear", "all", "--load")
		ctx := ctxT(t, 2*time.Minute)
		if err := c.cs.CoreV1().Pods(nvidiaNS).DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=nvidia-device-plugin"}); err != nil {
			t.Errorf("restart the device plugin: %v", err)
		}
		if err := c.waitAllocatable(ctx, n); err != nil {
			t.Error(err)
		}
	})

	ctl("load", "all", "55")
	ns := c.namespace(t, true)
	out := c.running(t, ns, c.pod("loaded", "nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader; echo started; exec sleep 3600", 1), "started")
	if !strings.Contains(out, "55 %") {
		t.Errorf("a pod's nvidia-smi after nvmock ctl load all 55:\n%s", out)
	}

	kmsg := testenv.OpenKmsg(t)
	start := time.Now()
	ctl("xid", "2", "48")
	if err := c.waitAllocatable(ctxT(t, time.Minute), n-1); err != nil {
		t.Fatal(err)
	}
	t.Logf("allocatable %s fell to %d %v after XID 48", gpuResource, n-1, time.Since(start).Round(time.Millisecond))
	if st := ctl("status"); !strings.Contains(st, "ecc_uncorrectable (XID 48)") {
		t.Errorf("nvmock ctl status in the pod:\n%s", st)
	}
	// The chart's xidlog container (kernelLog.xids) logged it on the host.
	if prio, _ := kmsg.Until(t, "): 48, An uncorrectable double bit error (DBE) has been detected", 30*time.Second); prio&7 != 4 {
		t.Errorf("the kernel log has XID 48 at level %d, want 4 (warning) as the driver logs it", prio&7)
	}
}

// ctlInPod runs nvmock ctl in the chart's pod, as kubectl exec -c nri
// would, and returns its output.
func (c *cluster) ctlInPod(t *testing.T) func(args ...string) string {
	pp := c.pluginPod(t)
	return func(args ...string) string {
		t.Helper()
		out, err := c.exec(t, nvmockNS, pp.Name, "nri", append([]string{"/opt/nvmock/bin/nvmock", "ctl"}, args...)...)
		if err != nil {
			t.Fatalf("kubectl exec %s -c nri -- nvmock ctl %s: %v\n%s", pp.Name, strings.Join(args, " "), err, out)
		}
		return out
	}
}

// nvmock ctl ib in the chart's pod (which mounts the node's live state
// read-write) pulls a cable under a running pod: its ibstat, through the
// hook's live ports, shows the port Down, then Active again.
func TestCtlIBInTheChartsPodReachesARunningPod(t *testing.T) {
	c := theCluster
	ctl := c.ctlInPod(t)
	t.Cleanup(func() { ctl("ib", "clear") })
	ns := c.namespace(t, true)
	p := c.pod("ports", "while true; do ibstat mlx5_3 | grep -m1 'State:'; sleep 0.2; done", 0)
	p.Spec.Containers[0].Image = c.image("rdma")
	c.running(t, ns, p, "State: Active")
	ctl("ib", "down", "mlx5_3")
	c.waitLog(t, ns, p.Name, "State: Down")
	ctl("ib", "up", "mlx5_3")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out := c.logs(t, ns, p.Name, "")
		if strings.Contains(out[strings.LastIndex(out, "State: Down"):], "State: Active") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after ctl ib up the pod printed:\n%s", out)
		}
	}
	if st := ctl("status"); !strings.Contains(st, "InfiniBand port faults: mlx5_3=link_downed:1") {
		t.Errorf("nvmock ctl status in the chart's pod:\n%s", st)
	}
}
