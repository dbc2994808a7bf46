package ibd

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/ibshim/fabric"
)

// Daemons of the fabric's real nodes pass MADs for each other's programs
// over TCP: a request to a port of another real node's slot goes to that
// node's daemon, which hands it to its agent, and the answer comes back the
// same way. Everything else (SMA, SA, PerfMgt) each daemon answers from the
// model, which is the same on every node.
//
// A connection carries frames: u32 length (big-endian) of what follows,
// one byte of type, then a hello (JSON) or a MAD: u8 subnet index, u16
// source LID, u16 destination LID, the umad packet.
//
// A frame of faults (JSON, []fabric.Fault) says which of its ports the
// sending node has faulty (nvmock ctl ib): each daemon applies another
// real node's to that node's CAs in its model, so discovery from any node
// sees a link one node lost.
const (
	frameHello  = 1
	frameMAD    = 2
	frameFaults = 3
	maxFrame    = 1 << 20
	// dialEvery is how often a daemon tries the peers it is not connected
	// to, and rereads their addresses.
	dialEvery = time.Second
)

// hello says which fabric and slot a daemon serves.
type hello struct {
	Fabric string `json:"fabric"`
	Slot   int    `json:"slot"`
	Host   string `json:"host"`
	Model  string `json:"model,omitempty"` // fabric.Fabric.Model; older daemons send none
}

// peer is a connection to another real node's daemon. Frames go out
// through one writer, in order, but for the groups frame, which comes
// whenever the writer is free after the hello; a peer too slow to take
// them loses frames (its requests time out), and one whose write fails is
// dropped.
type peer struct {
	conn net.Conn
	slot int
	host string
	out  chan []byte   // never closed: senders may hold the peer a while
	done chan struct{} // closed when the connection ends
	// faults is the last faults frame that came on this link (under
	// Daemon.mu): the node's state, should this link become the one in use.
	faults []fabric.Fault
	// groups is the node's multicast memberships, as the last groups
	// frame on this link said (under Daemon.mu).
	groups map[mcKey]*mcGroup
	// state holds the latest groups frame not yet written: a newer one
	// replaces it, and none is lost to a full queue.
	state chan []byte
	// pending counts the requests this link brought that await an answer
	// here (under Daemon.mu).
	pending int
}

// peerQueue is how many frames may wait for a peer's writer.
const peerQueue = 256

func newPeer(c net.Conn) *peer {
	p := &peer{conn: c, out: make(chan []byte, peerQueue), done: make(chan struct{}), state: make(chan []byte, 1)}
	go func() {
		var state chan []byte // none before the hello, which goes first
		for {
			var b []byte
			select {
			case b = <-p.out:
			case b = <-state:
			case <-p.done:
				return
			}
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write(b); err != nil {
				c.Close() // a frame half written leaves the stream unreadable
				<-p.done
				return
			}
			state = p.state
		}
	}()
	return p
}

// sendState queues a groups frame in place of one not yet written.
func (p *peer) sendState(body []byte) {
	b := frame(frameGroups, [][]byte{body})
	for {
		select {
		case p.state <- b:
			return
		default:
			select {
			case <-p.state:
			default:
			}
		}
	}
}

// send queues a frame; it never blocks.
func (p *peer) send(typ byte, body ...[]byte) {
	select {
	case p.out <- frame(typ, body):
	default:
	}
}

// sendWait queues a frame, waiting at most dataWait for room: data has
// backpressure, where a MAD is simply lost.
func (p *peer) sendWait(typ byte, body ...[]byte) {
	t := time.NewTimer(dataWait)
	defer t.Stop()
	select {
	case p.out <- frame(typ, body):
	case <-p.done:
	case <-t.C:
	}
}

func frame(typ byte, body [][]byte) []byte {
	n := 1
	for _, b := range body {
		n += len(b)
	}
	buf := make([]byte, 0, 4+n)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	buf = append(buf, typ)
	for _, b := range body {
		buf = append(buf, b...)
	}
	return buf
}

func readFrame(r *bufio.Reader) (byte, []byte, error) {
	var n uint32
	if err := binary.Read(r, binary.BigEndian, &n); err != nil {
		return 0, nil, err
	}
	if n < 1 || n > maxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes", n)
	}
	// Grown as the bytes come: a length alone holds no memory (review: 500
	// links each announcing 1 MiB and sending nothing held 500 MB).
	var buf bytes.Buffer
	buf.Grow(int(min(n, 64<<10))) // a packet's frame in one allocation
	if _, err := io.CopyN(&buf, r, int64(n)); err != nil {
		return 0, nil, err
	}
	b := buf.Bytes()
	return b[0], b[1:], nil
}

// ServePeers takes the connections other daemons make to l until it is
// closed.
func (d *Daemon) ServePeers(l net.Listener) error {
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			if d.acceptFailed(err, &backoff) {
				continue
			}
			return err
		}
		backoff = 0
		// Counted here, not in peerConn, so that a burst of connections is
		// bounded too (review: links were unbounded).
		if d.accepted.Add(1) > int64(maxLinks(len(d.fab.Hosts))) {
			d.accepted.Add(-1)
			c.Close()
			continue
		}
		go func() {
			defer d.accepted.Add(-1)
			d.peerConn(c)
		}()
	}
}

