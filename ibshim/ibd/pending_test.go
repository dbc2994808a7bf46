package ibd

import (
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/nvmock/nvmock/ibshim/umad"
)

// Requests awaiting an answer are keyed by the port asked and the TID,
// which the asker picks: another asker may pick the same. The newer
// request takes the answer; the older one's asker must still hear that
// it timed out, and a peer's count of them must still go down.
func TestAnAskerWhoseTIDIsTakenStillTimesOut(t *testing.T) {
	_, sock, f := daemonOf(t)
	own := f.Find("mlx5_0").Ports[1].LID
	server := dial(t, sock, helloMsg(umad.KindUMAD))
	register(t, server, 0, vendorIBPing, ouiOpenFabric, methodGet)
	settled(t, server, own)
	go io.Copy(io.Discard, server) // it never answers
	a := dial(t, sock, helloMsg(umad.KindUMAD))
	b := dial(t, sock, helloMsg(umad.KindUMAD))
	if _, err := a.Write(ping(own, 7, 200)); err != nil {
		t.Fatal(err)
	}
	settled(t, a, own)
	if _, err := b.Write(ping(own, 7, 3600_000)); err != nil {
		t.Fatal(err)
	}
	r := read(t, a, 3*time.Second)
	if r == nil || binary.LittleEndian.Uint32(r[4:]) != etimedout {
		t.Fatalf("the first asker got %x in 3 s, want its request back with ETIMEDOUT", r)
	}
}

func TestAPeersRequestsTakenByAProgramGiveTheirPlaceBack(t *testing.T) {
	d, sock, f := daemonOf(t)
	own := f.Find("mlx5_0").Ports[1]
	server := dial(t, sock, helloMsg(umad.KindUMAD))
	register(t, server, 0, vendorIBPing, ouiOpenFabric, methodGet)
	settled(t, server, own.LID)
	go io.Copy(io.Discard, server)
	link, r := nodeBLink(t, d, f)
	go io.Copy(io.Discard, r)
	theirs := caAt(f, 1, "mlx5_0")
	c := dial(t, sock, helloMsg(umad.KindUMAD))
	for i := range 10 {
		if _, err := link.Write(madFrame(f, theirs, own, ping(own.LID, uint64(i), 3600_000))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("the peer's 10 requests wait", t, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.pending) == 10
	})
	for i := range 10 {
		if _, err := c.Write(ping(own.LID, uint64(i), 3600_000)); err != nil {
			t.Fatal(err)
		}
	}
	settled(t, c, own.LID)
	d.mu.Lock()
	defer d.mu.Unlock()
	for p := range d.links {
		if p.pending != 0 {
			t.Errorf("the peer's link counts %d requests waiting; a program's took their places", p.pending)
		}
	}
}
