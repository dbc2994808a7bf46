package profile

import (
	"fmt"
	"os"
	"strings"
)

// FitCPUs moves the profile's CPUs onto host, the CPUs a machine has: a
// real node's NVML and sysfs name only CPUs that exist, and tools that check
// a GPU's CPUs against the host's (Slurm's AutoDetect=nvml) drop those they
// cannot find. Every CPU list (GPUs' affinity, sockets, PCIe root
// complexes) maps through one function, so what one list holds of another
// it still holds: the CPUs the lists split alike (a NUMA node's, in
// practice) form groups, in order of their first CPU, and each group takes
// an even share of host's CPUs in order, or one of them when host has
// fewer CPUs than there are groups. A host that has every CPU the profile
// names changes nothing.
func (p *Profile) FitCPUs(host CPUSet) error {
	var hostCPUs []int
	for c := 0; c < MaxCPUs; c++ {
		if host.Has(c) {
			hostCPUs = append(hostCPUs, c)
		}
	}
	if len(hostCPUs) == 0 {
		return fmt.Errorf("host CPUs: none given")
	}
	t := &p.Topology
	var lists []*string
	for i := range t.CPUAffinity {
		lists = append(lists, &t.CPUAffinity[i])
	}
	for i := range t.Sockets {
		lists = append(lists, &t.Sockets[i].CPUs)
	}
	if p.PCIe != nil {
		for i := range p.PCIe.RootComplexes {
			if p.PCIe.RootComplexes[i].CPUs != "" {
				lists = append(lists, &p.PCIe.RootComplexes[i].CPUs)
			}
		}
	}
	sets := make([]CPUSet, len(lists))
	for i, l := range lists {
		m, err := ParseCPUList(*l)
		if err != nil {
			return err // Validate has passed: not reached
		}
		sets[i] = m
	}
	var all CPUSet
	for i := range sets {
		for w := range all {
			all[w] |= sets[i][w]
		}
	}
	if host.Holds(all) {
		return nil
	}
	// A CPU's group is the lists that hold it.
	group := map[string]int{}
	var members [][]int // group -> its CPUs, first CPU ascending
	for c := 0; c < MaxCPUs; c++ {
		var key strings.Builder
		for i := range sets {
			if sets[i].Has(c) {
				fmt.Fprintf(&key, "%d,", i)
			}
		}
		if key.Len() == 0 {
			continue
		}
		g, ok := group[key.String()]
		if !ok {
			g = len(members)
			group[key.String()] = g
			members = append(members, nil)
		}
		members[g] = append(members[g], c)
	}
	image := make([]CPUSet, len(members))
	h, k := len(hostCPUs), len(members)
	for g := range members {
		lo, hi := g*h/k, (g+1)*h/k
		hi = max(hi, lo+1)
		for _, c := range hostCPUs[lo:hi] {
			image[g][c/64] |= 1 << (c % 64)
		}
	}
	for i, l := range lists {
		var out CPUSet
		for g, cs := range members {
			if sets[i].Has(cs[0]) { // a group's CPUs are in the same lists
				for w := range out {
					out[w] |= image[g][w]
				}
			}
		}
		*l = out.List()
	}
	if errs := p.Validate(); len(errs) > 0 {
		return fmt.Errorf("host CPUs: %w", errs[0])
	}
	return nil
}

// OnlineCPUs reads the CPUs this machine has online (sysfs's cpu/online).
func OnlineCPUs() (CPUSet, error) {
	const path = "/sys/devices/system/cpu/online"
	b, err := os.ReadFile(path)
	if err != nil {
		return CPUSet{}, err
	}
	m, err := ParseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		return CPUSet{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