// maxLinks bounds the links other daemons make to a daemon of a fabric of
// n nodes: each other node dials it, and some are on their way out.
func maxLinks(n int) int { return 4*n + 16 }

// DialPeers keeps a connection to every address addrs gives (rereading it
// every second: a headless Service's endpoints change) until stop closes.
// An address that turns out to be this daemon's own is left alone.
func (d *Daemon) DialPeers(addrs func() []string, stop <-chan struct{}) {
	var mu sync.Mutex
	busy := map[string]bool{} // connected, connecting, or this daemon
	for {
		for _, a := range addrs() {
			mu.Lock()
			if busy[a] {
				mu.Unlock()
				continue
			}
			busy[a] = true
			mu.Unlock()
			go func(a string) {
				c, err := net.DialTimeout("tcp", a, 2*time.Second)
				if err == nil {
					switch d.peerConn(c) {
					case linkSelf:
						return // stays busy: never dialled again
					case linkRefused:
						// Another node's slot, fabric or profile: it may be
						// mended (review: a slot held a moment by another
						// was never dialled again).
						select {
						case <-stop:
						case <-time.After(refusedWait):
						}
					}
				}
				mu.Lock()
				delete(busy, a)
				mu.Unlock()
			}(a)
		}
		select {
		case <-stop:
			return
		case <-time.After(dialEvery):
		}
	}
}

// How a link ended, for DialPeers.
type linkEnd int

const (
	linkEnded   linkEnd = iota // dial again
	linkRefused                // another fabric, profile or a slot taken: dial again later
	linkSelf                   // this daemon itself: never again
)

// refusedWait is how long a refused peer waits to be dialled again.
var refusedWait = 30 * time.Second

// peerConn greets the daemon at the other end of c and serves its frames
// until the connection ends. It says how, for dialling it again.
func (d *Daemon) peerConn(c net.Conn) linkEnd {
	p := newPeer(c)
	defer func() { close(p.done); c.Close() }()
	defer func() {
		if r := recover(); r != nil {
			d.log.WithField("component", "ibd").Errorf("a peer's frame broke the daemon (%v); the link is closed", r)
		}
	}()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return linkSelf
	}
	d.conns[c] = true
	me, _ := json.Marshal(hello{Fabric: d.fab.Name, Slot: d.fab.Local, Host: d.fab.Hosts[d.fab.Local], Model: d.fab.Model})
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.conns, c)
		d.mu.Unlock()
	}()
	p.send(frameHello, me)
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	typ, body, err := readFrame(r)
	c.SetReadDeadline(time.Time{})
	var h hello
	if err != nil || typ != frameHello || json.Unmarshal(body, &h) != nil {
		return linkEnded
	}
	log := d.log.WithFields(logrus.Fields{"component": "ibd", "peer": c.RemoteAddr().String(), "host": h.Host, "slot": h.Slot})
	switch {
	case h.Fabric != d.fab.Name:
		log.Warnf("peer serves fabric %q, not %q: ignored", h.Fabric, d.fab.Name)
		return linkRefused
	case h.Model != "" && h.Model != d.fab.Model:
		// Its LIDs and routes would not be this node's.
		log.Warnf("peer builds fabric %q from another profile (nodes, spines, switches or HCAs differ): ignored; give every node of a fabric the same profile", h.Fabric)
		return linkRefused
	case h.Slot == d.fab.Local && h.Host == d.fab.Hosts[d.fab.Local]:
		return linkSelf
	case h.Slot == d.fab.Local || h.Slot < 0 || h.Slot >= len(d.fab.Hosts):
		log.Warnf("peer claims slot %d, which is this node's or none of the fabric's %d; give the nodes slots of their own", h.Slot, len(d.fab.Hosts))
		return linkRefused
	}
	p.slot, p.host = h.Slot, h.Host
	d.mu.Lock()
	if old := d.peers[p.slot]; old != nil && old.host != p.host {
		d.mu.Unlock()
		log.Warnf("peer claims slot %d, which %s holds; give the nodes slots of their own", h.Slot, old.host)
		return linkRefused
	}
	if old := d.peers[p.slot]; old != nil {
		p.groups = old.groups // until this link brings the node's own
	}
	d.peers[p.slot] = p // the same node again (both dialled each other): the newer link
	d.links[p] = true
	d.name(p.slot, p.host)
	p.send(frameFaults, d.faultsFrame())
	if b := d.groupsFrame(); b != nil {
		p.sendState(b)
	}
	d.mftChanged()
	d.mu.Unlock()
	log.Info("peer connected")
	defer func() {
		d.mu.Lock()
		delete(d.links, p)
		for k, pd := range d.pending {
			if pd.peer == p { // its answer has nowhere to go
				pd.timer.Stop()
				delete(d.pending, k)
			}
		}
		p.pending = 0
		if d.peers[p.slot] == p {
			delete(d.peers, p.slot)
			for q := range d.links {
				if q.slot == p.slot {
					d.peers[q.slot] = q // the node's other link carries on
					d.fab.ApplyAt(q.slot, q.faults)
				}
			}
			if d.peers[p.slot] == nil {
				d.name(p.slot, fmt.Sprintf(d.fab.HostFormat, p.slot+1)) // modelled again
				d.fab.ApplyAt(p.slot, nil)                              // and healthy
			}
			d.mftChanged()
		}
		d.mu.Unlock()
		log.Info("peer gone")
	}()
	for {
		typ, body, err := readFrame(r)
		if err != nil {
			return linkEnded
		}
		if typ == frameFaults {
			d.peerFaults(p, body, log)
			continue
		}
		if typ == frameGroups {
			d.peerGroups(p, body, log)
			continue
		}
		if typ == frameVerbs {
			d.verbsFromPeer(body)
			continue
		}
		if typ != frameMAD || len(body) < 5+umadHdrLen+madLen || int(body[0]) >= len(d.fab.Subnets) || oversized(packet(body[5:])) {
			continue
		}
		for _, o := range d.fromPeer(p, int(body[0]), binary.BigEndian.Uint16(body[1:]), binary.BigEndian.Uint16(body[3:]), packet(body[5:])) {
			d.sendOut(o)
		}
	}
}

