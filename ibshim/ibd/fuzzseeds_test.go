package ibd

import (
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/ibshim/umad"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

// Seeds of the fuzzers: messages the shim and the verbs provider send, and
// frames a peer's daemon sends, built as they build them.

// saQuery is an SA request (method, attribute, component mask, record)
// to the SM at LID sm.
func saQuery(sm uint16, method byte, attr uint16, mask uint64, rec []byte) packet {
	u := make(packet, umadHdrLen+madLen)
	binary.LittleEndian.PutUint32(u[8:], 1000)
	u.setLID(sm)
	m := u.mad()
	m[0], m[1], m[2], m[3] = 1, classSA, 2, method
	m[24] = 1 // RMPP version, as libibmad's SA queries carry it
	put64(m[8:], 77)
	put16(m[16:], attr)
	put64(m[48:], mask)
	copy(m[saHdrLen:], rec)
	return u
}

func perfQuery(lid uint16, attr uint16) []byte {
	u := make(packet, umadHdrLen+madLen)
	binary.LittleEndian.PutUint32(u[8:], 1000)
	u.setLID(lid)
	m := u.mad()
	m[0], m[1], m[2], m[3] = 1, classPerf, 1, methodGet
	put64(m[8:], 78)
	put16(m[16:], attr)
	m.gsData()[1] = 1 // port select
	return u
}

func verbsHelloMsg(hca string) []byte {
	h := make([]byte, umad.VerbsHelloSize)
	binary.LittleEndian.PutUint32(h, umad.Magic)
	binary.LittleEndian.PutUint32(h[4:], umad.OpVerbsHello)
	binary.LittleEndian.PutUint32(h[12:], 1)
	copy(h[16:], hca)
	return h
}

// mcJoinMsg is an MCMemberRecord Set making group i, from port p.
func mcJoinMsg(sm uint16, p *fabric.Port, i uint32) []byte {
	rec := make([]byte, mcRecLen)
	rec[0], rec[1] = 0xff, 0x12
	binary.BigEndian.PutUint32(rec[12:], i)
	gid := portGID(p)
	copy(rec[16:], gid[:])
	binary.BigEndian.PutUint16(rec[40:], 0xffff)
	rec[48] = joinFull
	u := saQuery(sm, methodSet, attrMCMemberRecord, mcMGID|mcPortGID|mcJoinState|mcQKey|mcTClass|mcPKey|mcSL|mcFlowLabel, rec)
	u[umadHdrLen+24] = 0
	return u
}

// fuzzNode is daemonOf's node, and its fabric for the seeds' LIDs.
func fuzzNode(tb testing.TB) (*profile.Node, *fabric.Fabric) {
	n := testenv.Node(tb, "h100", 8)
	f, err := fabric.Build(n, "node-a", 0)
	if err != nil {
		tb.Fatal(err)
	}
	return n, f
}

// programSeeds are what the shim and the verbs provider really send.
func programSeeds(f *fabric.Fabric) [][]byte {
	own := f.Find("mlx5_0").Ports[1]
	sm := own.Node.Subnet.SM.LID
	dr := smp(0xffff, 9)
	dr[umadHdrLen+1], dr[umadHdrLen+7] = classSMPDR, 2
	dr[umadHdrLen+128+1], dr[umadHdrLen+128+2] = 1, 2
	mlid := mlidOf([16]byte{0xff, 0x12, 15: 1}) // mcJoinMsg's group 1
	attach := make([]byte, umad.VerbsAttachSize)
	binary.LittleEndian.PutUint32(attach, umad.Magic)
	binary.LittleEndian.PutUint32(attach[4:], umad.OpVerbsAttach)
	binary.LittleEndian.PutUint32(attach[8:], umad.QPNBlock+1)
	binary.LittleEndian.PutUint16(attach[12:], mlid)
	attach[14] = 1
	mc := verbsPkt(mlid, 0xffffff, umad.QPNBlock+1, 32)
	mc[umad.PktKindOffset], mc[umad.PktFlagsOffset] = umad.PktUDSend, umad.PktMcast
	mc[umad.PktSize], mc[umad.PktSize+1], mc[umad.PktSize+15] = 0xff, 0x12, 1
	async := verbsHelloMsg("mlx5_0")
	binary.LittleEndian.PutUint32(async[4:], umad.OpAsyncHello)
	return [][]byte{
		joinMsgs(registerMsg(0, classSMPLID, 0), smp(own.LID, 1), smp(own.Peer.Node.Ports[0].LID, 2)),
		joinMsgs(dr),
		joinMsgs(saQuery(sm, methodGetTbl, attrNodeRecord, 0, nil), saQuery(sm, methodGet, attrPathRecord, 0, nil)),
		joinMsgs(saQuery(sm, methodGetTbl, attrMFTRecord, 0, nil), saQuery(sm, methodGetTbl, attrSL2VLRecord, 0, nil)),
		joinMsgs(perfQuery(own.LID, attrPortCounters), perfQuery(own.Peer.Node.Ports[0].LID, attrPortCountersExt)),
		joinMsgs(registerMsg(0, vendorIBPing, ouiOpenFabric, methodGet), registerMsg(1, vendorIBPing, ouiOpenFabric),
			ping(own.LID, 3, 1000), ping(f.Find("mlx5_1").Ports[1].LID, 4, 1000), ping(caAt(f, 1, "mlx5_0").LID, 5, 1000)),
		joinMsgs(mcJoinMsg(sm, own, 1), verbsHelloMsg("mlx5_0"), attach, mc, verbsPkt(own.LID, umad.QPNBlock, umad.QPNBlock+1, 8)),
		joinMsgs(helloMsg(umad.KindISSM), raise(1)),
		joinMsgs(async, raise(2)),
	}
}

// caAt is the port of the CA hca of slot on the subnet of node-a's hca.
func caAt(f *fabric.Fabric, slot int, hca string) *fabric.Port {
	for _, nd := range f.Find(hca).Subnet.Nodes {
		if nd.Type == fabric.CA && nd.Slot == slot && nd.HCA == hca {
			return nd.Ports[1]
		}
	}
	return nil
}

// madFrame is a frame's body relaying u from port from to port to.
func madFrame(f *fabric.Fabric, from, to *fabric.Port, u []byte) []byte {
	return frame(frameMAD, [][]byte{{byte(subnetOf(f, from.Node.Subnet)), byte(from.LID >> 8), byte(from.LID), byte(to.LID >> 8), byte(to.LID)}, u})
}

func subnetOf(f *fabric.Fabric, s *fabric.Subnet) int {
	for i, x := range f.Subnets {
		if x == s {
			return i
		}
	}
	return -1
}

// peerSeeds are frames a peer's daemon really sends, cut as splitMsgs
// cuts: a frame's type, then its body.
func peerSeeds(f *fabric.Fabric) [][]byte {
	own, theirs := f.Find("mlx5_0").Ports[1], caAt(f, 1, "mlx5_0")
	body := func(b []byte) []byte { return b[4:] }
	resp := ping(own.LID, 5, 0)
	resp.mad()[3] = methodResp
	mgid := [16]byte{0xff, 0x12, 15: 1}
	rec := [mcRecLen]byte{}
	binary.BigEndian.PutUint16(rec[36:], mlidOf(mgid))
	groups, _ := json.Marshal([]wireGroup{{Subnet: 0, MGID: mgid, Rec: rec, Members: []wireMember{{GID: portGID(theirs), Join: joinFull}}}})
	pkt := verbsPkt(own.LID, umad.QPNBlock, 0, 16)
	binary.LittleEndian.PutUint16(pkt[umad.PktSLIDOffset:], theirs.LID)
	mc := verbsPkt(mlidOf(mgid), 0xffffff, 0, 16)
	binary.LittleEndian.PutUint16(mc[umad.PktSLIDOffset:], theirs.LID)
	mc[umad.PktKindOffset] = umad.PktUDSend
	return [][]byte{
		joinMsgs(body(madFrame(f, theirs, own, ping(own.LID, 4, 1000))), body(madFrame(f, theirs, own, resp))),
		joinMsgs(body(frame(frameFaults, [][]byte{[]byte(`[{"HCA":"mlx5_0","Down":true}]`)}))),
		joinMsgs(body(frame(frameGroups, [][]byte{groups}))),
		joinMsgs(body(frame(frameVerbs, [][]byte{{0}, pkt})), body(frame(frameVerbs, [][]byte{{0}, mc}))),
	}
}
