package ibd

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/ibshim/umad"
	"github.com/nvmock/nvmock/profile"
)

const (
	vendorIBPing  = 0x32
	ouiOpenFabric = 0x001405
	qkeyGSI       = 0x80010000
)

// Daemon answers the node's MADs over its fabric.
type Daemon struct {
	fab   *fabric.Fabric
	umads []*fabric.Port // by packet index; nil: an Ethernet (RoCE) port
	log   *logrus.Logger
	start time.Time

	mu       sync.Mutex
	counters map[*fabric.Port]*counters
	reset    map[*fabric.Port]bool // ports whose fault's error counters a PerfMgt Set cleared
	agents   []*agent
	hiTID    uint32 // the last agent's: node-wide, as the kernel numbers its MAD agents
	pending  map[pendingKey]*pending
	peers    map[int]*peer  // other real nodes' daemons, by slot: the link in use
	links    map[*peer]bool // every link to them: two nodes that dialled each other have two
	async    map[*conn]bool // verbs contexts' async fds
	conns    map[net.Conn]bool
	accepted atomic.Int64 // links ServePeers took and has not seen end
	programs atomic.Int64 // connections Serve took and has not seen end
	fullSaid atomic.Int64 // when a program was last refused for maxPrograms (unix ns)
	closed   bool
	issm     map[*fabric.Port]int // programs holding the port's issm open
	out      []outgoing           // what handle decided to send, sent once mu is free

	faultsPath string         // the port faults file followed (FollowFaults); "": none
	faultsIno  uint64         // the inode last read: each write replaces the file
	faults     []fabric.Fault // this node's, as the peers are told

	hcas   map[*fabric.Port]string // this node's HCA ports, by HCA name
	qpns   map[qpnBlock]*conn      // the verbs contexts, by port and QPN block
	moved  map[*fabric.Port]bool   // this node's ports whose traffic counters sysfs has not shown yet
	zeroed map[*fabric.Port]bool   // of those, the ones a PerfMgt Set reset

	groups   map[mcKey]*mcGroup                                      // multicast groups joined through this daemon (mcast.go)
	attached map[mlidKey]map[mcAttach]bool                           // this node's QPs attached to multicast LIDs
	mftCache map[*fabric.Subnet]map[*fabric.Node]map[uint16][]uint16 // the switches' multicast tables (mft.go)
	tooBig   atomic.Bool                                             // an answer was too big for a socket: said once
}

// outgoing is one message for a program; a program slow to read must not
// hold up the daemon, so nothing is written while mu is held.
type outgoing struct {
	c *conn
	u packet
}

// agent is one registration of a program's packet descriptor.
type agent struct {
	c       *conn
	id      uint32
	class   byte
	oui     uint32
	methods [4]uint32 // the requests it takes, a bit per method
	hiTID   uint32    // the high half of its requests' TIDs
}

// takes says whether the agent registered for requests of method m: an
// ibping client registers its class with no methods, its server with all.
func (a *agent) takes(m byte) bool { return a.methods[m/32]&(1<<(m%32)) != 0 }

type pendingKey struct {
	at  *fabric.Port
	tid uint64
}

// pending is a request handed to an agent, awaiting its answer: one of
// this node's programs asked (c, agent), or another node's (peer).
type pending struct {
	c     *conn
	agent uint32
	peer  *peer
	from  *fabric.Port
	timer *time.Timer
	done  bool // answered: a program's timer that fired meanwhile says nothing
}

// supersede forgets the request awaiting an answer at key, for a newer
// one with the same TID (the askers pick TIDs, and may pick the same):
// its asker still hears that it timed out, and its peer's count goes
// down. mu is held.
func (d *Daemon) supersede(key pendingKey) {
	if old := d.pending[key]; old != nil && old.peer != nil {
		old.timer.Stop()
		old.peer.pending--
	}
}

