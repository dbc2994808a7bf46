package fabric

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/nvmock/nvmock/profile"
)

// Fault is what is wrong with one of a node's HCA ports, as an operator
// gives it: "mlx5_3=down", "mlx5_0=symbol_error:12,link_downed:1", or with
// the node it is for, "gpu-node-1/mlx5_3=down".
type Fault struct {
	Node     string // "": the node it is given to
	HCA      string
	Down     bool              // the cable is out: Down, Polling, no LID
	Counters map[string]uint64 // PMA error counters, by their sysfs names
}

// ErrorCounter is one of the PMA's error counters (IBA 16.1.3.5
// PortCounters), by the name of its sysfs ports/N/counters file, with its
// largest value: the PMA stops counting at its field's width.
type ErrorCounter struct {
	Name string
	Max  uint64
}

// ErrorCounters are the counters a fault may set, in PortCounters order.
var ErrorCounters = []ErrorCounter{
	{"symbol_error", 0xffff}, {"link_error_recovery", 0xff}, {"link_downed", 0xff},
	{"port_rcv_errors", 0xffff}, {"port_rcv_remote_physical_errors", 0xffff},
	{"port_rcv_switch_relay_errors", 0xffff}, {"port_xmit_discards", 0xffff},
	{"port_xmit_constraint_errors", 0xff}, {"port_rcv_constraint_errors", 0xff},
	{"local_link_integrity_errors", 0xf}, {"excessive_buffer_overrun_errors", 0xf},
	{"VL15_dropped", 0xffff},
}

func counterMax(name string) (uint64, bool) {
	for _, c := range ErrorCounters {
		if c.Name == name {
			return c.Max, true
		}
	}
	return 0, false
}

func counterNames() string {
	var n []string
	for _, c := range ErrorCounters {
		n = append(n, c.Name)
	}
	return strings.Join(n, ", ")
}

// For says whether the fault is for the node named host: it names no
// node, or that one.
func (ft Fault) For(host string) bool { return ft.Node == "" || ft.Node == host }

// String is the fault as ParseFault reads it.
func (ft Fault) String() string {
	var what []string
	if ft.Down {
		what = append(what, "down")
	}
	for _, c := range ErrorCounters {
		if v, ok := ft.Counters[c.Name]; ok {
			what = append(what, fmt.Sprintf("%s:%d", c.Name, v))
		}
	}
	s := ft.HCA + "=" + strings.Join(what, ",")
	if ft.Node != "" {
		s = ft.Node + "/" + s
	}
	return s
}

var nodeName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)

// ParseFault reads one fault; the error names what is wrong with it.
func ParseFault(s string) (Fault, error) {
	var f Fault
	target, what, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok || what == "" {
		return f, errors.New("want [NODE/]HCA=down or [NODE/]HCA=COUNTER:N[,...], such as mlx5_3=down")
	}
	if n, h, ok := strings.Cut(target, "/"); ok {
		if n == "" {
			return f, fmt.Errorf("%q: no node name before /; leave out the / for this node", target)
		}
		if !nodeName.MatchString(n) {
			return f, fmt.Errorf("%q is not a node's host name", n)
		}
		f.Node, target = n, h
	}
	if !profile.ValidRDMAName(target) {
		return f, fmt.Errorf("%q is not an HCA name such as mlx5_3", target)
	}
	f.HCA = target
	for _, item := range strings.Split(what, ",") {
		if item == "down" {
			f.Down = true
			continue
		}
		name, num, ok := strings.Cut(item, ":")
		max, known := counterMax(name)
		if !known {
			return f, fmt.Errorf("%q is neither down nor an error counter (%s)", name, counterNames())
		}
		v, err := strconv.ParseUint(num, 10, 64)
		if !ok || err != nil {
			return f, fmt.Errorf("%s needs a count, such as %s:12", name, name)
		}
		if v > max {
			return f, fmt.Errorf("%s counts to %d at most (its PortCounters field stops there)", name, max)
		}
		if _, twice := f.Counters[name]; twice {
			return f, fmt.Errorf("%s is given twice", name)
		}
		if f.Counters == nil {
			f.Counters = map[string]uint64{}
		}
		f.Counters[name] = v
	}
	return f, nil
}

// Merge adds ft to faults: into the fault of the same node and HCA if
// there is one (down stays down, its counters replace those it names),
// so that each port has one fault, which `ctl ib up` and `clear` undo.
func Merge(faults []Fault, ft Fault) []Fault {
	for i := range faults {
		if old := &faults[i]; old.Node == ft.Node && old.HCA == ft.HCA {
			old.Down = old.Down || ft.Down
			for k, v := range ft.Counters {
				if old.Counters == nil {
					old.Counters = map[string]uint64{}
				}
				old.Counters[k] = v
			}
			return faults
		}
	}
	return append(faults, ft)
}

// Apply makes the local node's port faults those meant for it (naming no
// node, or its host), replacing any it had. A down port is uncabled: both
// ends show Down and Polling, directed routes through it end there, and
// its LID is gone, as the SM takes it out of the subnet.
func (f *Fabric) Apply(faults []Fault) error {
	return f.ApplyAt(f.Local, faults)
}

// ApplyAt makes faults those of the node at slot: for the local node as
// Apply says; another real node's (which its daemon told) apply whatever
// node they name.
func (f *Fabric) ApplyAt(slot int, faults []Fault) error {
	host := f.Hosts[f.Local]
	for _, ft := range faults {
		// A fault naming another node may be for a board of another pool
		// (the chart gives each node the fleet's): checked on its node.
		if slot == f.Local && !ft.For(host) {
			continue
		}
		if f.Find(ft.HCA) == nil {
			return fmt.Errorf("the node has no InfiniBand HCA %s (Ethernet ports are in no fabric)", ft.HCA)
		}
	}
	rerouted := map[*Subnet]bool{}
	at := func(hca string) *Node {
		for _, s := range f.Subnets {
			if nd := s.LocalCAs(slot)[hca]; nd != nil {
				return nd
			}
		}
		return nil
	}
	for _, s := range f.Subnets {
		for _, nd := range s.LocalCAs(slot) {
			p := nd.Ports[1]
			p.Errors = nil
			if p.wire != nil && p.Peer == nil { // cabled again
				p.Peer, p.wire.Peer, p.LID = p.wire, p, p.baseLID
				s.ByLID[p.LID] = p
				rerouted[s] = true
			}
		}
	}
	for _, ft := range faults {
		if slot == f.Local && !ft.For(host) {
			continue
		}
		nd := at(ft.HCA)
		p := nd.Ports[1]
		if ft.Down && p.Peer != nil {
			p.wire, p.baseLID = p.Peer, p.LID
			p.Peer.Peer, p.Peer = nil, nil
			nd.Subnet.ByLID[p.LID] = nil
			p.LID = NoLID
			rerouted[nd.Subnet] = true
		}
		for k, v := range ft.Counters {
			if p.Errors == nil {
				p.Errors = map[string]uint64{}
			}
			p.Errors[k] = v
		}
	}
	for s := range rerouted {
		s.route()
	}
	return nil
}

// NoLID is a port's LID before an SM gives it one, as ibstat shows a down
// port's: 65535.
const NoLID = 0xffff

// Down says whether a CA's port has lost its link.
func (p *Port) Down() bool { return p.Node.Type == CA && p.Peer == nil }
