//go:build k8s

package k8s

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/remotecommand"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/nvmock/nvmock/internal/testenv"
)

// Namespaces and pods: making them, waiting for them, reading what their
// containers print.

var seq atomic.Int64

// namespace creates a namespace for one test, opted in to injection or
// not; it is deleted when the test ends.
func (c *cluster) namespace(t testing.TB, optedIn bool) string {
	t.Helper()
	name := fmt.Sprintf("e2e-%d-%d", os.Getpid(), seq.Add(1))
	labels := map[string]string{}
	if optedIn {
		labels[injectKey] = injectValue
	}
	c.ensureNamespace(t, name, labels)
	t.Cleanup(func() {
		_ = c.cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// ensureNamespace creates ns with labels, or sets them on it.
func (c *cluster) ensureNamespace(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	_, err := c.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		c.labelNamespace(t, name, labels)
		err = nil
	}
	if err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	// Pods need the namespace's service account, which the controller-manager makes.
	for {
		if _, err := c.cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("namespace %s: no default service account after 30 s", name)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// labelNamespace sets (value "") or removes (nil) labels on a namespace.
func (c *cluster) labelNamespace(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	ns, err := c.cs.CoreV1().Namespaces().Get(ctxT(t, 10*time.Second), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	for k, v := range labels {
		ns.Labels[k] = v
	}
	if _, err := c.cs.CoreV1().Namespaces().Update(ctxT(t, 10*time.Second), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("label namespace %s: %v", name, err)
	}
}

func (c *cluster) unlabelNamespace(t testing.TB, name string, keys ...string) {
	t.Helper()
	ns, err := c.cs.CoreV1().Namespaces().Get(ctxT(t, 10*time.Second), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		delete(ns.Labels, k)
	}
	if _, err := c.cs.CoreV1().Namespaces().Update(ctxT(t, 10*time.Second), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("unlabel namespace %s: %v", name, err)
	}
}

// podSpec is one container of the glibc test image (Debian's binaries,
// nothing NVIDIA in it) running script with sh. It stops at once when
// deleted.
func (c *cluster) podSpec(script string, gpus int) corev1.PodSpec {
	zero := int64(0)
	s := corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: &zero,
		Containers: []corev1.Container{{
			Name: "main", Image: c.image("glibc"), ImagePullPolicy: corev1.PullNever,
			Command: []string{"/bin/sh", "-c", script},
		}},
	}
	if gpus > 0 {
		q := *resource.NewQuantity(int64(gpus), resource.DecimalSI)
		s.Containers[0].Resources.Limits = corev1.ResourceList{gpuResource: q}
	}
	return s
}

// pod is a pod named name of podSpec(script, gpus).
func (c *cluster) pod(name, script string, gpus int) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: c.podSpec(script, gpus)}
}

// create creates a pod; it is deleted when the test ends.
func (c *cluster) create(t testing.TB, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := c.cs.CoreV1().Pods(ns).Create(ctxT(t, 30*time.Second), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, p.Name, err)
	}
	t.Cleanup(func() { c.deletePod(ns, p.Name) })
	return got
}

func (c *cluster) deletePod(ns, name string) {
	zero := int64(0)
	_ = c.cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
}

// result is what a pod's container did: its output (stdout and stderr)
// and the pod's phase.
type result struct {
	out   string
	phase corev1.PodPhase
}

// run creates a pod, waits for it to finish and returns what it printed.
func (c *cluster) run(t testing.TB, ns string, p *corev1.Pod) result {
	t.Helper()
	c.create(t, ns, p)
	got := c.waitPod(t, ns, p.Name, 2*time.Minute, "finished", podFinished)
	return result{out: c.logs(t, ns, p.Name, ""), phase: got.Status.Phase}
}

// running creates a pod and waits until it runs and has printed want.
func (c *cluster) running(t testing.TB, ns string, p *corev1.Pod, want string) string {
	t.Helper()
	c.create(t, ns, p)
	c.waitPod(t, ns, p.Name, 2*time.Minute, "Running", podRunning)
	return c.waitLog(t, ns, p.Name, want)
}

// failedWaiting are container waiting reasons that will not resolve by
// themselves: the test says so at once rather than at the timeout.
var failedWaiting = []string{"ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff"}

func podFinished(p *corev1.Pod) (bool, error) {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, stuck(p)
}

func podRunning(p *corev1.Pod) (bool, error) {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false, fmt.Errorf("pod %s ended (%s) instead of running", p.Name, p.Status.Phase)
	}
	return p.Status.Phase == corev1.PodRunning, stuck(p)
}