type conn struct {
	uc     *net.UnixConn
	hello  bool         // said which packet device it is
	port   *fabric.Port // the umad port, nil for an Ethernet one
	issm   *fabric.Port // the port whose issm this is
	agents int          // registered
	wmu    sync.Mutex

	outq    chan packet // MADs for the program, for its writer (queue)
	outOnce sync.Once
	queued  atomic.Int64 // bytes in outq

	tmu    sync.Mutex
	timers map[*time.Timer]bool // its requests' timeouts (after)
	ended  bool

	asyncPort *fabric.Port // a verbs context's async fd: the port it hears of
	asyncDown bool         // the port's state it last heard

	verbsPort *fabric.Port // a verbs context's port, and its QPN block
	block     uint32
	peerIn    chan []byte // packets from other nodes, for their writer
	peerOnce  sync.Once
	gone      chan struct{} // closed when the program's connection ends
}

// send writes a MAD to the program. A program that does not read loses it
// after dataWait, as sendData's packets: the writer holds wmu, and a
// sender of a packet to the program's QP waits for it (review: one that
// never read held such senders forever).
func (c *conn) send(u packet) error { return c.sendData(u) }

// Bounds on what one program may hold in the daemon, so that a program
// that stops reading, or floods it, costs only itself: MADs queued for it,
// in number and in bytes (an SA table is up to maxSend; past either they
// are lost, as on a busy fabric, and a request's asker times out), and
// requests awaiting an answer or their timeout (past that a request times
// out at once); a peer's link likewise. The kernel bounds agents
// (IB_UMAD_MAX_AGENTS).
const (
	madQueue       = 1024
	madQueueBytes  = 2 * maxSend
	maxOutstanding = 4096
	maxAgents      = 32
)

// queue hands a MAD to the program's own writer: whoever sends it (another
// program, a peer's link, a timer) never waits for this program to read.
func (d *Daemon) queue(c *conn, u packet) {
	c.outOnce.Do(func() {
		c.outq = make(chan packet, madQueue)
		go func() {
			for {
				select {
				case u := <-c.outq:
					c.queued.Add(-int64(len(u)))
					err := c.send(u)
					if errors.Is(err, syscall.EMSGSIZE) && d.tooBig.CompareAndSwap(false, true) {
						d.log.WithField("component", "ibd").Warnf("an answer of %d bytes is too big for the program's socket (its send buffer is capped at twice net.core.wmem_max without CAP_NET_ADMIN); the program times out. Raise net.core.wmem_max to %d", len(u), maxSend)
					}
				case <-c.gone:
					return
				}
			}
		}()
	})
	if c.queued.Add(int64(len(u))) > madQueueBytes {
		c.queued.Add(-int64(len(u)))
		return
	}
	select {
	case c.outq <- u:
	default:
		c.queued.Add(-int64(len(u)))
	}
}

// after runs f once dur has passed, unless the program's connection ends
// first; past maxOutstanding waiting, at once.
func (c *conn) after(dur time.Duration, f func()) *time.Timer {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	if c.ended {
		return time.NewTimer(0) // never fires f
	}
	if c.timers == nil {
		c.timers = map[*time.Timer]bool{}
	}
	if len(c.timers) >= maxOutstanding {
		dur = 0
	}
	var t *time.Timer
	t = time.AfterFunc(dur, func() {
		c.tmu.Lock()
		delete(c.timers, t) // t is set: the map's lock was held until then
		c.tmu.Unlock()
		f()
	})
	c.timers[t] = true
	return t
}

// cancel stops a timer of after's that is no longer wanted (the answer came).
func (c *conn) cancel(t *time.Timer) {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	t.Stop()
	delete(c.timers, t)
}

func (c *conn) stopTimers() {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	c.ended = true
	for t := range c.timers {
		t.Stop()
	}
	c.timers = nil
}

