package ibd

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/ibshim/umad"
	"github.com/nvmock/nvmock/internal/testenv"
)

// Programs on the node reach the daemon's socket (mode 0666); what one
// sends, or fails to read, must cost only itself. Found in review.

func daemonOf(t *testing.T) (*Daemon, string, *fabric.Fabric) {
	t.Helper()
	n := testenv.Node(t, "h100", 8)
	f, err := fabric.Build(n, "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "ibd.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	d := New(n, f, logrus.New())
	go d.Serve(l)
	return d, sock, f
}

func dial(t *testing.T, sock string, msgs ...[]byte) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, m := range msgs {
		if _, err := c.Write(m); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// pingServer is a program on mlx5_0 port 1 that takes ibping requests,
// registered once it returns.
func pingServer(t *testing.T, sock string, lid uint16) *net.UnixConn {
	t.Helper()
	server := dial(t, sock, helloMsg(umad.KindUMAD))
	register(t, server, 0, vendorIBPing, ouiOpenFabric, methodGet)
	settled(t, server, lid)
	return server
}

func helloMsg(kind uint32) []byte {
	h := make([]byte, umad.HelloSize)
	binary.LittleEndian.PutUint32(h, umad.Magic)
	binary.LittleEndian.PutUint32(h[4:], umad.OpHello)
	binary.LittleEndian.PutUint32(h[16:], kind)
	return h
}

// answered says whether an SMP to lid with tid comes back on c within d,
// skipping anything else. Only the TID's low half is the asker's: the
// daemon puts its agent's number in the high half, as the kernel does.
func answered(t *testing.T, c *net.UnixConn, tid uint64, within time.Duration) bool {
	t.Helper()
	end := time.Now().Add(within)
	for time.Now().Before(end) {
		r := read(t, c, time.Until(end))
		if r != nil && len(r) >= umadHdrLen+madLen && uint32(r.mad().tid()) == uint32(tid) && r.mad().method() == methodResp {
			return true
		}
	}
	return false
}

// settled returns once the daemon has handled what c sent so far: it
// handles a connection's messages in order, and answers an SMP.
func settled(t *testing.T, c *net.UnixConn, lid uint16) {
	t.Helper()
	const tid = 0x5e771ed
	if _, err := c.Write(smp(lid, tid)); err != nil {
		t.Fatal(err)
	}
	if !answered(t, c, tid, 5*time.Second) {
		t.Fatal("no answer to an SMP")
	}
}

func waitFor(what string, t *testing.T, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Errorf("after 3 s: %s", what)
}

func TestAShortControlMessageCostsOnlyItsConnection(t *testing.T) {
	_, sock, f := daemonOf(t)
	bad := make([]byte, 8)
	binary.LittleEndian.PutUint32(bad, umad.Magic)
	binary.LittleEndian.PutUint32(bad[4:], umad.OpHello)
	dial(t, sock, bad)
	c := dial(t, sock, helloMsg(umad.KindUMAD))
	if _, err := c.Write(smp(f.Find("mlx5_0").Ports[1].LID, 1)); err != nil {
		t.Fatal(err)
	}
	if !answered(t, c, 1, 2*time.Second) {
		t.Error("no answer after another program's 8-byte hello")
	}
}

// The kernel takes a MAD of at least an RMPP header and zero-fills it.
func TestAShortMADIsAnswered(t *testing.T) {
	_, sock, f := daemonOf(t)
	c := dial(t, sock, helloMsg(umad.KindUMAD))
	if _, err := c.Write(smp(f.Find("mlx5_0").Ports[1].LID, 2)[:umadHdrLen+64]); err != nil {
		t.Fatal(err)
	}
	if !answered(t, c, 2, 2*time.Second) {
		t.Error("a 64-byte SMP got no answer")
	}
}

// An ibping server that never reads: whoever pings it goes on.
func TestAProgramThatStopsReadingHoldsUpNoOne(t *testing.T) {
	_, sock, f := daemonOf(t)
	stuck := dial(t, sock, helloMsg(umad.KindUMAD))
	register(t, stuck, 0, vendorIBPing, ouiOpenFabric, methodGet)
	settled(t, stuck, f.Find("mlx5_0").Ports[1].LID)
	c := dial(t, sock, helloMsg(umad.KindUMAD))
	own := f.Find("mlx5_0").Ports[1].LID
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	for i := range 20000 {
		if _, err := c.Write(ping(own, uint64(1000+i), 0)); err != nil {
			t.Fatalf("ping %d: %v (the daemon stopped reading this program)", i, err)
		}
	}
	if _, err := c.Write(smp(own, 3)); err != nil {
		t.Fatal(err)
	}
	if !answered(t, c, 3, 5*time.Second) {
		t.Error("no answer to an SMP sent after 20000 pings to a program that does not read")
	}
}

// Requests awaiting an answer end with their program, and are bounded.
func TestRequestsEndWithTheirProgram(t *testing.T) {
	d, sock, f := daemonOf(t)
	pingServer(t, sock, f.Find("mlx5_0").Ports[1].LID)
	own := f.Find("mlx5_0").Ports[1].LID
	c := dial(t, sock, helloMsg(umad.KindUMAD))
	for i := range 5000 {
		if _, err := c.Write(ping(own, uint64(i), 3600_000)); err != nil {
			t.Fatal(err)
		}
	}
	pending := func() int {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.pending)
	}
	waitFor("at most 4096 requests wait for an answer", t, func() bool { n := pending(); return n > 0 && n <= maxOutstanding })
	c.Close()
	waitFor("the closed program's requests are forgotten", t, func() bool { return pending() == 0 })
}

func TestRegistrationsAreBoundedAndNeedAPort(t *testing.T) {
	d, sock, _ := daemonOf(t)
	agents := func() int {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.agents)
	}
	early := dial(t, sock)
	register(t, early, 0, vendorIBPing, ouiOpenFabric, methodGet)
	c := dial(t, sock, helloMsg(umad.KindUMAD))
	for id := range 40 {
		register(t, c, uint32(id), vendorIBPing, ouiOpenFabric, methodGet)
		register(t, c, uint32(id), vendorIBPing, ouiOpenFabric, methodGet)
	}
	// A message of the connection after them all: it has been read.
	if _, err := c.Write(smp(1, 4)); err != nil {
		t.Fatal(err)
	}
	answered(t, c, 4, 2*time.Second)
	if n := agents(); n != maxAgents {
		t.Errorf("%d agents registered, want %d: one per id, none before a hello", n, maxAgents)
	}
}

