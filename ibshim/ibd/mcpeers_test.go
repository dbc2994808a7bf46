package ibd

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
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
	// A group whose LID is no multicast LID is not taken (review: the
	// switches' MulticastFDBTop wrapped).
	bad := w
	bad.MGID[15] = 0x45
	binary.BigEndian.PutUint16(bad.Rec[36:], 0x0001)
	body, _ := json.Marshal([]wireGroup{w, bad})
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
			d.mu.Lock()
			taken := d.subnetGroups(s)[bad.MGID] != nil
			d.mu.Unlock()
			if taken {
				t.Error("a group of unicast LID 1 was taken")
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

// The groups frame waits for the hello, which the other side must read
// first, though it was queued before it.
func TestTheGroupsFrameNeverOvertakesTheHello(t *testing.T) {
	for range 50 {
		ours, theirs := net.Pipe()
		p := newPeer(ours)
		p.sendState([]byte("[]"))
		p.send(frameHello, []byte("{}"))
		typ, _, err := readFrame(bufio.NewReader(theirs))
		close(p.done)
		ours.Close()
		theirs.Close()
		if err != nil || typ != frameHello {
			t.Fatalf("first frame: type %d, %v; want the hello", typ, err)
		}
	}
}

// A MulticastForwardingTable block: 32 MLIDs from the block's first, the
// ports of the position's 16; a position past the ports is a bad value.
// (The 9 bits of block number reach every MLID of the capacity.)
func TestMFTBlocksHoldTheTreesPorts(t *testing.T) {
	d, f := quietDaemon(t)
	s := f.Subnets[0]
	mgid := [16]byte{0xff, 0x12, 0x60, 0x1b, 0xff, 0xff, 15: 0x45}
	k := mcKey{s, mgid}
	g := &mcGroup{members: map[[16]byte]byte{}}
	binary.BigEndian.PutUint16(g.rec[36:], mlidOf(mgid))
	var leaf *fabric.Node
	for _, slot := range []int{16, 18} { // leaf ports 17 and 19: the second 16
		gid := portGID(s.LocalCAs(slot)["mlx5_0"].Ports[1])
		g.members[gid] = joinFull
		g.order = append(g.order, gid)
		leaf = s.LocalCAs(slot)["mlx5_0"].Ports[1].Peer.Node
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.groups = map[mcKey]*mcGroup{k: g}
	d.mftChanged()
	mlid := int(mlidOf(mgid))
	block, i := uint32(mlid-mlidBase)/mftBlock, (mlid-mlidBase)%mftBlock
	for pos, want := range []uint16{0, 1<<1 | 1<<3, 0} {
		data := make([]byte, 64)
		if st := d.mft(leaf, block|uint32(pos)<<28, data); st != 0 || binary.BigEndian.Uint16(data[2*i:]) != want {
			t.Errorf("block %d position %d: status %#x, entry %#04x; want %#04x", block, pos, st, binary.BigEndian.Uint16(data[2*i:]), want)
		}
		for j := range mftBlock {
			if j != i && binary.BigEndian.Uint16(data[2*j:]) != 0 {
				t.Errorf("block %d position %d: MLID %#x has ports %#04x, want none", block, pos, mlidBase+int(block)*mftBlock+j, binary.BigEndian.Uint16(data[2*j:]))
			}
		}
	}
	if top := d.mftTop(leaf); int(top) != mlidBase+int(block+1)*mftBlock-1 {
		t.Errorf("MulticastFDBTop %#x, want the end of block %d", top, block)
	}
	if st := d.mft(leaf, block|5<<28, make([]byte, 64)); st != statusBadValue {
		t.Errorf("position 5 of a switch of 66 ports: status %#x, want a bad value", st)
	}
}