// New makes the daemon of a node, whose HCAs are the packet devices in
// order (as the sysfs plane numbers them).
func New(n *profile.Node, f *fabric.Fabric, log *logrus.Logger) *Daemon {
	d := &Daemon{fab: f, log: log, start: time.Now(), counters: map[*fabric.Port]*counters{}, reset: map[*fabric.Port]bool{}, pending: map[pendingKey]*pending{}, peers: map[int]*peer{}, links: map[*peer]bool{}, async: map[*conn]bool{},
		conns: map[net.Conn]bool{}, issm: map[*fabric.Port]int{}, hcas: map[*fabric.Port]string{}, qpns: map[qpnBlock]*conn{}, moved: map[*fabric.Port]bool{}, zeroed: map[*fabric.Port]bool{}}
	for _, h := range n.IB.HCAs {
		var p *fabric.Port
		if nd := f.Find(h.Name); nd != nil {
			p = nd.Ports[1]
			d.hcas[p] = h.Name
		}
		d.umads = append(d.umads, p)
	}
	return d
}

// FollowFaults makes the daemon follow the node's port faults file
// (hostprep.IBLiveFaults), which nvmock ctl ib replaces while it runs:
// every MAD first checks whether it changed, so the fabric it answers for
// changes with the sysfs files written before it.
func (d *Daemon) FollowFaults(path string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	first := d.faultsPath == ""
	d.faultsPath, d.faultsIno = path, 0
	d.refresh()
	if !first {
		return
	}
	// Other nodes learn of a change without waiting for a MAD here, and
	// sysfs shows the traffic counters.
	go func() {
		for range time.Tick(faultsPoll) {
			d.mu.Lock()
			closed := d.closed
			var shown []shownCounters
			if !closed {
				d.refresh()
				shown = d.countersToShow()
			}
			dir := filepath.Dir(d.faultsPath)
			d.mu.Unlock()
			if closed {
				return
			}
			d.showCounters(dir, shown)
		}
	}()
}

// faultsPoll is how often the faults file is checked between MADs.
const faultsPoll = 200 * time.Millisecond

// refresh applies the faults file if it changed; mu is held.
func (d *Daemon) refresh() {
	if d.faultsPath == "" {
		return
	}
	var st syscall.Stat_t
	if err := syscall.Stat(d.faultsPath, &st); err != nil || st.Ino == d.faultsIno {
		return
	}
	b, err := os.ReadFile(d.faultsPath)
	var faults []fabric.Fault
	if err == nil {
		err = json.Unmarshal(b, &faults)
	}
	if err == nil {
		err = d.fab.Apply(faults)
	}
	d.faultsIno = st.Ino // a bad file is reported once, not at every MAD
	if err != nil {
		d.log.WithField("component", "ibd").Warnf("port faults %s: %v; the fabric keeps the faults it had", d.faultsPath, err)
		return
	}
	clear(d.reset) // the new faults' error counts read until reset again
	host := d.fab.Hosts[d.fab.Local]
	d.faults = d.faults[:0]
	for _, ft := range faults {
		if ft.For(host) {
			ft.Node = ""
			d.faults = append(d.faults, ft)
		}
	}
	// Every link, not only the one in use here: the peer may use the
	// other, and takes faults only from the link it uses.
	for p := range d.links {
		p.send(frameFaults, d.faultsFrame())
	}
	d.portEvents()
	d.mcPortsDown()
	d.mftChanged()
}

// activity is SMInfo's ActCount: the SM's work, which never stops.
func (d *Daemon) activity() uint32 { return uint32(time.Since(d.start) / (10 * time.Millisecond)) }