func TestAnSMLeavesWithItsConnection(t *testing.T) {
	d, sock, _ := daemonOf(t)
	c := dial(t, sock, helloMsg(umad.KindISSM), helloMsg(umad.KindISSM))
	held := func() int {
		d.mu.Lock()
		defer d.mu.Unlock()
		n := 0
		for _, v := range d.issm {
			n += v
		}
		return n
	}
	waitFor("the issm hello is taken", t, func() bool { return held() == 1 })
	c.Close()
	waitFor("IsSM is cleared when the SM goes", t, func() bool { return held() == 0 })
}

// Groups made through one node are bounded by the MLIDs a subnet has
// (0xc000-0xfffe): past them the SM answers ERR_NO_RESOURCES.
func TestMulticastGroupsRunOutWithTheMLIDs(t *testing.T) {
	d, f := quietDaemon(t)
	from := f.Find("mlx5_0").Ports[1]
	join := func(i int, method byte) uint16 {
		m := make(mad, madLen)
		m[0], m[1], m[2], m[3] = 1, classSA, 2, method
		binary.BigEndian.PutUint64(m[48:], mcMGID|mcPortGID|mcJoinState|mcQKey|mcTClass|mcPKey|mcSL|mcFlowLabel)
		rec := m[saHdrLen:]
		rec[0], rec[1] = 0xff, 0x12
		binary.BigEndian.PutUint32(rec[12:], uint32(i))
		gid := portGID(from)
		copy(rec[16:], gid[:])
		binary.BigEndian.PutUint16(rec[40:], 0xffff)
		rec[48] = joinFull
		d.mu.Lock()
		defer d.mu.Unlock()
		_, st := d.mcJoin(m, from)
		return st
	}
	n := mlidTop - mlidBase + 1
	for i := range n {
		if st := join(i, methodSet); st != 0 {
			t.Fatalf("join %d: status %#x", i, st)
		}
	}
	if st := join(n, methodSet); st != saStatusNoResources {
		t.Errorf("group %d: status %#x, want ERR_NO_RESOURCES (0x100)", n+1, st)
	}
	if st := join(0, methodDelete); st != 0 {
		t.Fatalf("leave: status %#x", st)
	}
	if st := join(n, methodSet); st != 0 {
		t.Errorf("a group once another has gone: status %#x", st)
	}
	// The bound is the subnet's: another rail's subnet has its own MLIDs.
	from = f.Find("mlx5_1").Ports[1]
	if from.Node.Subnet == f.Find("mlx5_0").Subnet {
		t.Fatal("test setup: mlx5_0 and mlx5_1 share a subnet")
	}
	if st := join(0, methodSet); st != 0 {
		t.Errorf("a group on another subnet: status %#x", st)
	}
}

