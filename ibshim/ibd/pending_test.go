package ibd

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/nvmock/nvmock/ibshim/umad"
)

// Requests awaiting an answer are keyed by the port asked and the TID,
// whose low half the asker picks and may pick again while one waits. The
// newer request takes the answer; the older one's asker must still hear
// that it timed out, and a peer's count of them must still go down.
func TestAnAskerWhoseTIDIsTakenStillTimesOut(t *testing.T) {
	_, sock, f := daemonOf(t)
	own := f.Find("mlx5_0").Ports[1].LID
	server := pingServer(t, sock, own)
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
	server := pingServer(t, sock, own.LID)
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

// Two programs that pick the same TID ask one ibping server: the kernel
// puts each agent's number in the TID's high half (ib_umad_write), so the
// server sees two requests and each asker gets its own answer.
func TestTwoProgramsWithOneTIDEachGetTheirAnswer(t *testing.T) {
	_, sock, f := daemonOf(t)
	own := f.Find("mlx5_0").Ports[1].LID
	server := pingServer(t, sock, own)
	var askers [2]*net.UnixConn
	for i := range askers {
		askers[i] = dial(t, sock, helloMsg(umad.KindUMAD))
		register(t, askers[i], 1, vendorIBPing, ouiOpenFabric)
		settled(t, askers[i], own)
		p := ping(own, 0x77, 5000)
		p.setAgent(1)
		if _, err := askers[i].Write(p); err != nil {
			t.Fatal(err)
		}
	}
	his := map[uint64]bool{}
	for range askers {
		r := read(t, server, 2*time.Second)
		if r == nil || r.mad().method() != methodGet {
			t.Fatalf("the server got %v, want a Get from each asker", r)
		}
		tid := r.mad().tid()
		if uint32(tid) != 0x77 || tid>>32 == 0 || his[tid>>32] {
			t.Fatalf("the server got TIDs %#x after %v: want low half 0x77 and a new agent number in the high half", tid, his)
		}
		his[tid>>32] = true
		ans := append(packet(nil), r...)
		ans.mad()[3] = methodResp
		binary.LittleEndian.PutUint32(ans[8:], 0)
		if _, err := server.Write(ans); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range askers {
		r := read(t, c, 2*time.Second)
		if r == nil || r.mad().method() != methodResp || r.mad().status() != 0 || !his[r.mad().tid()>>32] {
			t.Fatalf("asker %d got %v, want its GetResp", i, r)
		}
	}
}