// Listen makes the daemon's socket at path (replacing a stale one), with
// this daemon's word beside it (path + umad.IDSuffix), by which programs
// whose daemon went away know a new one from it.
func Listen(path string) (*net.UnixListener, error) {
	// Only what a daemon leaves is replaced: a path given by mistake
	// must not cost a user's file.
	for _, p := range []string{path, path + umad.IDSuffix} {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("listen at %s: %w", path, err)
		case p == path && fi.Mode().Type() != os.ModeSocket:
			return nil, fmt.Errorf("listen at %s: it exists and is not a socket; not replacing it", path)
		case p != path && (!fi.Mode().IsRegular() || fi.Size() > umad.IDMax):
			return nil, fmt.Errorf("listen at %s: %s exists and is not a daemon's word; not replacing it", path, p)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("listen at %s: %w", path, err)
	}
	word := make([]byte, umad.IDMax/2)
	rand.Read(word)
	tmp := path + umad.IDSuffix + ".tmp"
	if err := os.WriteFile(tmp, []byte(hex.EncodeToString(word)), 0o644); err != nil {
		return nil, fmt.Errorf("listen at %s: %w", path, err)
	}
	if err := os.Rename(tmp, path+umad.IDSuffix); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("listen at %s: %w", path, err)
	}
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("listen at %s: %w", path, err)
	}
	// Closed, it leaves the path: in a rolling update the next pod's
	// daemon has taken it over by then (it removes and binds it), and
	// unlinking by name would cut that daemon off. A socket nobody
	// listens on refuses connections, as a daemon that is down.
	l.SetUnlinkOnClose(false)
	// Programs of any user on the node open their packet devices.
	if err := os.Chmod(path, 0o666); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen at %s: %w", path, err)
	}
	return l, nil
}

// Serve answers the connections of l until it is closed.
func (d *Daemon) Serve(l *net.UnixListener) error {
	var backoff time.Duration
	for {
		uc, err := l.AcceptUnix()
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
		if d.programs.Add(1) > maxPrograms {
			d.programs.Add(-1)
			uc.Close()
			d.refuseProgram()
			continue
		}
		bigSends(uc)
		go func() {
			defer d.programs.Add(-1)
			d.serveConn(&conn{uc: uc, gone: make(chan struct{})})
		}()
	}
}

// acceptFailed waits after an accept that failed for want of resources (no
// file descriptor left: EMFILE, ENFILE; memory) and says whether to try
// again, as net/http's server does; it returned, and the daemon's socket
// went unserved for good while the process lived on (review).
func (d *Daemon) acceptFailed(err error, backoff *time.Duration) bool {
	if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) &&
		!errors.Is(err, syscall.ENOBUFS) && !errors.Is(err, syscall.ENOMEM) && !errors.Is(err, syscall.ECONNABORTED) {
		return false
	}
	if *backoff == 0 {
		*backoff = 5 * time.Millisecond
		d.log.Warnf("ibd: accept: %v; trying again", err)
	} else if *backoff *= 2; *backoff > time.Second {
		*backoff = time.Second
	}
	time.Sleep(*backoff)
	return true
}

// maxPrograms bounds the programs connected at once: the socket is every
// local program's (mode 0666) and each costs the daemon some 70 KB idle
// (its queue bounds the rest: madQueueBytes), where a node runs a few
// fabric tools at a time, and a verbs program one or two connections a
// device it uses (a port's traffic, its async events). Review: unbounded.
// A var for tests.
var maxPrograms int64 = 4096

// refuseProgram says, at most once a minute, that a program was turned
// away: its MADs time out, as with no daemon.
func (d *Daemon) refuseProgram() {
	now := time.Now().UnixNano()
	last := d.fullSaid.Load()
	if now-last < int64(time.Minute) || !d.fullSaid.CompareAndSwap(last, now) {
		return
	}
	d.log.Warnf("ibd: %d programs are connected already; a new one is refused (its MADs time out, its verbs reach no fabric)", maxPrograms)
}

// sendOut hands an answer to its program's writer. One too big for the
// socket (an SA table past the send buffer the daemon could get) is lost,
// and the program times out: that is said, once. A program that went away
// is nothing to tell.
func (d *Daemon) sendOut(o outgoing) { d.queue(o.c, o.u) }

// maxSend is the largest message to a program: an SA table comes back as
// one message, as the kernel hands over a reassembled RMPP transfer, and
// a subnet's SL-to-VL table (every pair of ports of every switch) is
// some 840 KiB, past a socket's default send buffer (208 KiB), which
// bounds a SOCK_SEQPACKET message.
const maxSend = 4 << 20

