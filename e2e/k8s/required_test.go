//go:build k8s

package k8s

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// holdTaint keeps the DaemonSet's next pod off the node (the chart's pods
// do not tolerate it), so the gap after `kubectl delete pod` stays open as
// long as the test needs.
var holdTaint = corev1.Taint{Key: "nvmock.io/test-hold", Value: "gap", Effect: corev1.TaintEffectNoSchedule}

// After `kubectl delete pod` of the chart's pod, a pod created before the
// next one's plugin registers starts without GPUs, unless it names the
// plugin as required (containerd's default validator, 2.2+): then the
// runtime refuses its container, the kubelet retries, and it runs with its
// GPUs once the plugin is back (docs/kubernetes.md).
func TestAPodRequiringThePluginWaitsForItsNextPod(t *testing.T) {
	c := theCluster
	ns := c.namespace(t, true)
	c.taintNode(t, true)
	t.Cleanup(func() {
		c.taintNode(t, false)
		c.pluginPod(t)
	})
	old := c.pluginPod(t)
	if err := c.cs.CoreV1().Pods(nvmockNS).Delete(ctxT(t, 30*time.Second), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete nvmock's pod %s: %v", old.Name, err)
	}
	for gone := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, err := c.cs.CoreV1().Pods(nvmockNS).Get(ctxT(t, 10*time.Second), old.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(gone) {
			t.Fatalf("nvmock's pod %s still there 2 min after its deletion: %v", old.Name, err)
		}
	}

	p := c.pod("requires", "nvidia-smi -L; echo started; exec sleep 600", 0)
	p.Annotations = map[string]string{"required-plugins.noderesource.dev/pod": `["nvmock"]`}
	p.Spec.Tolerations = []corev1.Toleration{{Key: holdTaint.Key, Operator: corev1.TolerationOpEqual, Value: holdTaint.Value, Effect: holdTaint.Effect}}
	c.create(t, ns, p)
	refused := func(p *corev1.Pod) (bool, error) {
		if p.Status.Phase != corev1.PodPending {
			return false, nil
		}
		for _, s := range p.Status.ContainerStatuses {
			if w := s.State.Waiting; w != nil && w.Reason == "CreateContainerError" {
				return strings.Contains(w.Message, `required plugin "nvmock" not present`), nil
			}
		}
		return false, nil
	}
	if _, err := c.watchPod(ns, p.Name, 2*time.Minute, refused); err != nil {
		t.Fatalf("with nvmock's pod gone, the pod requiring the plugin was not refused: %v%s", err, c.describe(ns, p.Name))
	}

	c.taintNode(t, false)
	start := time.Now()
	c.waitPod(t, ns, p.Name, 3*time.Minute, "Running", func(p *corev1.Pod) (bool, error) {
		return p.Status.Phase == corev1.PodRunning, nil
	})
	out := c.waitLog(t, ns, p.Name, "started")
	if !slices.Equal(uuidsIn(out), c.uuids()) {
		t.Fatalf("the pod that waited for the plugin printed:\n%swant the node's GPUs %v", out, c.uuids())
	}
	t.Logf("running with its GPUs %.1f s after the taint went", time.Since(start).Seconds())
}

// taintNode puts holdTaint on the node, or takes it off.
func (c *cluster) taintNode(t testing.TB, on bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		n, err := c.cs.CoreV1().Nodes().Get(ctx, c.node, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get node %s: %v", c.node, err)
		}
		taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(x corev1.Taint) bool { return x.Key == holdTaint.Key })
		if on {
			taints = append(taints, holdTaint)
		}
		n.Spec.Taints = taints
		_, err = c.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("taint node %s (%v): %v", c.node, on, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
