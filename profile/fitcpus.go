package profile

import (
	"errors"
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
// fewer CPUs than there are groups; within a socket's share where the
// profile has topology.sockets, which cannot share CPUs. A host that has
// every CPU the profile names changes nothing. p must be valid.
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
	// Sockets cannot share CPUs: each takes its share of the host's, which
	// its groups share; groups outside every socket share all of them.
	nsock, h := len(t.Sockets), len(hostCPUs)
	if nsock > h {
		return fmt.Errorf("host CPUs: %d online, fewer than the profile's %d topology.sockets, which cannot share one", h, nsock)
	}
	parts := make([][]int, nsock+1) // socket -> its groups in order; the last: no socket's
	for g, cs := range members {
		part := nsock
		for s := range nsock {
			if sets[len(t.CPUAffinity)+s].Has(cs[0]) {
				part = s
				break
			}
		}
		parts[part] = append(parts[part], g)
	}
	image := make([]CPUSet, len(members))
	for part, gs := range parts {
		hs := hostCPUs
		if part < nsock {
			hs = hostCPUs[part*h/nsock : (part+1)*h/nsock]
		}
		for j, g := range gs {
			lo, hi := j*len(hs)/len(gs), (j+1)*len(hs)/len(gs)
			for _, c := range hs[lo:max(hi, lo+1)] {
				image[g][c/64] |= 1 << (c % 64)
			}
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
		return fmt.Errorf("host CPUs: %w", errors.Join(errs...))
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
