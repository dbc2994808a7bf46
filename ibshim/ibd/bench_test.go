package ibd

import (
	"encoding/binary"
	"net"
	"runtime"
	"testing"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/ibshim/umad"
	"github.com/nvmock/nvmock/internal/testenv"
)

// serve starts a daemon for an h100 node at slot 0 and connects to it as
// the shim does for umad0, with agent 0 registered for LID-routed SMPs.
func serve(tb testing.TB) (*net.UnixConn, *fabric.Fabric) {
	tb.Helper()
	sock, f := daemonAt(tb)
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	le := binary.LittleEndian
	hello := make([]byte, umad.HelloSize)
	le.PutUint32(hello, umad.Magic)
	le.PutUint32(hello[4:], umad.OpHello)
	reg := make([]byte, umad.RegisterSize)
	le.PutUint32(reg, umad.Magic)
	le.PutUint32(reg[4:], umad.OpRegister)
	reg[16], reg[17] = classSMPLID, 1
	for _, m := range [][]byte{hello, reg} {
		if _, err := c.Write(m); err != nil {
			tb.Fatal(err)
		}
	}
	return c, f
}

// smp is a LID-routed NodeInfo Get to lid, as libibmad sends it.
func smp(lid uint16, tid uint64) []byte {
	u := make(packet, umadHdrLen+madLen)
	binary.LittleEndian.PutUint32(u[8:], 1000) // timeout ms
	u.setLID(lid)
	m := u.mad()
	m[0], m[1], m[2], m[3] = 1, classSMPLID, 1, methodGet
	put64(m[8:], tid)
	put16(m[16:], attrNodeInfo)
	return u
}

func TestNodeInfoRoundTrip(t *testing.T) {
	c, f := serve(t)
	leaf := f.Find("mlx5_0").Ports[1].Peer.Node
	if _, err := c.Write(smp(leaf.Ports[0].LID, 7)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	r := packet(buf[:n]).mad()
	if r.method() != methodResp || uint32(r.tid()) != 7 || r.status() != 0 {
		t.Fatalf("reply method %#x tid %d status %#x, want GetResp, 7, 0", r.method(), r.tid(), r.status())
	}
	if got := binary.BigEndian.Uint64(r.smpData()[12:]); got != leaf.GUID {
		t.Errorf("NodeInfo GUID %#x, want the leaf's %#x", got, leaf.GUID)
	}
}

// BenchmarkMADRoundTrip is one SMP to a switch and its answer, through
// the daemon's socket as the shim passes it.
func BenchmarkMADRoundTrip(b *testing.B) {
	c, f := serve(b)
	req := smp(f.Find("mlx5_0").Ports[1].Peer.Node.Ports[0].LID, 1)
	buf := make([]byte, 4096)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuildFabric is the time and heap a daemon's 32-node fabric (a
// DGX H100 scalable unit, compute and storage) takes.
func BenchmarkBuildFabric(b *testing.B) {
	n := testenv.Node(b, "h100", 8)
	var keep []*fabric.Fabric
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < b.N; i++ {
		f, err := fabric.Build(n, "node-a", 0)
		if err != nil {
			b.Fatal(err)
		}
		keep = append(keep, f)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N)/1024, "KiB/fabric")
	runtime.KeepAlive(keep)
}