// An answered request gives its place back: a long ibping session is not
// cut short at maxOutstanding.
func TestAnsweredRequestsGiveTheirPlaceBack(t *testing.T) {
	_, sock, f := daemonOf(t)
	server := pingServer(t, sock, f.Find("mlx5_0").Ports[1].LID)
	client := dial(t, sock, helloMsg(umad.KindUMAD))
	register(t, client, 1, vendorIBPing, ouiOpenFabric)
	own := f.Find("mlx5_0").Ports[1].LID
	for i := range maxOutstanding + 100 {
		if _, err := client.Write(ping(own, uint64(i), 1000)); err != nil {
			t.Fatal(err)
		}
		req := read(t, server, 2*time.Second)
		if req == nil {
			t.Fatalf("ping %d: the server got nothing", i)
		}
		ans := append(packet(nil), req...)
		ans.mad()[3] = methodResp
		if _, err := server.Write(ans); err != nil {
			t.Fatal(err)
		}
		if r := read(t, client, 2*time.Second); r == nil || binary.LittleEndian.Uint32(r[4:]) != 0 {
			t.Fatalf("ping %d, answered: %v", i, r)
		}
	}
}

// Requests a peer's link brought are bounded and end with the link.
func TestAPeersRequestsEndWithItsLink(t *testing.T) {
	d, sock, f := daemonOf(t)
	server := pingServer(t, sock, f.Find("mlx5_0").Ports[1].LID)
	go func() { // the server never answers; what it is sent is read
		for read(t, server, 10*time.Second) != nil {
		}
	}()
	link, r := nodeBLink(t, d, f)
	go io.Copy(io.Discard, r)
	own := f.Find("mlx5_0").Ports[1]
	var theirs uint16
	for _, nd := range own.Node.Subnet.Nodes {
		if nd.Slot == 1 && nd.Type == fabric.CA {
			theirs = nd.Ports[1].LID
			break
		}
	}
	head := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(head[1:], theirs)
	binary.BigEndian.PutUint16(head[3:], own.LID)
	for i := range 2 * maxOutstanding {
		if _, err := link.Write(frame(frameMAD, [][]byte{head, ping(own.LID, uint64(i), 3600_000)})); err != nil {
			t.Fatal(err)
		}
	}
	pending := func() int {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.pending)
	}
	waitFor("the peer's requests wait, at most maxOutstanding", t, func() bool { return pending() == maxOutstanding })
	link.Close()
	waitFor("they are forgotten with the link", t, func() bool { return pending() == 0 })
}

// What waits for a program that does not read is bounded in bytes too:
// an SA table is up to 4 MiB.
func TestQueuedAnswersAreBoundedInBytes(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[1]) // never read
	fc, err := net.FileConn(os.NewFile(uintptr(fds[0]), "daemon side"))
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	c := &conn{uc: fc.(*net.UnixConn), gone: make(chan struct{})}
	defer close(c.gone)
	d := &Daemon{log: logrus.New()}
	msg := make(packet, 64<<10)
	for range madQueue {
		d.queue(c, msg)
	}
	if q := len(c.outq) * len(msg); q > madQueueBytes {
		t.Errorf("%d MiB queued for a program that does not read, want at most %d", q>>20, madQueueBytes>>20)
	}
}

// A MAD longer than one MAD that is not an RMPP transfer is dropped, as the
// kernel refuses its write: handed on, a 4 KiB request ended ibping -S's
// loop (review). The server gets the ordinary ping sent after it, first.
func TestAnOversizedMADReachesNoProgram(t *testing.T) {
	_, sock, f := daemonOf(t)
	own := f.Find("mlx5_0").Ports[1].LID
	server := pingServer(t, sock, own)
	client := dial(t, sock, helloMsg(umad.KindUMAD))
	register(t, client, 1, vendorIBPing, ouiOpenFabric)
	big := append(ping(own, 1, 1000), make([]byte, 4096)...)
	big.setLength(len(big))
	for _, u := range []packet{big, ping(own, 2, 1000)} {
		if _, err := client.Write(u); err != nil {
			t.Fatal(err)
		}
	}
	req := read(t, server, 5*time.Second)
	if req == nil || len(req) != umadHdrLen+madLen || uint32(req.mad().tid()) != 2 {
		t.Errorf("the server got %d bytes first (want the 256-byte ping, TID 2)", len(req))
	}
}

