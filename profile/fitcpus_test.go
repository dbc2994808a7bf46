package profile

import (
	"slices"
	"strings"
	"testing"
)

func cpus(t *testing.T, list string) CPUSet {
	t.Helper()
	m, err := ParseCPUList(list)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Each NUMA node's CPUs take a share of the host's, in order: the GPUs of
// one socket share CPUs and those of the other get others, and every list
// (sockets, root complexes) moves alike, so the node still validates.
func TestFitCPUsGivesEachNUMANodeAShareOfTheHost(t *testing.T) {
	for _, c := range []struct {
		profile, host string
		gpus          []string // each GPU's CPUs after
		sockets       []string
	}{
		{"h100", "0-1", []string{"0", "0", "0", "0", "1", "1", "1", "1"}, nil},
		{"h100", "0-7", []string{"0-3", "0-3", "0-3", "0-3", "4-7", "4-7", "4-7", "4-7"}, nil},
		{"h100", "2,5", []string{"2", "2", "2", "2", "5", "5", "5", "5"}, nil},
		{"h100", "0", []string{"0", "0", "0", "0", "0", "0", "0", "0"}, nil},
		// DGX A100's pairs on NUMA 3, 1, 7, 5 of two NPS4 sockets.
		{"a100", "0-1", []string{"0", "0", "0", "0", "1", "1", "1", "1"}, []string{"0", "1"}},
		{"a100", "0-7", []string{"3", "3", "1", "1", "7", "7", "5", "5"}, []string{"0-3", "4-7"}},
		{"gb200", "0-3", []string{"0-1", "0-1", "2-3", "2-3"}, nil},
		{"l40s", "0-1", []string{"0-1"}, nil},
	} {
		p, err := Builtin(c.profile)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.FitCPUs(cpus(t, c.host)); err != nil {
			t.Fatalf("%s on %s: %v", c.profile, c.host, err)
		}
		n, err := p.Node()
		if err != nil {
			t.Fatalf("%s on %s: %v", c.profile, c.host, err)
		}
		var got []string
		for _, g := range n.GPUs {
			got = append(got, g.CPUs.List())
		}
		if !slices.Equal(got, c.gpus) {
			t.Errorf("%s on %s: GPUs' CPUs %q, want %q", c.profile, c.host, got, c.gpus)
		}
		var sockets []string
		for _, s := range p.Topology.Sockets {
			sockets = append(sockets, s.CPUs)
		}
		if !slices.Equal(sockets, c.sockets) {
			t.Errorf("%s on %s: sockets %q, want %q", c.profile, c.host, sockets, c.sockets)
		}
		host := cpus(t, c.host)
		for _, r := range n.PCIe.Roots {
			if !host.Holds(r.CPUs) {
				t.Errorf("%s on %s: root %04x:%02x has CPUs %s", c.profile, c.host, r.Domain, r.Bus, r.CPUs.List())
			}
		}
	}
}

// A host that has every CPU the profile names leaves it as it is.
func TestFitCPUsLeavesAProfileTheHostHolds(t *testing.T) {
	p, _ := Builtin("h100")
	want := slices.Clone(p.Topology.CPUAffinity)
	if err := p.FitCPUs(cpus(t, "0-255")); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Topology.CPUAffinity, want) {
		t.Errorf("CPUs %q, want %q as the profile gives them", p.Topology.CPUAffinity, want)
	}
	if err := p.FitCPUs(CPUSet{}); err == nil || !strings.Contains(err.Error(), "none") {
		t.Errorf("no host CPUs: %v, want an error", err)
	}
}
