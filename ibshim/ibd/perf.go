package ibd

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nvmock/nvmock/ibshim/fabric"
)

// PerfMgt attributes (IBA 16.1.3) and the ClassPortInfo capabilities a
// ConnectX PMA reports: all-port select, extended (64-bit) counters with
// and without IETF, PortXmitWait (which no MAD here ever waits for: 0).
const (
	attrPortCounters    = 0x12
	attrPortCountersExt = 0x1d
	perfCapMask         = 0x0100 | 0x0200 | 0x0400 | 0x1000
	allPorts            = 0xff
)

// errorFields place PortCounters' error counters (IBA 16.1.3.5), by
// their sysfs names: the byte, and for the two 4-bit counters sharing
// byte 19, the nibble.
var errorFields = map[string]struct{ off, shift int }{
	"symbol_error": {4, 0}, "link_error_recovery": {6, 0}, "link_downed": {7, 0},
	"port_rcv_errors": {8, 0}, "port_rcv_remote_physical_errors": {10, 0},
	"port_rcv_switch_relay_errors": {12, 0}, "port_xmit_discards": {14, 0},
	"port_xmit_constraint_errors": {16, 0}, "port_rcv_constraint_errors": {17, 0},
	"local_link_integrity_errors": {19, 4}, "excessive_buffer_overrun_errors": {19, 0},
	"VL15_dropped": {22, 0},
}

// counters are one port's traffic: the MADs that crossed it. Data counts
// 32-bit words, as the PMA does.
type counters struct {
	xmitData, rcvData, xmitPkts, rcvPkts uint64
}

// exchange notes a request from from to to and its answer back.
func (d *Daemon) exchange(from, to *fabric.Port) {
	d.count(from, to)
	d.count(to, from)
}

// count notes a MAD leaving from and arriving at to. Only the two ends
// count it: the switches a MAD crosses keep no counters here.
func (d *Daemon) count(from, to *fabric.Port) { d.countData(from, to, madLen) }

// countData notes a packet of n payload bytes from from to to (PortXmitData
// and PortRcvData count 4-byte words).
func (d *Daemon) countData(from, to *fabric.Port, n int) {
	if from != nil {
		c := d.counter(from)
		c.xmitData += uint64(n) / 4
		c.xmitPkts++
	}
	if to != nil {
		c := d.counter(to)
		c.rcvData += uint64(n) / 4
		c.rcvPkts++
	}
}

func (d *Daemon) counter(p *fabric.Port) *counters {
	if _, ok := d.hcas[p]; ok {
		d.moved[p] = true
	}
	c := d.counters[p]
	if c == nil {
		c = &counters{}
		d.counters[p] = c
	}
	return c
}

