package profile

import "fmt"

// Node is a valid profile resolved for one node into typed values: each
// GPU's board, PCI address, NUMA node and CPUs, and the PCIe tree that holds
// the GPUs, NICs and NVSwitches. Every part of nvmock renders from it (the
// library's snapshot, pcisim, hostprep), so none parses the profile's
// strings again and they cannot disagree.
type Node struct {
	Profile *Profile
	GPUs    []GPU
	PCIe    *PCITree
	IB      *IB // nil: no InfiniBand
}

// GPU is one GPU of the node.
type GPU struct {
	Index    int
	Board    *Board
	Address  PCIAddress
	NUMANode int     // -1: not reported
	CPUs     *CPUSet // nil: not reported
	// SocketCPUs and SocketNodes are the GPU's socket's CPUs and NUMA nodes
	// (bit n for node n); without topology.sockets, its NUMA node's.
	SocketCPUs  *CPUSet
	SocketNodes uint64
	// MemoryNode is the GPU's own memory NUMA node on a coherent board (-1:
	// none); NearNodes the NUMA nodes NVML calls nearest it (bit n for n).
	MemoryNode int
	NearNodes  uint64
	// NVLinkSwitches are, per NVLink, the PCI address of the NVSwitch it
	// reaches; nil where the switches are not PCI devices of the node.
	NVLinkSwitches []PCIAddress
	// Function is the GPU in the PCIe tree.
	Function *PCIFunction
	// ModuleID is the GPU's baseboard module; 0: not reported.
	ModuleID uint32
}

// CPUSet is a CPU bit mask, CPU n at bit n%64 of word n/64.
type CPUSet [MaxCPUs / 64]uint64

