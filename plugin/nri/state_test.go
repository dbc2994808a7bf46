package nri

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nvmock/nvmock/plugin/inject"
)

// switchLink points root/driver at overlays/<name>/driver in one rename, as
// hostprep install does.
func switchLink(t *testing.T, root, name string) {
	t.Helper()
	tmp := filepath.Join(root, ".driver-"+name)
	must(t, os.Symlink(filepath.Join("overlays", name, "driver"), tmp))
	must(t, os.Rename(tmp, filepath.Join(root, "driver")))
}

// linkPlugin is a plugin whose probe gives a node of 2 GPUs with UUIDs of
// the overlay root/driver points at, and counts its calls.
func linkPlugin(t *testing.T) (p *Plugin, root string, probes *int) {
	t.Helper()
	root = t.TempDir()
	p, err := New(Options{OverlayRoot: root, Log: testLog(t), Inject: inject.Config{Namespaces: []string{"*"}}})
	must(t, err)
	probes = new(int)
	p.node.probe = func(root string) (inject.NodeState, error) {
		*probes++
		target, err := os.Readlink(filepath.Join(root, "driver"))
		if err != nil {
			return inject.NodeState{}, err
		}
		n := syntheticNode(2)
		for i := range n.GPUs {
			n.GPUs[i].UUID = overlayUUID(target, i)
		}
		return n, nil
	}
	return p, root, probes
}

func overlayUUID(target string, i int) string {
	return fmt.Sprintf("GPU-%s-%d", strings.Split(target, "/")[1], i)
}

// The plugin reads root/driver on every container creation: a container
// created right after a switch gets the new overlay's GPUs, and one created
// with the link unchanged costs no probe.
func TestACreationRightAfterASwitchGetsTheNewOverlaysGPUs(t *testing.T) {
	p, root, probes := linkPlugin(t)
	pd := &api.PodSandbox{Name: "p", Namespace: "ml"}
	visible := func(id string) string {
		t.Helper()
		adj := p.adjust(pd, &api.Container{Id: id, Name: id})
		for _, kv := range adj.GetEnv() {
			if kv.Key == inject.VisibleDevicesEnv {
				return kv.Value
			}
		}
		t.Fatalf("container %s: not injected", id)
		return ""
	}
	switchLink(t, root, "aaaa")
	if v := visible("c1"); v != "GPU-aaaa-0,GPU-aaaa-1" {
		t.Fatalf("first container: %q", v)
	}
	if v := visible("c2"); v != "GPU-aaaa-0,GPU-aaaa-1" || *probes != 1 {
		t.Errorf("link unchanged: %q after %d probes; want the same GPUs and one probe", v, *probes)
	}
	switchLink(t, root, "bbbb")
	if v := visible("c3"); v != "GPU-bbbb-0,GPU-bbbb-1" || *probes != 2 {
		t.Errorf("right after the switch: %q after %d probes; want the new overlay's GPUs from a second probe", v, *probes)
	}
	must(t, os.Remove(filepath.Join(root, "driver")))
	p.synced.Store(true)
	if err := p.Ready(); err == nil || !strings.Contains(err.Error(), "no overlay installed") {
		t.Errorf("ready right after the link went: %v", err)
	}
}

// BenchmarkRefreshUnchanged is what every container creation now pays to
// notice a reinstall: one readlink of root/driver, no probe.
func BenchmarkRefreshUnchanged(b *testing.B) {
	root := b.TempDir()
	must2(b, os.Symlink("overlays/0123456789abcdef/driver", filepath.Join(root, "driver")))
	c := newNodeCache(root)
	n := syntheticNode(8)
	c.probe = func(string) (inject.NodeState, error) { return n, nil }
	c.refresh()
	b.ReportAllocs()
	for b.Loop() {
		c.refresh()
	}
}

func must2(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}