// A MAD of a base version the MAD layer does not know is dropped (the
// asker times out), and one of a class version the agent does not speak
// is answered "bad version", as an SMA and a PMA answer it (review: both
// were answered as version 1).
func TestVersionsAreChecked(t *testing.T) {
	c, f := serve(t)
	lid := f.Find("mlx5_0").Ports[1].LID
	base := packet(smp(lid, 1))
	base.mad()[0] = 0x99
	class := packet(smp(lid, 2))
	class.mad()[2] = 0x42
	for _, u := range []packet{base, class} {
		if _, err := c.Write(u); err != nil {
			t.Fatal(err)
		}
	}
	r := read(t, c, 5*time.Second)
	if r == nil || uint32(r.mad().tid()) != 2 || r.mad().status() != statusBadVersion {
		t.Fatalf("first back: %v, want the class version 0x42 SMP answered with status %#x", r, statusBadVersion)
	}
	if r := read(t, c, 5*time.Second); r == nil || uint32(r.mad().tid()) != 1 || binary.LittleEndian.Uint32(r[4:]) != etimedout {
		t.Errorf("base version 0x99: %v, want it timed out", r)
	}
	// The PMA speaks class version 1, the SA 2 (libibmad's), and answers
	// the other "bad version"; its own, the request.
	sm := f.Subnets[0].SM.LID
	for _, c2 := range []struct {
		name           string
		lid            uint16
		class, version byte
		want           uint16
	}{
		{"PMA version 2", lid, classPerf, 2, statusBadVersion},
		{"SA version 1", sm, classSA, 1, statusBadVersion},
		{"PMA version 1", lid, classPerf, 1, 0},
		{"SA version 2", sm, classSA, 2, 0},
	} {
		u := packet(smp(c2.lid, 3))
		m := u.mad()
		m[1], m[2] = c2.class, c2.version
		put16(m[16:], attrClassInfo)
		if _, err := c.Write(u); err != nil {
			t.Fatal(err)
		}
		if r := read(t, c, 5*time.Second); r == nil || r.mad().status() != c2.want {
			t.Errorf("%s: %v, want status %#x", c2.name, r, c2.want)
		}
	}
}

// Programs connected at once are bounded; one turned away loses only its
// connection, and a place freed is taken again (review: unbounded).
func TestProgramsAreBounded(t *testing.T) {
	maxPrograms = 3
	t.Cleanup(func() { maxPrograms = 4096 })
	d, sock, f := daemonOf(t)
	lid := f.Find("mlx5_0").Ports[1].LID
	var cs []*net.UnixConn
	for range 3 {
		c := dial(t, sock, helloMsg(umad.KindUMAD))
		settled(t, c, lid)
		cs = append(cs, c)
	}
	over := dial(t, sock)
	over.Write(helloMsg(umad.KindUMAD)) // may find it closed already
	over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := over.Read(make([]byte, 64)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a fourth program of three allowed: read %d bytes, %v; want its connection closed", n, err)
	}
	settled(t, cs[0], lid)
	cs[1].Close()
	waitFor("the closed program's place freed", t, func() bool { return d.programs.Load() == 2 })
	settled(t, dial(t, sock, helloMsg(umad.KindUMAD)), lid)
}

// fdShortListener fails its first accept for want of file descriptors,
// then gives one connection, then is closed.
type fdShortListener struct {
	net.Listener
	calls int
}

func (l *fdShortListener) Accept() (net.Conn, error) {
	l.calls++
	switch l.calls {
	case 1:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	case 2:
		a, b := net.Pipe()
		b.Close()
		return a, nil
	}
	return nil, net.ErrClosed
}

// Out of file descriptors, the daemon waits and accepts again, as servers
// do; it stopped serving for good (review).
func TestAnAcceptOutOfDescriptorsIsTriedAgain(t *testing.T) {
	d, _, _ := daemonOf(t)
	l := &fdShortListener{}
	if err := d.ServePeers(l); err != nil || l.calls != 3 {
		t.Errorf("ServePeers = %v after %d accepts; want nil after 3 (EMFILE, a link, closed)", err, l.calls)
	}
}