// bigSends lets c carry messages of maxSend: forced past the system's
// limit where the daemon may (CAP_NET_ADMIN), else as far as it allows.
func bigSends(c *net.UnixConn) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		if syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUFFORCE, maxSend) != nil {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, maxSend)
		}
	})
}

func (d *Daemon) serveConn(c *conn) {
	defer d.drop(c)
	// A message nothing checked for is this program's problem, not the
	// node's: it loses its connection, the daemon carries on.
	defer func() {
		if r := recover(); r != nil {
			d.log.WithField("component", "ibd").Errorf("a program's message broke the daemon (%v); its connection is closed", r)
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.uc.Read(buf)
		if err != nil || n == 0 {
			return
		}
		if n >= 8 && binary.LittleEndian.Uint32(buf) == umad.Magic && binary.LittleEndian.Uint32(buf[4:]) == umad.OpVerbsPkt {
			d.verbsPacket(c, buf[:n]) // delivered before the next read: no copy
			continue
		}
		msg := append([]byte(nil), buf[:n]...)
		if n >= 8 && binary.LittleEndian.Uint32(msg) == umad.Magic {
			switch binary.LittleEndian.Uint32(msg[4:]) {
			case umad.OpVerbsHello:
				d.verbsHello(c, msg)
			case umad.OpAsyncHello:
				d.asyncHello(c, msg)
			case umad.OpAsyncRaise:
				if len(msg) >= umad.AsyncRaiseSize {
					sendNow(c, msg[8:umad.AsyncRaiseSize])
				}
			case umad.OpVerbsAttach:
				d.mcAttachMsg(c, msg)
			default:
				d.control(c, msg)
			}
			continue
		}
		if n < umadHdrLen+36 {
			continue // the kernel refuses less than an RMPP header (EINVAL)
		}
		if n < umadHdrLen+madLen {
			msg = append(msg, make([]byte, umadHdrLen+madLen-n)...) // and zero-fills the rest
		}
		if oversized(packet(msg)) {
			continue // the shim's write refused it (EINVAL): a raw client's
		}
		for _, o := range d.handle(c, packet(msg)) {
			d.sendOut(o)
		}
	}
}

func (d *Daemon) control(c *conn, msg []byte) {
	le := binary.LittleEndian
	d.mu.Lock()
	defer d.mu.Unlock()
	switch le.Uint32(msg[4:]) {
	case umad.OpHello:
		if len(msg) < umad.HelloSize || c.hello {
			return
		}
		c.hello = true
		i := int(le.Uint32(msg[8:]))
		if i < 0 || i >= len(d.umads) || d.umads[i] == nil {
			return
		}
		switch le.Uint32(msg[16:]) {
		case umad.KindUMAD:
			c.port = d.umads[i]
		case umad.KindISSM:
			// An SM holds issmN open: the port says IsSM meanwhile.
			c.issm = d.umads[i]
			d.issm[c.issm]++
		}
	case umad.OpRegister:
		// The shim registers on its umad port with its own ids (below
		// the kernel's 32), each once.
		if len(msg) < umad.RegisterSize || c.port == nil || c.agents >= maxAgents {
			return
		}
		a := &agent{c: c, id: le.Uint32(msg[8:]), class: msg[16], oui: le.Uint32(msg[20:]) & 0xffffff}
		for _, o := range d.agents {
			if o.c == c && o.id == a.id {
				return
			}
		}
		for i := range a.methods {
			a.methods[i] = le.Uint32(msg[24+4*i:])
		}
		d.hiTID = d.hiTID%(1<<24-1) + 1 // 24 bits, never 0, as ib_register_mad_agent's
		a.hiTID = d.hiTID
		d.agents = append(d.agents, a)
		c.agents++
	case umad.OpUnregister:
		if len(msg) >= umad.UnregisterSize {
			d.unregister(c, func(a *agent) bool { return a.id == le.Uint32(msg[8:]) })
		}
	}
}

func (d *Daemon) drop(c *conn) {
	c.uc.Close()
	close(c.gone) // ends its writers
	c.stopTimers()
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, p := range d.pending {
		if p.c == c {
			delete(d.pending, k) // its answer has nowhere to go
		}
	}
	if c.issm != nil {
		d.issm[c.issm]--
	}
	if c.verbsPort != nil {
		delete(d.qpns, qpnBlock{c.verbsPort, c.block})
	}
	delete(d.async, c)
	d.mcDrop(c)
	d.unregister(c, func(*agent) bool { return true })
}

func (d *Daemon) unregister(c *conn, which func(*agent) bool) {
	kept := d.agents[:0]
	for _, a := range d.agents {
		if a.c != c || !which(a) {
			kept = append(kept, a)
		}
	}
	clear(d.agents[len(kept):])
	c.agents -= len(d.agents) - len(kept)
	d.agents = kept
}

// handle routes one MAD a program sent and returns what to send for it.
func (d *Daemon) handle(c *conn, u packet) []outgoing {
	m := u.mad()
	d.mu.Lock()
	defer d.mu.Unlock()
	defer func() { d.out = nil }() // the caller owns what it returns
	d.refresh()
	from := c.port
	if from == nil {
		// An Ethernet port has no subnet to send into.
		d.timeout(c, u)
		return d.out
	}
	if m[0] != 1 {
		// The receiver's MAD layer drops a base version it does not know
		// (validate_mad): the asker times out (review: it was answered).
		d.timeout(c, u)
		return d.out
	}
	if m.isResponse() {
		d.answered(from, u)
		return d.out
	}
	d.stamp(c, u)
	// A port whose link is down reaches only its own SMA (a directed
	// route of no hops, which Walk gives); anything it sends out is lost.
	if from.Down() && m.class() != classSMPDR {
		d.timeout(c, u)
		return d.out
	}
	switch m.class() {
	case classSMPDR:
		d.directed(c, u, from)
	case classSMPLID:
		to := from.Node.Subnet.Port(u.lid())
		if to == nil {
			d.timeout(c, u)
			return d.out
		}
		d.exchange(from, to)
		d.smpAt(c, u, to.Node, to, to.LID)
	case classSA:
		s := from.Node.Subnet
		if u.lid() != s.SM.LID {
			d.toAgent(c, u, from) // no SA there, maybe a program's
			return d.out
		}
		d.exchange(from, s.SM)
		d.saReply(c, u, s.SM)
	case classPerf:
		to := from.Node.Subnet.Port(u.lid())
		if to == nil {
			d.timeout(c, u)
			return d.out
		}
		d.exchange(from, to)
		r := reply(u)
		clear(r.mad().gsData())
		r.mad().setStatus(d.perf(m, to, u.mad().gsData(), r.mad().gsData()))
		d.respond(c, r, to.LID, 1)
	default:
		d.toAgent(c, u, from)
	}
	return d.out
}

// stamp puts the sending agent's number in the high half of request u's
// TID, as the kernel's umad write does: two programs' requests never share
// a TID, and an answer's TID names its asker, as on a real node.
func (d *Daemon) stamp(c *conn, u packet) {
	for _, a := range d.agents {
		if a.c == c && a.id == u.agent() {
			put64(u.mad()[8:], uint64(a.hiTID)<<32|u.mad().tid()&0xffffffff)
			return
		}
	}
}

// directed walks a directed-route SMP out of from and answers it where it
// lands (IBA 14.2.2); a path into nothing goes unanswered.
func (d *Daemon) directed(c *conn, u packet, from *fabric.Port) {
	m := u.mad()
	hops := int(m.hopCount())
	if hops > 63 {
		d.timeout(c, u)
		return
	}
	// Sent to a LID, not the permissive one: LID-routed to that node
	// first, the directed part starts there (iblinkinfo -S GUID), and the
	// answer comes back from its LID.
	start, lid := from, uint16(0xffff)
	if l := u.lid(); l != 0xffff && l != 0 {
		if start = from.Node.Subnet.Port(l); start == nil || from.Down() {
			d.timeout(c, u)
			return
		}
		lid = l
	}
	at := fabric.Walk(start, m.drPath()[:hops+1])
	if at == nil {
		d.timeout(c, u)
		return
	}
	d.exchange(from, at)
	d.smpAt(c, u, at.Node, at, lid)
}

func (d *Daemon) smpAt(c *conn, u packet, nd *fabric.Node, in *fabric.Port, lid uint16) {
	r := reply(u)
	m := r.mad()
	clear(m.smpData())
	st := d.sma(u.mad(), nd, in, m.smpData())
	if m.class() == classSMPDR {
		st |= statusDR
		m[6] = m.hopCount() // hop pointer, as the responder leaves it
	}
	m.setStatus(st)
	d.respond(c, r, lid, 0)
}

func (d *Daemon) saReply(c *conn, u packet, sm *fabric.Port) {
	m := u.mad()
	data, off, st := d.sa(m, c.port)
	r := reply(u)
	if len(data) > madLen-saHdrLen || m.method() == methodGetTbl {
		// A table comes back through RMPP; the kernel hands the
		// program one reassembled message.
		r = append(r[:umadHdrLen+saHdrLen], data...)
		rm := r.mad()
		rm[24], rm[25], rm[26], rm[27] = 1, 1, 0x07, 0 // version, DATA, active|first|last
		put32(rm[28:], 1)
		put32(rm[32:], uint32(len(rm)-36))
	} else {
		clear(r[umadHdrLen+saHdrLen:])
		copy(r[umadHdrLen+saHdrLen:], data)
	}
	rm := r.mad()
	put16(rm[44:], uint16(off))
	rm.setStatus(st)
	r.setLength(len(r))
	d.respond(c, r, sm.LID, 1)
}

// respond sends the answer r back to the agent that asked, from lid.
func (d *Daemon) respond(c *conn, r packet, lid uint16, qpn uint32) {
	r.setLID(lid)
	r.setQPN(qpn)
	if qpn != 0 {
		r.setQKey(qkeyGSI)
	}
	d.out = append(d.out, outgoing{c, r})
}

// timeout hands an unanswered request back with ETIMEDOUT after its
// timeout and retries, as the kernel's MAD layer does.
func (d *Daemon) timeout(c *conn, u packet) {
	if r := timedOut(u); r != nil {
		c.after(wait(u), func() { d.queue(c, r) })
	}
}

// timedOut is what the kernel hands back for request u left unanswered:
// its header and MAD header with status ETIMEDOUT; nil for a send that
// expected no answer (timeout 0: a response, say).
func timedOut(u packet) packet {
	if u.timeoutMS() == 0 {
		return nil
	}
	r := append(packet(nil), u[:umadHdrLen+24]...)
	r.setStatus(etimedout)
	r.setLength(len(r))
	return r
}

// toAgent delivers a request of another class to the agent registered
// for it at the LID, as the kernel's MAD layer does: this node's, or
// another real node's through its daemon; modelled nodes answer ibping
// themselves.
func (d *Daemon) toAgent(c *conn, u packet, from *fabric.Port) {
	m := u.mad()
	to := from.Node.Subnet.Port(u.lid())
	if to == nil {
		d.timeout(c, u)
		return
	}
	a := d.agentFor(to, m)
	remote := d.peers[to.Node.Slot]
	if a != nil || (remote != nil && to.Node.Type == fabric.CA) {
		key := pendingKey{at: to, tid: m.tid()}
		p := &pending{c: c, agent: u.agent(), from: from}
		r := timedOut(u)
		p.timer = c.after(wait(u), func() {
			d.mu.Lock()
			if d.pending[key] == p {
				delete(d.pending, key)
			}
			done := p.done
			d.mu.Unlock()
			if !done && r != nil {
				d.queue(c, r)
			}
		})
		d.supersede(key)
		d.pending[key] = p
		d.count(from, to)
		if a != nil {
			d.out = append(d.out, outgoing{a.c, d.forward(u, a, from)})
		} else {
			d.relay(remote, from, to, u)
		}
		return
	}
	// A modelled node runs ibping -S; an Aggregation Node (no slot) does not.
	if m.class() == vendorIBPing && m.oui() == ouiOpenFabric && to.Node.Slot >= 0 && to.Node.Slot != d.fab.Local && to.Node.Type == fabric.CA {
		d.exchange(from, to)
		r := reply(u)
		data := r.mad()[40:]
		clear(data)
		copy(data, d.fab.Hosts[to.Node.Slot]+".(none)") // ibping -S answers host.domain
		d.respond(c, r, to.LID, 1)
		return
	}
	if unmatched(to, m) {
		d.exchange(from, to)
		d.respond(c, unmatchedReply(u), to.LID, 1)
		return
	}
	d.timeout(c, u)
}

// unmatched says whether a host answers a request that no program there
// took, as Linux's MAD layer does (generate_unmatched_resp): a Get or Set
// of a class mlx5 does not hand to its firmware, which passed the layer's
// checks (validate_mad: base version 1; a CM MAD other than ClassPortInfo
// only as a Send). The firmware's classes (SMPs, PerfMgt, vendor 0x09 and
// 0x0A, congestion control) and switches and Aggregation Nodes answer in
// ways not known, so those time out.
func unmatched(to *fabric.Port, m mad) bool {
	switch m.class() {
	case classSMPLID, classSMPDR, classPerf, 0x09, 0x0a, 0x21:
		return false
	case classCM:
		if m.attr() != attrClassInfo {
			return false // a Get or Set of it is dropped
		}
	}
	if m[0] != 1 {
		return false
	}
	return to.Node.Type == fabric.CA && to.Node.Slot >= 0 && (m.method() == methodGet || m.method() == methodSet)
}

// unmatchedReply is the kernel's answer to such a request: the request
// itself, as a GetResp with status "unsupported method/attribute".
func unmatchedReply(u packet) packet {
	r := reply(u)
	r.mad()[3] = methodResp
	r.mad().setStatus(statusBadMethodAttr)
	return r
}

// wait is how long the kernel waits for a request's answer: its timeout
// for each of its tries (bounded: the fields are the program's).
func wait(u packet) time.Duration {
	return time.Duration(min(u.timeoutMS(), 3600_000)) * time.Millisecond * time.Duration(min(u.retries(), 100)+1)
}

// agentFor is this node's agent registered at port for the MAD's class
// (and OUI, for vendor classes with one) and method, or nil.
func (d *Daemon) agentFor(port *fabric.Port, m mad) *agent {
	for _, a := range d.agents {
		if a.c.port == port && a.class == m.class() && (m.class() < 0x30 || a.oui == m.oui()) && a.takes(m.method()) {
			return a
		}
	}
	return nil
}

// forward is request u as agent a receives it, from port from.
func (d *Daemon) forward(u packet, a *agent, from *fabric.Port) packet {
	fwd := append(packet(nil), u...)
	fwd.setAgent(a.id)
	fwd.setStatus(0)
	fwd.setLID(from.LID)
	fwd.setQPN(1)
	fwd.setLength(len(fwd))
	return fwd
}

// answered passes an agent's response to the request it answers, here or
// back to the node that asked.
func (d *Daemon) answered(at *fabric.Port, u packet) {
	key := pendingKey{at: at, tid: u.mad().tid()}
	p := d.pending[key]
	if p == nil {
		return // too late: the asker was told it timed out
	}
	delete(d.pending, key)
	p.done = true
	if p.peer != nil {
		p.timer.Stop()
		p.peer.pending--
	} else {
		p.c.cancel(p.timer)
	}
	d.count(at, p.from)
	if p.peer != nil {
		d.relay(p.peer, at, p.from, u)
		return
	}
	r := append(packet(nil), u...)
	r.setAgent(p.agent)
	r.setStatus(0)
	r.setLength(len(r))
	d.respond(p.c, r, at.LID, 1)
}