// faultsFrame is this node's port faults as a frame's body; mu is held.
func (d *Daemon) faultsFrame() []byte {
	b, _ := json.Marshal(d.faults)
	return b
}

// peerFaults applies the faults a peer says its node has.
func (d *Daemon) peerFaults(p *peer, body []byte, log *logrus.Entry) {
	var faults []fabric.Fault
	if err := json.Unmarshal(body, &faults); err != nil {
		log.Warnf("port faults from peer: %v", err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p.faults = faults
	if d.peers[p.slot] != p {
		return
	}
	if err := d.fab.ApplyAt(p.slot, faults); err != nil {
		log.Warnf("port faults from peer: %v", err)
	}
	d.mftChanged()
}

// name gives a slot's CAs their host's name, as rdma-ndd sets node
// descriptions: "<host> <device>".
func (d *Daemon) name(slot int, host string) {
	d.fab.Place(slot, host)
	for _, s := range d.fab.Subnets {
		for _, nd := range s.Nodes {
			if nd.Type == fabric.CA && nd.Slot >= 0 { // a host's (not a switch's aggregation node)
				nd.Desc = fabric.CADesc(d.fab.Hosts[nd.Slot], nd.HCA)
			}
		}
	}
}

// subnetIndex is a subnet's index in the fabric, which a frame between
// daemons names it by.
func (d *Daemon) subnetIndex(s *fabric.Subnet) int {
	for i, x := range d.fab.Subnets {
		if x == s {
			return i
		}
	}
	return 0
}

// relay sends a request or answer between ports of two real nodes.
func (d *Daemon) relay(p *peer, from, to *fabric.Port, u packet) {
	head := []byte{byte(d.subnetIndex(from.Node.Subnet)), 0, 0, 0, 0}
	binary.BigEndian.PutUint16(head[1:], from.LID)
	binary.BigEndian.PutUint16(head[3:], to.LID)
	p.send(frameMAD, head, u)
}

// fromPeer handles a MAD another node's daemon relayed: a request for an
// agent of this node, or the answer to one of this node's requests.
func (d *Daemon) fromPeer(p *peer, subnet int, from, to uint16, u packet) []outgoing {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer func() { d.out = nil }()
	d.refresh()
	s := d.fab.Subnets[subnet]
	src, dst := s.Port(from), s.Port(to)
	if src == nil || dst == nil {
		return nil // a LID this node does not know, or a port of it that is down
	}
	m := u.mad()
	if m[0] != 1 {
		return nil // dropped as handle drops it; the asker's daemon times it out
	}
	if m.isResponse() {
		d.answered(src, u)
		return d.out
	}
	a := d.agentFor(dst, m)
	if a == nil {
		if unmatched(dst, m) {
			d.exchange(src, dst)
			d.relay(p, dst, src, unmatchedReply(u))
		}
		return nil // else the asker's own daemon times it out
	}
	if p.pending >= maxOutstanding {
		return nil // the asker's own daemon times it out
	}
	key := pendingKey{at: dst, tid: m.tid()}
	pd := &pending{peer: p, from: src}
	pd.timer = time.AfterFunc(wait(u), func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.pending[key] == pd {
			delete(d.pending, key)
			p.pending--
		}
	})
	d.supersede(key)
	d.pending[key] = pd
	p.pending++
	d.count(src, dst)
	d.out = append(d.out, outgoing{a.c, d.forward(u, a, src)})
	return d.out
}

// Close ends the daemon's connections to other nodes' daemons (its
// listeners are the caller's to close).
func (d *Daemon) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for c := range d.conns {
		c.Close()
	}
}
