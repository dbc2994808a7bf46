package ibd

import (
	"encoding/binary"
	mbits "math/bits"
	"testing"
)

// The switch and port table records' filters, as OpenSM applies them.
func TestSARecordFiltersFollowOpenSM(t *testing.T) {
	d, f := quietDaemon(t)
	s := f.Subnets[0]
	ca := f.Find("mlx5_0")
	leaf := ca.Ports[1].Peer.Node
	tmpl := func(lid uint16, rest ...byte) []byte {
		b := make([]byte, 72)
		put16(b, lid)
		copy(b[2:], rest)
		return b
	}
	sw := switches(s)
	for i := 1; i < len(sw); i++ {
		if mbits.ReverseBytes64(sw[i-1].GUID) > mbits.ReverseBytes64(sw[i].GUID) {
			t.Fatalf("switches out of OpenSM's order at %d", i)
		}
	}
	lid := leaf.Ports[0].LID
	for _, c := range []struct {
		what string
		recs [][]byte
		want int
	}{
		{"LFT: a switch's block", lftRecords(s, tmpl(lid, 0, 1), 1|2), 1},
		{"LFT: a block past the top LID", lftRecords(s, tmpl(lid, 0, 9), 1|2), 0},
		{"LFT: a CA's LID", lftRecords(s, tmpl(ca.Ports[1].LID), 1), 0},
		{"SL-to-VL: a CA, whatever ports are named", sl2vlRecords(s, tmpl(ca.Ports[1].LID, 7, 9), 1|2|4), 1},
		{"SL-to-VL: a switch's out port 3, every in port", sl2vlRecords(s, tmpl(lid, 0, 3), 1|4), len(leaf.Ports)},
		{"SL-to-VL: a port the switch lacks", sl2vlRecords(s, tmpl(lid, 0, 200), 1|4), 0},
		{"P_Key: a CA's block past its table (OpenSM makes it empty)", pkeyRecords(s, tmpl(ca.Ports[1].LID, 0, 5), 1|2), 1},
		{"P_Key: a switch's ports, block 0", pkeyRecords(s, tmpl(lid, 0, 0), 1|2), len(leaf.Ports)},
		{"VL arbitration: block 2 of every port of a switch", vlArbRecords(s, tmpl(lid, 0, 2), 1|4), len(leaf.Ports)},
		{"VL arbitration: block 2 of port 5", vlArbRecords(s, tmpl(lid, 5, 2), 1|2|4), 1},
		{"SwitchInfo: one switch", d.switchInfoRecords(s, tmpl(lid), 1), 1},
		{"MFT: a switch with no group", d.mftRecords(s, tmpl(lid), 1), 0},
	} {
		if len(c.recs) != c.want {
			t.Errorf("%s: %d records, want %d", c.what, len(c.recs), c.want)
		}
	}
	// A P_Key record's block number is in host order, as OpenSM writes it.
	if r := pkeyRecords(s, tmpl(ca.Ports[1].LID, 0, 2), 1|2); len(r) != 1 || binary.LittleEndian.Uint16(r[0][2:]) != 2 {
		t.Errorf("P_Key record for block 2: %x", r)
	}
	// Every SL-to-VL record of that out port names it, and each in port.
	in := map[byte]bool{}
	for _, r := range sl2vlRecords(s, tmpl(lid, 0, 3), 1|4) {
		if r[3] != 3 || binary.BigEndian.Uint16(r) != lid {
			t.Fatalf("SL-to-VL record %x, want LID %d, out port 3", r, lid)
		}
		in[r[2]] = true
	}
	if len(in) != len(leaf.Ports) {
		t.Errorf("SL-to-VL records for out port 3 name %d in ports, want %d", len(in), len(leaf.Ports))
	}
}

// Requests Linux's MAD layer drops before any agent sees them get no
// answer: a MAD of another base version, and a CM Get (CM uses Sends).
func TestTheMADLayerDropsWhatItDoesNotValidate(t *testing.T) {
	_, f := quietDaemon(t)
	to := f.Find("mlx5_0").Ports[1]
	m := make(mad, madLen)
	m[0], m[1], m[3] = 1, vendorIBPing+1, methodGet
	if !unmatched(to, m) {
		t.Fatal("a Get of a class no program took is not answered")
	}
	m[0] = 2
	if unmatched(to, m) {
		t.Error("a MAD of base version 2 is answered")
	}
	m[0], m[1] = 1, classCM
	if unmatched(to, m) {
		t.Error("a CM Get is answered")
	}
	put16(m[16:], attrClassInfo)
	if !unmatched(to, m) {
		t.Error("a CM ClassPortInfo Get is not answered")
	}
}
