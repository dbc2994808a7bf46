package hostprep

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/profile"
)

// MIG access is by capability, as the kernel module gives it (NVIDIA's
// MIG guide, "Device Nodes and Capabilities"): each GPU instance and each
// compute instance has a file under /proc/driver/nvidia/capabilities/
// gpu<minor>/mig/ naming the minor of its /dev/nvidia-caps/nvidia-cap<N>
// node, and /proc/driver/nvidia-caps/mig-minors lists every minor there
// can be. Containers get a MIG device's two nodes; tools (nvidia-ctk, the
// device plugin) map capabilities to nodes through mig-minors.
//
// The module shows the files and makes the nodes of existing instances
// only; the overlay is static, so it has those of every instance a GPU of
// the node can hold.

const (
	migMinorGPUs = 32 // GPUs mig-minors covers
	migGIs       = 15
	migCIs       = 8
)

// MIGCapMinor is the minor of GPU instance gi's capability on the GPU of
// minor gpu, or of its compute instance ci (ci < 0: the GPU instance's):
// 3 + 135 gpu + 9 gi, then one per compute instance, as mig-minors numbers
// them on real nodes.
func MIGCapMinor(gpu, gi, ci int) int {
	m := 3 + (1+migCIs)*migGIs*gpu + (1+migCIs)*gi
	if ci >= 0 {
		m += 1 + ci
	}
	return m
}

// MIGMinors is /proc/driver/nvidia-caps/mig-minors.
func MIGMinors() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config %d\nmonitor %d\n", capMigConfigMinor, capMigMonitorMinor)
	for g := 0; g < migMinorGPUs; g++ {
		for gi := 0; gi < migGIs; gi++ {
			fmt.Fprintf(&b, "gpu%d/gi%d/access %d\n", g, gi, MIGCapMinor(g, gi, -1))
			for ci := 0; ci < migCIs; ci++ {
				fmt.Fprintf(&b, "gpu%d/gi%d/ci%d/access %d\n", g, gi, ci, MIGCapMinor(g, gi, ci))
			}
		}
	}
	return b.String()
}

// migInstances calls f for each GPU instance (ci < 0) and compute
// instance a GPU of the node can hold, on GPUs of minors 0 to gpus-1 of
// board m: those its profiles can make (a GPU instance of c compute slices
// holds c compute instances at most), 42 per GPU on an A100.
func migInstances(m *profile.MIG, gpus int, f func(g, gi, ci int)) {
	var cis [migGIs]int // compute instances a GPU instance of each id can hold
	for _, p := range m.GPUInstances {
		for _, start := range p.Placements {
			id := live.MIGGIID(start, p.MemorySlices)
			cis[id] = max(cis[id], int(p.ComputeSlices()))
		}
	}
	for g := 0; g < gpus; g++ {
		for gi := 0; gi < migGIs; gi++ {
			if cis[gi] == 0 {
				continue
			}
			f(g, gi, -1)
			for ci := 0; ci < cis[gi]; ci++ {
				f(g, gi, ci)
			}
		}
	}
}

// migCapFile is the /proc capability file of a GPU or compute instance.
func migCapFile(g, gi, ci int) string {
	dir := filepath.Join(capsDir, fmt.Sprintf("gpu%d", g), "mig", fmt.Sprintf("gi%d", gi))
	if ci >= 0 {
		dir = filepath.Join(dir, fmt.Sprintf("ci%d", ci))
	}
	return filepath.Join(dir, "access")
}

// migProcEntries are the MIG capability files of /proc: mig-minors and
// one file per instance.
func migProcEntries(m *profile.MIG, gpus int) []entry {
	es := []entry{{path: filepath.Join("driver", "proc", "driver", "nvidia-caps", "mig-minors"), data: []byte(MIGMinors()), mode: 0o444}}
	migInstances(m, gpus, func(g, gi, ci int) {
		es = append(es, entry{path: migCapFile(g, gi, ci), data: []byte(ProcCapability(MIGCapMinor(g, gi, ci), 0o444)), mode: 0o444})
	})
	return es
}

// migNodeEntries are the MIG capability nodes: the config and monitor
// capabilities' and one per instance.
func migNodeEntries(m *profile.MIG, gpus int, real, plain bool) []entry {
	es := migControlEntries(real, plain)
	migInstances(m, gpus, func(g, gi, ci int) {
		es = append(es, capNode(MIGCapMinor(g, gi, ci), real, plain))
	})
	return es
}

// RenderMIGCaps writes the /proc capability files of profile p's node
// (proc/driver/nvidia/capabilities and proc/driver/nvidia-caps) into dir
// and, if nodes, its inert capability nodes (dev/nvidia-caps), for a
// caller that renders with Options.SharedMIGProc and SharedMIGNodes.
// Every node of a board has the same: nvmock exec keeps them in its cache.
func RenderMIGCaps(dir string, p *profile.Profile, nodes bool) error {
	m := p.Board.Modes.MIG
	if m == nil || len(m.GPUInstances) == 0 {
		return fmt.Errorf("profile %s: board has no MIG", p.Name)
	}
	es := append(controlCapEntries(), migProcEntries(m, p.GPUs)...)
	if nodes {
		es = append(es, migNodeEntries(m, p.GPUs, false, false)...)
	}
	for i := range es {
		es[i].path = strings.TrimPrefix(es[i].path, "driver"+string(filepath.Separator))
	}
	return writeEntries(dir, es)
}

// capNode is the inert (or, real, NVIDIA's) node of a capability minor.
func capNode(minor int, real, plain bool) entry {
	n := DevNode{Name: fmt.Sprintf("nvidia-caps/nvidia-cap%d", minor), Major: nullMajor, Minor: nullMinor}
	if real {
		n.Major, n.Minor = capsMajor, uint32(minor)
	}
	return entry{path: filepath.Join("driver", "dev", n.Name), node: &n, plain: plain}
}

// migControlEntries are the nodes of the MIG config and monitor
// capabilities, which a MIG-capable host has (nvidia-modprobe makes them):
// with the monitor's, a process on the node sees every MIG device, as root
// does on a real one.
func migControlEntries(real, plain bool) []entry {
	return []entry{capNode(capMigConfigMinor, real, plain), capNode(capMigMonitorMinor, real, plain)}
}
