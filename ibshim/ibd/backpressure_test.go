package ibd

import (
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// A program that falls behind for a moment (descheduled on a busy node)
// loses no packet relayed from another node: its full queue holds the link
// back, as credits hold a real one. Dropped, a UC message was lost for good
// and perftest's UC test hung in CI.
func TestAProgramBrieflyBehindLosesNoRelayedPacket(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*net.UnixConn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
		defer c.Close()
	}
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
