package nri

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/plugin/inject"
)

// The plugin lists the overlays running containers were given, for install
// to keep (hostprep.InUseFile): from their hooks and mounts at Synchronize,
// from its own decision at creation, until they stop.
func TestThePluginListsTheOverlaysRunningContainersUse(t *testing.T) {
	p := fakePlugin(t, 2, inject.Config{Namespaces: []string{"*"}})
	state := filepath.Join(t.TempDir(), "live", "state")
	must(t, os.MkdirAll(filepath.Dir(state), 0o755))
	n := syntheticNode(2)
	n.State = state
	p.node.probe = func(string) (inject.NodeState, error) { return n, nil }
	list := func() string {
		t.Helper()
		data, err := os.ReadFile(hostprep.InUseFile(state))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	const old, cur = "fedcba9876543210", "0123456789abcdef" // cur: syntheticNode's
	running, stopped := api.ContainerState_CONTAINER_RUNNING, api.ContainerState_CONTAINER_STOPPED
	hook := &api.Hooks{CreateContainer: []*api.Hook{{Path: "/var/lib/nvmock/overlays/" + old + "/bin/nvmock-hook"}}}
	p.synchronize([]*api.Container{
		{Id: "a", State: running, Hooks: hook},
		{Id: "b", State: running, Mounts: []*api.Mount{{Source: "/var/lib/nvmock/overlays/" + old + "/driver/dev/infiniband"}}},
		{Id: "c", State: stopped, Hooks: &api.Hooks{CreateContainer: []*api.Hook{{Path: "/var/lib/nvmock/overlays/1111111111111111/bin/nvmock-hook"}}}},
		{Id: "d", State: running}, // not ours
	})
	if got := list(); got != old+"\n" {
		t.Errorf("after Synchronize: %q, want the running containers' %s", got, old)
	}
	pod := &api.PodSandbox{Name: "p", Namespace: "ml"}
	if p.adjust(pod, &api.Container{Id: "e", Name: "c"}) == nil {
		t.Fatal("the container was not injected")
	}
	if got := list(); got != cur+"\n"+old+"\n" {
		t.Errorf("after a creation on the current overlay: %q", got)
	}
	p.release("a")
	if got := list(); got != cur+"\n"+old+"\n" {
		t.Errorf("with b still on the old overlay: %q", got)
	}
	p.release("b")
	p.release("e")
	if got := list(); got != "" {
		t.Errorf("with every container gone: %q, want none", got)
	}
}
