package ibd

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/nvmock/nvmock/ibshim/fabric"
)

// The memberships a peer tells are the subnet's, in the SA's groups and
// the switches' tables, until its daemon goes away and takes them along.
func TestAPeersMembershipsLastAsLongAsItsLink(t *testing.T) {
	d, f := quietDaemon(t)
	s := f.Subnets[0]
	conn, r := nodeBLink(t, d, f)
	go io.Copy(io.Discard, r)
	mgid := [16]byte{0xff, 0x12, 0x60, 0x1b, 0xff, 0xff, 15: 0x44}
	w := wireGroup{Subnet: 0, MGID: mgid}
	binary.BigEndian.PutUint16(w.Rec[36:], mlidOf(mgid))
	var leaf *fabric.Node
	for _, slot := range []int{1, 2} {
		p := s.LocalCAs(slot)["mlx5_0"].Ports[1]
		w.Members = append(w.Members, wireMember{portGID(p), joinFull})
		leaf = p.Peer.Node
	}
	body, _ := json.Marshal([]wireGroup{w})
	if _, err := conn.Write(frame(frameGroups, [][]byte{body})); err != nil {
		t.Fatal(err)
	}
	// Two members of one leaf (the second is a modelled node's port, which
	// a peer would not tell, but the tables do not mind): its ports 2, 3.
	state := func() (members int, mask []uint16) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if g := d.subnetGroups(s)[mgid]; g != nil {
			members = len(g.members)
		}
		return members, d.mfts(s)[leaf][mlidOf(mgid)]
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, mask := state(); n == 2 {
			if len(mask) == 0 || mask[0] != 1<<2|1<<3 {
				t.Fatalf("the leaf's mask for the group: %v, want ports 2 and 3", mask)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the peer's group is not the subnet's after 5 s")
		}
	}
	conn.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, mask := state(); n == 0 && mask == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the peer's group outlived its link")
		}
	}
}
