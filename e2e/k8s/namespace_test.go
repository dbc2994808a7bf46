//go:build k8s

package k8s

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestNamespaceOptInTakesEffectOnTheNextPods(t *testing.T) {
	c := theCluster
	ns := c.namespace(t, false)
	injected := func(out string) bool { return slices.Equal(uuidsIn(out), c.uuids()) }
	plain := func(out string) bool { return out == untouched }

	if r := c.run(t, ns, c.pod("plain", probeScript, 0)); !plain(r.out) {
		t.Fatalf("a pod in a namespace without %s printed:\n%s\nwant:\n%s", injectKey, r.out, untouched)
	}

	// The plugin learns of the label through the API server: the next pods
	// are injected within seconds, and stay so.
	c.labelNamespace(t, ns, map[string]string{injectKey: injectValue})
	c.untilPods(t, ns, "labelled", injected)

	// Without the label, the next pods are left alone again.
	c.unlabelNamespace(t, ns, injectKey)
	c.untilPods(t, ns, "unlabelled", plain)
}

// untilPods runs probe pods until one's output satisfies want (within 30
// s), then one more, which must satisfy it too.
func (c *cluster) untilPods(t *testing.T, ns, phase string, want func(string) bool) {
	t.Helper()
	start := time.Now()
	for i := 0; ; i++ {
		r := c.run(t, ns, c.pod(fmt.Sprintf("%s-%d", phase, i), probeScript, 0))
		if want(r.out) {
			t.Logf("namespace %s: pod %d after the change, %.1f s after it, printed as it should", phase, i+1, time.Since(start).Seconds())
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("namespace %s: pods still print, 30 s after the change:\n%s", phase, r.out)
		}
	}
	if r := c.run(t, ns, c.pod(phase+"-after", probeScript, 0)); !want(r.out) {
		t.Errorf("namespace %s: a later pod printed:\n%s", phase, r.out)
	}
}

// A pod asking for a GPU the node does not have fails, as on a real node,
// where NVIDIA's runtime fails its container's start: with restartPolicy
// Never it ends Failed, its reason in the container's status (review: the
// creation was refused, and the pod waited for ever to be created).
func TestAPodAskingForAGPUTheNodeLacksFails(t *testing.T) {
	c := theCluster
	ns := c.namespace(t, true)
	p := c.pod("lacks", "echo ran", 0)
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "99"}}
	c.create(t, ns, p)
	failed := func(p *corev1.Pod) (bool, error) { return p.Status.Phase == corev1.PodFailed, nil }
	got, err := c.watchPod(ns, p.Name, 2*time.Minute, failed)
	if err != nil {
		t.Fatalf("the pod did not fail: %v%s", err, c.describe(ns, p.Name))
	}
	for _, s := range got.Status.ContainerStatuses {
		if term := s.State.Terminated; term == nil || !strings.Contains(term.Message, `names index "99"`) {
			t.Errorf("container %s: %+v; want it terminated with nvmock's reason", s.Name, s.State)
		}
	}
}
