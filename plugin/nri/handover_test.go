package nri

import (
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nvmock/nvmock/plugin/inject"
)

// Two nvmock plugins on one runtime (a rolling update's overlap): the one
// called second finds the first's runtime hook in the container, adds
// nothing (the same variable set twice would fail the container), and
// counts the GPUs the first gave it, so that its own next choice differs.
func TestAContainerAnotherNvmockInjectedIsLeftToIt(t *testing.T) {
	first := fakePlugin(t, 2, inject.Config{Namespaces: []string{"*"}, DefaultGPUs: "1"})
	second := fakePlugin(t, 2, inject.Config{Namespaces: []string{"*"}, DefaultGPUs: "1"})
	pod := &api.PodSandbox{Name: "p", Namespace: "ml"}
	ctr := &api.Container{Id: "a", Name: "c"}
	adj := first.adjust(pod, ctr)
	gpu, _ := envOf(adj, inject.VisibleDevicesEnv)
	if gpu == "" || adj.GetAnnotations()[InjectedAnnotation] == "" {
		t.Fatalf("the first plugin's adjustment: %v", adj)
	}
	// The runtime hands the next plugin the container with those edits.
	ctr.Env = append(ctr.Env, inject.VisibleDevicesEnv+"="+gpu)
	ctr.Annotations = adj.GetAnnotations()
	if got := second.adjust(pod, ctr); got != nil {
		t.Errorf("the second plugin added %v to a container the first injected", got)
	}
	next, _ := envOf(second.adjust(pod, &api.Container{Id: "b", Name: "c"}), inject.VisibleDevicesEnv)
	if next == "" || next == gpu {
		t.Errorf("the second plugin's next container got %q; want the GPU the first did not give (%s)", next, gpu)
	}
	second.release("a")
	second.node.mu.Lock()
	defer second.node.mu.Unlock()
	if _, ok := second.node.gpus["a"]; ok {
		t.Error("the container's GPUs are still counted after it stopped")
	}
}
