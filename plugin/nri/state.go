package nri

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/plugin/inject"
)

// errNoOverlay says the node has no overlay installed: not an error, just
// nothing to inject.
var errNoOverlay = errors.New("no overlay installed")

// nodeCache keeps the probed node state and the GPUs given to containers.
// Its lock is held across a decision, so that concurrent creates spread
// over the GPUs as serial ones do.
type nodeCache struct {
	mu sync.Mutex

	root     string
	linkPath string // root/driver
	probe    func(root string) (inject.NodeState, error)
	procRoot string // where a real driver shows (driver/nvidia): /proc

	node   inject.NodeState // InUse is kept here; OptedIn is set per decision
	err    error            // the last probe's error (errNoOverlay wrapped when absent)
	link   string           // root/driver's target when probed ("" if it was no link)
	probed bool

	// gpus is what each live container was given, by container ID.
	gpus map[string]given
	// overlays is the overlay (its name) each live container was given;
	// inUseWritten the list last written, inUseErr that write's error.
	overlays     map[string]string
	inUseWritten []string
	inUseErr     error
}

// given is one container's GPUs: node indices, and the NVIDIA_VISIBLE_DEVICES
// value (UUIDs) they came from, to map them again after a re-probe.
type given struct {
	idx     []int
	visible string
}

func newNodeCache(root string) *nodeCache {
	return &nodeCache{root: root, linkPath: filepath.Join(root, "driver"), probe: inject.NodeStateFromOverlay, procRoot: "/proc",
		gpus: map[string]given{}, overlays: map[string]string{}}
}

// refresh re-probes when the driver link changed, the last probe failed,
// or nothing was probed yet. It reads the link on every call, that is on
// every container creation: a container created right after a reinstall
// switched the link must get the new overlay's GPUs, whose UUIDs the new
// snapshot holds (with the old ones its nvmlInit fails). An unchanged
// overlay costs that one readlink (BenchmarkRefreshUnchanged). The caller
// holds mu.
func (c *nodeCache) refresh() {
	link, lerr := os.Readlink(c.linkPath)
	if c.probed && c.err == nil && link == c.link {
		// A real driver loaded since (the GPU operator's driver container):
		// from the next container on, nothing by default. One stat.
		c.node.RealDriver = inject.RealDriverLoaded(c.procRoot)
		c.refreshMIG()
		return
	}
	n, err := c.probe(c.root)
	c.probed = true
	c.link = link
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && lerr != nil {
			err = errors.Join(errNoOverlay, err)
		}
		c.node, c.err = inject.NodeState{}, err
		return
	}
	c.node, c.err = n, nil
	c.rebuildUse()
}

// refreshMIG re-reads the node's MIG devices when its live state has
// changed since (nvidia-smi mig on the node, a layout applied): one
// read of the state's header when it has not. The caller holds mu.
func (c *nodeCache) refreshMIG() {
	n := &c.node
	if n.State == "" || n.MIGGen == live.Generation(n.State) {
		return
	}
	data, err := os.ReadFile(n.Snapshot)
	if err == nil {
		var migs []inject.MIGDevice
		var on []bool
		var gen uint64
		if migs, on, gen, err = inject.ProbeMIG(n.State, data, n.GPUs, filepath.Join(n.DriverRoot, "dev")); err == nil {
			n.MIG, n.MIGOn, n.MIGGen = migs, on, gen
			c.rebuildMIGUse()
			return
		}
	}
	c.err = err // the next call probes again
}

// rebuildMIGUse counts the containers given each MIG device, from the
// NVIDIA_VISIBLE_DEVICES values they were given: on nodes with MIG devices
// only, where a count walks the live containers. The caller holds mu.
func (c *nodeCache) rebuildMIGUse() {
	n := &c.node
	if len(n.MIG) == 0 {
		n.MIGInUse = nil
		return
	}
	n.MIGInUse = make([]int, len(n.MIG))
	for _, g := range c.gpus {
		_, migs := n.Named(g.visible)
		for _, k := range migs {
			n.MIGInUse[k]++
		}
	}
}

// rebuildUse recomputes the use counts for the current node's GPUs from
// the UUIDs each container was given. The caller holds mu.
func (c *nodeCache) rebuildUse() {
	if len(c.node.GPUs) == 0 {
		c.node.InUse = nil
		return
	}
	c.node.InUse = make([]int, len(c.node.GPUs))
	for id, g := range c.gpus {
		g.idx = indicesOf(&c.node, g.visible)
		c.gpus[id] = g
		for _, i := range g.idx {
			c.node.InUse[i]++
		}
	}
	c.rebuildMIGUse()
}

// record remembers the GPUs given to a container. The caller holds mu.
func (c *nodeCache) record(id string, idx []int, visible string) {
	if id == "" || len(idx) == 0 {
		return
	}
	c.forget(id)
	c.gpus[id] = given{idx: idx, visible: visible}
	if len(c.node.InUse) == len(c.node.GPUs) {
		for _, i := range idx {
			if i < len(c.node.InUse) {
				c.node.InUse[i]++
			}
		}
	}
	c.countMIG(visible, 1)
}

// countMIG adds delta to the use counts of the MIG devices a visible value
// names, in any form rebuildMIGUse reads (a UUID, GPU:MIG, a CDI name), so
// a container's end frees what its start counted. The caller holds mu.
func (c *nodeCache) countMIG(visible string, delta int) {
	n := &c.node
	if len(n.MIGInUse) != len(n.MIG) || len(n.MIG) == 0 {
		return
	}
	_, migs := n.Named(visible)
	for _, k := range migs {
		if n.MIGInUse[k]+delta >= 0 {
			n.MIGInUse[k] += delta
		}
	}
}

// forget frees a container's GPUs. The caller holds mu.
func (c *nodeCache) forget(id string) bool {
	g, ok := c.gpus[id]
	if !ok {
		return false
	}
	delete(c.gpus, id)
	for _, i := range g.idx {
		if i < len(c.node.InUse) && c.node.InUse[i] > 0 {
			c.node.InUse[i]--
		}
	}
	c.countMIG(g.visible, -1)
	return true
}

// indicesOf maps an NVIDIA_VISIBLE_DEVICES value to the node's GPU
// indices, a MIG device's to its GPU's, in ascending order: UUIDs (as the
// plugin sets and records it), or whatever NVIDIA's runtime reads there (a
// device plugin's indices, CDI names the plugin left for the runtime);
// entries naming nothing of the node are dropped.
func indicesOf(node *inject.NodeState, visible string) []int {
	gpus, _ := node.Named(visible)
	return gpus
}

// lastEnv is the value of the last KEY=value of key in env.
func lastEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v, true
		}
	}
	return "", false
}
