package ibd

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/nvmock/nvmock/ibshim/umad"
)

// Two programs that pick the same TID ask one ibping server: the kernel
// puts each agent's number in the TID's high half (ib_umad_write), so the
// server sees two requests and each asker gets its own answer.
func TestTwoProgramsWithOneTIDEachGetTheirAnswer(t *testing.T) {
	_, sock, f := daemonOf(t)
	own := f.Find("mlx5_0").Ports[1].LID
	server := dial(t, sock, helloMsg(umad.KindUMAD))
	register(t, server, 0, vendorIBPing, ouiOpenFabric, methodGet)
	settled(t, server, own)
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