// Node resolves a validated profile. Its errors are the tree's: bus
// numbers that do not fit, NUMA nodes that disagree.
func (p *Profile) Node() (*Node, error) {
	if p.GPUs < 1 || p.GPUs > MaxGPUs || len(p.Topology.BusIDs) == 0 {
		return nil, fmt.Errorf("gpus: %d GPUs on %d bus ids cannot be placed", p.GPUs, len(p.Topology.BusIDs))
	}
	boards, errs := p.Boards()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	t := &p.Topology
	n := &Node{Profile: p, GPUs: make([]GPU, p.GPUs)}
	sockets, err := resolveSockets(t.Sockets)
	if err != nil {
		return nil, err
	}
	for i := range n.GPUs {
		g := &n.GPUs[i]
		links := uint32(0)
		if l := boards[i].NVLink; l != nil {
			links = l.Links
		}
		g.Index, g.Board, g.NUMANode = i, &boards[i], -1
		a, err := p.GPUAddress(i)
		if err != nil {
			return nil, err
		}
		g.Address = a
		if len(t.NUMANodes) > 0 {
			g.NUMANode = int(t.NUMANodes[i%len(t.NUMANodes)])
		}
		if len(t.ModuleIDs) > 0 {
			g.ModuleID = t.ModuleIDs[i%len(t.ModuleIDs)]
		}
		if len(t.CPUAffinity) > 0 {
			m, err := ParseCPUList(t.CPUAffinity[i%len(t.CPUAffinity)])
			if err != nil {
				return nil, fmt.Errorf("topology.cpuAffinity: %w", err)
			}
			cs := CPUSet(m)
			g.CPUs = &cs
		}
		g.MemoryNode = -1
		if len(t.GPUNUMANodes) > 0 {
			g.MemoryNode = int(t.GPUNUMANodes[i%len(t.GPUNUMANodes)])
		}
		if err := placeNUMA(g, t, sockets); err != nil {
			return nil, err
		}
		for _, sw := range t.LinkSwitches(links) {
			s, err := ParsePCIAddress(t.NVSwitches[sw])
			if err != nil {
				return nil, fmt.Errorf("topology.nvswitches: %w", err)
			}
			s.Domain += uint32(i/len(t.BusIDs)) << 16 // the switches of the GPU's copy of the tree
			g.NVLinkSwitches = append(g.NVLinkSwitches, s)
		}
	}
	tree, err := buildTree(p, n.GPUs)
	if err != nil {
		return nil, err
	}
	n.PCIe = tree
	if p.InfiniBand != nil {
		if n.IB, err = p.resolveIB(tree); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// GPUAddress places GPU i: entry i mod len of topology.busIds, moved to
// PCI domain + 0x10000 per repeat so that large counts stay unique.
func (p *Profile) GPUAddress(i int) (PCIAddress, error) {
	ids := p.Topology.BusIDs
	if len(ids) == 0 {
		return PCIAddress{}, fmt.Errorf("topology.busIds: is empty")
	}
	a, err := ParsePCIAddress(ids[i%len(ids)])
	if err != nil {
		return a, fmt.Errorf("topology.busIds: %w", err)
	}
	a.Domain += uint32(i/len(ids)) << 16
	return a, nil
}

// BusID is the GPU's bus id as NVML spells it: "00000000:07:00.0".
func (a PCIAddress) BusID() string {
	return fmt.Sprintf("%08X:%02X:%02X.%X", a.Domain, a.Bus, a.Device, a.Function)
}

// String is the address as sysfs names it: "0000:07:00.0".
func (a PCIAddress) String() string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", a.Domain, a.Bus, a.Device, a.Function)
}

// List is the set as the kernel's cpulist files spell it: "0-55,112-167".
func (s *CPUSet) List() string {
	var b []byte
	for n := 0; n < MaxCPUs; {
		if !s.Has(n) {
			n++
			continue
		}
		end := n
		for end+1 < MaxCPUs && s.Has(end+1) {
			end++
		}
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d", n)
		if end > n {
			b = fmt.Appendf(b, "-%d", end)
		}
		n = end + 1
	}
	return string(b)
}

// Mask is the set as the kernel's cpumask files spell it: 32-bit hex words,
// most significant first, enough of them for cpus CPUs.
func (s *CPUSet) Mask(cpus int) string {
	words := max((cpus+31)/32, 1)
	b := make([]byte, 0, words*9)
	for w := words - 1; w >= 0; w-- {
		v := uint32(s[w/2] >> (32 * (w % 2)))
		b = fmt.Appendf(b, "%08x", v)
		if w > 0 {
			b = append(b, ',')
		}
	}
	return string(b)
}

// Has says whether CPU n is in the set.
func (s *CPUSet) Has(n int) bool { return s[n/64]>>(n%64)&1 == 1 }

// Intersects says whether s and o share a CPU.
func (s *CPUSet) Intersects(o CPUSet) bool {
	for w := range s {
		if s[w]&o[w] != 0 {
			return true
		}
	}
	return false
}

// Holds says whether every CPU of o is in s.
func (s *CPUSet) Holds(o CPUSet) bool {
	for w := range s {
		if o[w]&^s[w] != 0 {
			return false
		}
	}
	return true
}

// Last is the highest CPU in the set, -1 if it is empty.
func (s *CPUSet) Last() int {
	for n := MaxCPUs - 1; n >= 0; n-- {
		if s.Has(n) {
			return n
		}
	}
	return -1
}

// socket is a topology.sockets entry resolved: its CPUs and NUMA nodes.
type socket struct {
	cpus  CPUSet
	nodes uint64
	list  string // as the profile gives the CPUs, for errors
}

func resolveSockets(in []Socket) ([]socket, error) {
	out := make([]socket, len(in))
	for i, s := range in {
		m, err := ParseCPUList(s.CPUs)
		if err != nil {
			return nil, fmt.Errorf("topology.sockets[%d].cpus: %w", i, err)
		}
		out[i] = socket{cpus: m, list: s.CPUs}
		for _, n := range s.NUMANodes {
			out[i].nodes |= 1 << n
		}
	}
	return out, nil
}

// placeNUMA gives a GPU the NUMA nodes NVML calls nearest it, and its
// socket: the one holding its NUMA node, whose CPUs must hold the GPU's.
// Without sockets, the GPU's NUMA node stands for its socket.
func placeNUMA(g *GPU, t *Topology, sockets []socket) error {
	var own uint64
	if g.NUMANode >= 0 {
		own = 1 << g.NUMANode
	}
	g.NearNodes = own
	if len(t.NUMAAffinity) > 0 {
		m, err := ParseNodeList(t.NUMAAffinity[g.Index%len(t.NUMAAffinity)])
		if err != nil {
			return fmt.Errorf("topology.numaAffinity: %w", err)
		}
		g.NearNodes = m
	}
	if len(sockets) == 0 {
		g.SocketCPUs, g.SocketNodes = g.CPUs, own
		return nil
	}
	for i := range sockets {
		s := &sockets[i]
		if s.nodes&own == 0 {
			continue
		}
		if g.CPUs != nil && !s.cpus.Holds(*g.CPUs) {
			return fmt.Errorf("topology.sockets[%d].cpus: GPU %d's CPUs (topology.cpuAffinity) are not all in %q", i, g.Index, s.list)
		}
		g.SocketCPUs, g.SocketNodes = &s.cpus, s.nodes
		return nil
	}
	return fmt.Errorf("topology.sockets: GPU %d's NUMA node %d (topology.numaNodes) is in no socket", g.Index, g.NUMANode)
}
