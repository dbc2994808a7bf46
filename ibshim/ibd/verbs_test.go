package ibd

import (
	"encoding/binary"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/ibshim/umad"
	"github.com/nvmock/nvmock/internal/testenv"
)

// daemonAt serves an h100 node's daemon at a socket and returns its path.
func daemonAt(tb testing.TB) (string, *fabric.Fabric) {
	tb.Helper()
	n := testenv.Node(tb, "h100", 8)
	f, err := fabric.Build(n, "node-a", 0)
	if err != nil {
		tb.Fatal(err)
	}
	sock := filepath.Join(tb.TempDir(), "ibd.sock")
	l, err := Listen(sock)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	go New(n, f, logrus.New()).Serve(l)
	return sock, f
}

// verbsConn connects as a provider context of hca's port and returns the
// QPN block and LID the daemon answered.
func verbsConn(tb testing.TB, sock, hca string, port uint32) (*net.UnixConn, uint32, uint16) {
	tb.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	le := binary.LittleEndian
	h := make([]byte, umad.VerbsHelloSize)
	le.PutUint32(h, umad.Magic)
	le.PutUint32(h[4:], umad.OpVerbsHello)
	le.PutUint32(h[12:], port)
	copy(h[16:], hca)
	if _, err := c.Write(h); err != nil {
		tb.Fatal(err)
	}
	w := make([]byte, 64)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := c.Read(w)
	c.SetReadDeadline(time.Time{})
	if w = w[:max(n, 0)]; err != nil || len(w) != umad.VerbsWelcomeSize || le.Uint32(w[4:]) != umad.OpVerbsHello {
		tb.Fatalf("welcome: %x", w)
	}
	return c, le.Uint32(w[8:]), uint16(le.Uint32(w[12:]))
}

func verbsPkt(dlid uint16, dqpn, sqpn uint32, payload int) []byte {
	le := binary.LittleEndian
	p := make([]byte, umad.PktSize+payload)
	le.PutUint32(p, umad.Magic)
	le.PutUint32(p[4:], umad.OpVerbsPkt)
	le.PutUint16(p[umad.PktDLIDOffset:], dlid)
	le.PutUint32(p[umad.PktDQPNOffset:], dqpn)
	le.PutUint32(p[umad.PktSQPNOffset:], sqpn)
	return p
}

func TestVerbsContextsGetQPNBlocksAndPacketsFindThem(t *testing.T) {
	sock, f := daemonAt(t)
	lid := f.Find("mlx5_0").Ports[1].LID
	a, baseA, lidA := verbsConn(t, sock, "mlx5_0", 1)
	b, baseB, _ := verbsConn(t, sock, "mlx5_0", 1)
	if baseA != umad.QPNBlock || baseB != 2*umad.QPNBlock || lidA != lid {
		t.Fatalf("blocks %#x, %#x and LID %d; want %#x, %#x (the lowest free) and mlx5_0's %d", baseA, baseB, lidA, umad.QPNBlock, 2*umad.QPNBlock, lid)
	}
	for _, bad := range []struct {
		hca  string
		port uint32
	}{{"mlx5_99", 1}, {"mlx5_0", 2}} {
		if _, base, _ := verbsConn(t, sock, bad.hca, bad.port); base != 0 {
			t.Errorf("%s port %d: block %#x, want 0 (no such InfiniBand port)", bad.hca, bad.port, base)
		}
	}

	// To B's QP 5: it arrives with the sender's LID.
	if _, err := a.Write(verbsPkt(lid, baseB+5, baseA+1, 100)); err != nil {
		t.Fatal(err)
	}
	got := read(t, b, 2*time.Second)
	if len(got) != umad.PktSize+100 || binary.LittleEndian.Uint16(got[umad.PktSLIDOffset:]) != lid {
		t.Fatalf("B got %d bytes, source LID %d; want %d with LID %d", len(got), binary.LittleEndian.Uint16(got[umad.PktSLIDOffset:]), umad.PktSize+100, lid)
	}
	// To a block no one holds, to a modelled node, and from a QPN that is
	// not the sender's: lost.
	var modelled uint16
	for _, nd := range f.Subnets[0].Nodes {
		if nd.Type == fabric.CA && nd.Slot > 0 {
			modelled = nd.Ports[1].LID
			break
		}
	}
	for _, p := range [][]byte{verbsPkt(lid, 7*umad.QPNBlock, baseA, 10), verbsPkt(modelled, baseB, baseA, 10), verbsPkt(lid, baseB, baseB, 10)} {
		if _, err := a.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	if r := read(t, b, 300*time.Millisecond); r != nil {
		t.Errorf("B got a packet that was not its: %x", r[:umad.PktSize])
	}
	// A context that goes away frees its block.
	b.Close()
	time.Sleep(100 * time.Millisecond)
	if _, base, _ := verbsConn(t, sock, "mlx5_0", 1); base != baseB {
		t.Errorf("after B closed, a new context got block %#x, want B's %#x", base, baseB)
	}
}

// One 32 KiB packet from one context to another through the daemon.
func BenchmarkVerbsPacketThroughTheDaemon(b *testing.B) {
	sock, f := daemonAt(b)
	lid := f.Find("mlx5_0").Ports[1].LID
	src, srcBase, _ := verbsConn(b, sock, "mlx5_0", 1)
	dst, base, _ := verbsConn(b, sock, "mlx5_0", 1)
	p := verbsPkt(lid, base, srcBase, 32768)
	buf := make([]byte, 64<<10)
	b.SetBytes(32768)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := src.Write(p); err != nil {
			b.Fatal(err)
		}
		if _, err := dst.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
}