// perf answers a PerfMgt Get or Set (a reset) at the port a LID reached:
// req is the request's data, data the answer's.
func (d *Daemon) perf(m mad, at *fabric.Port, req, data []byte) uint16 {
	if m[2] != 1 {
		return statusBadVersion
	}
	if m.attr() == attrClassInfo {
		if m.method() != methodGet {
			return statusBadMethodAttr
		}
		data[0], data[1] = 1, 1
		put16(data[2:], perfCapMask)
		put32(data[4:], 18) // response time value
		return 0
	}
	if m.attr() != attrPortCounters && m.attr() != attrPortCountersExt {
		return statusBadMethodAttr
	}
	if m.method() != methodGet && m.method() != methodSet {
		return statusBadMethod
	}
	sel := req[1]
	nd := at.Node
	var ports []*fabric.Port
	switch {
	case sel == allPorts && nd.Type == fabric.Switch:
		ports = nd.Ports[1:]
	case nd.Type == fabric.CA && (sel == 0 || sel == allPorts):
		ports = []*fabric.Port{at}
	case int(sel) < len(nd.Ports) && nd.Ports[sel] != nil:
		ports = []*fabric.Port{nd.Ports[sel]}
	default:
		return statusBadValue
	}
	if m.method() == methodSet {
		for _, p := range ports {
			delete(d.counters, p)
			d.reset[p] = true
			if _, ok := d.hcas[p]; ok {
				d.moved[p], d.zeroed[p] = true, true
			}
		}
	}
	var sum counters
	errs := map[string]uint64{}
	for _, p := range ports {
		if c := d.counters[p]; c != nil {
			sum.xmitData += c.xmitData
			sum.rcvData += c.rcvData
			sum.xmitPkts += c.xmitPkts
			sum.rcvPkts += c.rcvPkts
		}
		if !d.reset[p] {
			for k, v := range p.Errors {
				errs[k] += v
			}
		}
	}
	data[1] = sel
	copy(data[2:4], req[2:4]) // counter select
	if m.attr() == attrPortCountersExt {
		put64(data[8:], sum.xmitData)
		put64(data[16:], sum.rcvData)
		put64(data[24:], sum.xmitPkts)
		put64(data[32:], sum.rcvPkts)
		put64(data[40:], sum.xmitPkts) // every MAD is unicast
		put64(data[48:], sum.rcvPkts)
		return 0
	}
	// The error counters a fault set (fabric.Fault), each in its field.
	for _, c := range fabric.ErrorCounters {
		v, f := min(errs[c.Name], c.Max), errorFields[c.Name]
		switch c.Max {
		case 0xffff:
			put16(data[f.off:], uint16(v))
		case 0xff:
			data[f.off] = byte(v)
		default:
			data[f.off] |= byte(v) << f.shift
		}
	}
	// The 32-bit counters stop at their maximum (IBA 16.1.3.5).
	sat := func(v uint64) uint32 { return uint32(min(v, 0xffffffff)) }
	put32(data[24:], sat(sum.xmitData))
	put32(data[28:], sat(sum.rcvData))
	put32(data[32:], sat(sum.xmitPkts))
	put32(data[36:], sat(sum.rcvPkts))
	return 0
}

// shownCounters are an HCA port's traffic counters for its sysfs files;
// reset: its error counters too, which a PerfMgt Set cleared.
type shownCounters struct {
	hca   string
	c     counters
	reset bool
}

// countersToShow takes the traffic counters of this node's ports that
// moved since they were last shown; mu is held.
func (d *Daemon) countersToShow() []shownCounters {
	var out []shownCounters
	for p := range d.moved {
		var c counters
		if cur := d.counters[p]; cur != nil {
			c = *cur
		}
		out = append(out, shownCounters{d.hcas[p], c, d.zeroed[p]})
	}
	clear(d.moved)
	clear(d.zeroed)
	return out
}

// showCounters writes traffic counters into the node's live ports (dir is
// hostprep.IBLiveDir), which containers and nvmock exec see as their
// HCAs' sysfs: a real HCA's sysfs counters are its PMA's, which perfquery
// reads and resets. Each file is replaced in one rename. A node without
// live ports (nvmock ibd without --state) has nowhere to show them.
func (d *Daemon) showCounters(dir string, shown []shownCounters) {
	for _, s := range shown {
		at := filepath.Join(dir, s.hca, "ports", "1", "counters")
		if _, err := os.Stat(at); err != nil {
			continue
		}
		files := map[string]uint64{
			"port_xmit_data": s.c.xmitData, "port_rcv_data": s.c.rcvData,
			"port_xmit_packets": s.c.xmitPkts, "port_rcv_packets": s.c.rcvPkts,
			// Every MAD here is to one LID or one route.
			"unicast_xmit_packets": s.c.xmitPkts, "unicast_rcv_packets": s.c.rcvPkts,
		}
		if s.reset {
			// Once, at the reset: nvmock ctl ib writes a fault's counts
			// again when it changes the faults, as the PMA reads them.
			for _, c := range fabric.ErrorCounters {
				files[c.Name] = 0
			}
		}
		for name, v := range files {
			path := filepath.Join(at, name)
			err := os.WriteFile(path+".tmp", []byte(strconv.FormatUint(v, 10)+"\n"), 0o444)
			if err == nil {
				err = os.Rename(path+".tmp", path)
			}
			if errors.Is(err, fs.ErrNotExist) {
				break // the live ports went (nvmock exec ending): nothing to show
			}
			if err != nil {
				d.log.WithField("component", "ibd").Warnf("show %s's traffic counters: %v", s.hca, err)
				break
			}
		}
	}
}
