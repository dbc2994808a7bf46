package ibd

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nvmock/nvmock/ibshim/umad"
)

// A program that falls behind for a moment (descheduled on a busy node)
// loses no packet relayed from another node: its full queue holds the link
// back, as credits hold a real one. Dropped, a UC message was lost for good
// and perftest's UC test hung in CI.
func TestAProgramBrieflyBehindLosesNoRelayedPacket(t *testing.T) {
	conns := seqpacketPair(t)
	c := &conn{uc: conns[0], gone: make(chan struct{})}
	defer close(c.gone)
	const n = 3 * peerInQueue
	pkt := make([]byte, 4096)
	sent := make(chan struct{})
	go func() {
		for i := 0; i < n; i++ {
			c.fromPeer(pkt)
		}
		close(sent)
	}()
	time.Sleep(300 * time.Millisecond) // the program is busy elsewhere
	buf := make([]byte, 8192)
	got := 0
	conns[1].SetReadDeadline(time.Now().Add(10 * time.Second))
	for got < n {
		if _, err := conns[1].Read(buf); err != nil {
			break
		}
		got++
	}
	<-sent
	if got != n {
		t.Errorf("the program got %d of %d packets", got, n)
	}
}

// seqpacketPair is a connected pair of sockets as a program and the
// daemon have, closed when the test ends.
func seqpacketPair(t *testing.T) [2]*net.UnixConn {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
		t.Cleanup(func() { c.Close() })
	}
	return conns
}

// A program that never reads holds up no one sending to it: a MAD for it
// is lost after dataWait, and a packet for its QP after that (review: the
// MAD's write waited for ever holding the writer's lock, and with it every
// sender of a packet to that program). The bound tells a wait of seconds
// from one for ever.
func TestAProgramThatNeverReadsHoldsNoSenderUp(t *testing.T) {
	conns := seqpacketPair(t)
	c := &conn{uc: conns[0], gone: make(chan struct{})}
	defer close(c.gone)
	done := make(chan error, 1)
	go func() {
		mad := make(packet, 256)
		for {
			if err := c.send(mad); err != nil {
				done <- err
				return
			}
		}
	}()
	for _, what := range []string{"a MAD", "a packet to its QP"} {
		select {
		case err := <-done:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("%s for a program that never reads: %v, want it lost at the deadline", what, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s for a program that never reads waited 30 s", what)
		}
		go func() { done <- c.sendData(make([]byte, 2048)) }()
	}
}

// A peer's packet of more payload than a packet carries is dropped: no
// provider sends one (review: 1 MiB packets queued for a program that did
// not read held 1 GB). The program gets the ordinary one sent after it.
func TestAnOversizedPacketFromAPeerIsDropped(t *testing.T) {
	d, f := quietDaemon(t)
	conns := seqpacketPair(t)
	c := &conn{uc: conns[0], gone: make(chan struct{})}
	defer close(c.gone)
	s := f.Subnets[0]
	dst := s.LocalCAs(f.Local)["mlx5_0"].Ports[1]
	src := s.LocalCAs(1)["mlx5_0"].Ports[1]
	d.mu.Lock()
	d.qpns[qpnBlock{dst, 7}] = c
	d.mu.Unlock()
	packetOf := func(payload int) []byte {
		b := make([]byte, 1+umad.PktSize+payload)
		msg := b[1:]
		binary.LittleEndian.PutUint16(msg[umad.PktDLIDOffset:], dst.LID)
		binary.LittleEndian.PutUint16(msg[umad.PktSLIDOffset:], src.LID)
		binary.LittleEndian.PutUint32(msg[umad.PktDQPNOffset:], 7*umad.QPNBlock+1)
		return b
	}
	d.verbsFromPeer(packetOf(umad.PktMaxPayload + 1))
	d.verbsFromPeer(packetOf(100))
	conns[1].SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64<<10)
	n, err := conns[1].Read(buf)
	if err != nil || n != umad.PktSize+100 {
		t.Errorf("the program got %d bytes (%v) first, want the 100-byte packet", n, err)
	}
}
