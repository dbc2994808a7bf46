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
		// Each socket its share first: NUMA 4 to 7 share CPUs 1 and 2.
		{"a100", "0-2", []string{"0", "0", "0", "0", "2", "2", "1", "1"}, []string{"0", "1-2"}},
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
	p, err := Builtin("h100")
	if err != nil {
		t.Fatal(err)
	}
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

// Sockets cannot share a CPU: a host with fewer CPUs than the profile has
// sockets is refused with a line that says so.
func TestFitCPUsRefusesFewerCPUsThanSockets(t *testing.T) {
	p, err := Builtin("a100")
	if err != nil {
		t.Fatal(err)
	}
	err = p.FitCPUs(cpus(t, "0"))
	if err == nil || err.Error() != "host CPUs: 1 online, fewer than the profile's 2 topology.sockets, which cannot share one" {
		t.Errorf("a100 on 1 CPU: %v", err)
	}
}

// Every built-in profile fits a host of one to nine CPUs, contiguous or not,
// unless it has more sockets than the host CPUs.
func TestFitCPUsFitsEveryBuiltinOnSmallHosts(t *testing.T) {
	for _, name := range Builtins() {
		for _, host := range []string{"0", "0-1", "0-2", "1,3,5", "0-3", "0-4", "0-5", "0-6", "0-8", "2,5"} {
			p, err := Builtin(name)
			if err != nil {
				t.Fatal(err)
			}
			h := cpus(t, host)
			if err := p.FitCPUs(h); err != nil {
				if len(p.Topology.Sockets) > 1 && strings.Count(host, ",")+1 == 1 && !strings.Contains(host, "-") {
					continue // one CPU, several sockets: refused, as above
				}
				t.Errorf("%s on %s: %v", name, host, err)
				continue
			}
			n, err := p.Node()
			if err != nil {
				t.Fatalf("%s on %s: %v", name, host, err)
			}
			for _, g := range n.GPUs {
				if g.CPUs != nil && (!h.Holds(*g.CPUs) || g.CPUs.Last() < 0) {
					t.Errorf("%s on %s: GPU %d has CPUs %q", name, host, g.Index, g.CPUs.List())
				}
			}
		}
	}
}
