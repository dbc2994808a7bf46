package nri

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/plugin/inject"
	"github.com/nvmock/nvmock/profile"
)

// MIG devices made on the node after the plugin probed it (nvidia-smi mig,
// or a layout) reach the next container: the live state's generation moved.
func TestAMIGDeviceMadeAfterTheProbeIsGiven(t *testing.T) {
	root := installOverlay(t)
	c := newNodeCache(root)
	c.refresh()
	if c.err != nil || len(c.node.MIG) != 0 {
		t.Fatalf("first probe: %v, %d MIG devices", c.err, len(c.node.MIG))
	}
	p, err := profile.Builtin("a100")
	must(t, err)
	l, err := profile.ParseMIGLayout("2=all-1g.5gb", p.Board.Modes.MIG, 4)
	must(t, err)
	data, err := os.ReadFile(filepath.Join(root, "driver", "etc", "nvmock", "snapshot"))
	must(t, err)
	_, devs, err := snapshot.Read(data)
	must(t, err)
	f, err := live.Open(filepath.Join(root, hostprep.StateFile))
	must(t, err)
	defer f.Close()
	must(t, f.Update(func(s *live.State, _ int64) error { return s.ApplyMIGLayout(devs, l) }))

	c.refresh()
	if c.err != nil || len(c.node.MIG) != 7 || c.node.MIG[6].GPU != 2 || c.node.MIG[6].Profile != "1g.5gb" {
		t.Fatalf("after the layout: %v, MIG devices %+v", c.err, c.node.MIG)
	}
	adj, ok, err := inject.Decide(inject.Config{Namespaces: []string{"ml"}}, c.node,
		inject.Pod{Namespace: "ml", Name: "p"}, inject.Container{Name: "c", Env: []string{"NVIDIA_VISIBLE_DEVICES=" + c.node.MIG[3].UUID}})
	if err != nil || !ok || len(adj.MIG) != 1 || adj.GPUs[0] != 2 {
		t.Errorf("a container given MIG device 2:3: %v %v %+v", ok, err, adj)
	}

	// Its use is counted, for mig-<profile> requests to spread; a re-probe
	// keeps it, and the container's end frees it.
	c.record("c1", adj.GPUs, c.node.MIG[3].UUID)
	if c.node.MIGInUse[3] != 1 || c.node.InUse[2] != 1 {
		t.Errorf("after one container: MIG use %v, GPU use %v", c.node.MIGInUse, c.node.InUse)
	}
	c.rebuildUse()
	if c.node.MIGInUse[3] != 1 || c.node.InUse[2] != 1 {
		t.Errorf("after a re-count: MIG use %v, GPU use %v", c.node.MIGInUse, c.node.InUse)
	}
	c.forget("c1")
	if c.node.MIGInUse[3] != 0 || c.node.InUse[2] != 0 {
		t.Errorf("after it ended: MIG use %v, GPU use %v", c.node.MIGInUse, c.node.InUse)
	}
	// Given in another form (a device plugin's GPU:MIG, a CDI name), its
	// end frees it too (review: only MIG- UUIDs were freed).
	for _, v := range []string{"2:3", "nvidia.com/gpu=" + c.node.MIG[3].UUID} {
		c.record("c2", []int{2}, v)
		if c.node.MIGInUse[3] != 1 {
			t.Errorf("%s: given, MIG use %v", v, c.node.MIGInUse)
		}
		c.forget("c2")
		if c.node.MIGInUse[3] != 0 || c.node.InUse[2] != 0 {
			t.Errorf("%s: after it ended, MIG use %v, GPU use %v", v, c.node.MIGInUse, c.node.InUse)
		}
	}
}