func podReady(p *corev1.Pod) (bool, error) {
	if ok, err := podRunning(p); !ok || err != nil {
		return ok, err
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue, nil
		}
	}
	return false, nil
}

func stuck(p *corev1.Pod) error {
	for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if w := s.State.Waiting; w != nil && slices.Contains(failedWaiting, w.Reason) {
			return fmt.Errorf("pod %s: container %s: %s: %s", p.Name, s.Name, w.Reason, w.Message)
		}
	}
	return nil
}

// waitPod watches a pod until done says so, and returns it then.
func (c *cluster) waitPod(t testing.TB, ns, name string, timeout time.Duration, what string, done func(*corev1.Pod) (bool, error)) *corev1.Pod {
	t.Helper()
	p, err := c.watchPod(ns, name, timeout, done)
	if err != nil {
		t.Fatalf("pod %s/%s not %s: %v%s", ns, name, what, err, c.describe(ns, name))
	}
	return p
}

// watchPod is waitPod's watch: it lists, then watches from there, so no
// change is missed between the two.
func (c *cluster) watchPod(ns, name string, timeout time.Duration, done func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	lw := cache.NewListWatchFromClient(c.cs.CoreV1().RESTClient(), "pods", ns, fields.OneTermEqualSelector("metadata.name", name))
	ev, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, nil, func(e watch.Event) (bool, error) {
		if e.Type == watch.Deleted {
			return false, fmt.Errorf("pod deleted")
		}
		p, ok := e.Object.(*corev1.Pod)
		if !ok {
			return false, nil
		}
		return done(p)
	})
	if err != nil {
		return nil, err
	}
	return ev.Object.(*corev1.Pod), nil
}

// describe is, for a failure message, a pod's state and its events.
func (c *cluster) describe(ns, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	if p, err := c.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		fmt.Fprintf(&b, "\npod %s/%s: %s", ns, name, podState(p))
	}
	evs, err := c.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err == nil {
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "\n  event %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
	return b.String()
}

// podState is a pod's phase, node and each container's state, in one line.
func podState(p *corev1.Pod) string {
	s := fmt.Sprintf("%s on %q", p.Status.Phase, p.Spec.NodeName)
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		switch {
		case cs.State.Waiting != nil:
			s += fmt.Sprintf("; %s waiting: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Running != nil:
			s += fmt.Sprintf("; %s running (restarts %d)", cs.Name, cs.RestartCount)
		case cs.State.Terminated != nil:
			s += fmt.Sprintf("; %s exited %d %s", cs.Name, cs.State.Terminated.ExitCode, cs.State.Terminated.Reason)
		}
	}
	return s
}

// logs is what a pod's container (its only one: "") printed.
func (c *cluster) logs(t testing.TB, ns, pod, container string) string {
	t.Helper()
	data, err := c.cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatalf("logs of %s/%s %s: %v", ns, pod, container, err)
	}
	return string(data)
}

// waitLog waits until a running pod has printed want.
func (c *cluster) waitLog(t testing.TB, ns, pod, want string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := c.logs(t, ns, pod, "")
		if strings.Contains(out, want) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s did not print %q in 30 s; it printed:\n%s", ns, pod, want, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exec runs cmd in a running pod's container, as kubectl exec does (the
// API server's WebSocket exec), and returns its stdout and stderr.
func (c *cluster) exec(t testing.TB, ns, pod, container string, cmd ...string) (string, error) {
	t.Helper()
	req := c.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(c.cfg, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	var out testenv.SyncBuffer
	err = ex.StreamWithContext(ctxT(t, time.Minute), remotecommand.StreamOptions{Stdout: &out, Stderr: &out})
	return out.String(), err
}
