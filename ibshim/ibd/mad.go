package ibd

import (
	"encoding/binary"

	"github.com/nvmock/nvmock/ibshim/umad"
)

// Sizes of the packet interface (ABI 5 with P_Key index) and of a MAD.
const (
	umadHdrLen = umad.UMADHeaderSize
	madLen     = umad.MADSize
)

// Management classes and methods (IBA 13.4).
const (
	classSMPLID  = 0x01
	classSMPDR   = 0x81
	classSA      = 0x03
	classPerf    = 0x04
	classCM      = 0x07
	methodGet    = 0x01
	methodSet    = 0x02
	methodResp   = 0x81 // GetResp
	methodGetTbl = 0x12
	methodTblRsp = 0x92
	respBit      = 0x80
)

// MAD status codes (IBA 13.4.7): bits 2-4 say what was wrong.
const (
	statusBadVersion    = 1 << 2
	statusBadMethod     = 2 << 2
	statusBadMethodAttr = 3 << 2
	statusBadValue      = 7 << 2
	statusDR            = 0x8000 // the D bit of a directed-route SMP: a response
	saNoRecords         = 0x0300 // SA class status (15.2.1.1)
	saTooMany           = 0x0400
)

// ETIMEDOUT is what the kernel puts in an unanswered request's status.
const etimedout = umad.StatusTimedOut

// packet is one message of the packet interface: header and MAD.
type packet []byte

func (u packet) agent() uint32      { return binary.LittleEndian.Uint32(u[0:]) }
func (u packet) setAgent(a uint32)  { binary.LittleEndian.PutUint32(u[0:], a) }
func (u packet) setStatus(s uint32) { binary.LittleEndian.PutUint32(u[4:], s) }
func (u packet) timeoutMS() uint32  { return binary.LittleEndian.Uint32(u[8:]) }
func (u packet) retries() uint32    { return binary.LittleEndian.Uint32(u[12:]) }
func (u packet) setLength(n int)    { binary.LittleEndian.PutUint32(u[16:], uint32(n)) }
func (u packet) setQPN(q uint32)    { binary.BigEndian.PutUint32(u[20:], q) }
func (u packet) setQKey(q uint32)   { binary.BigEndian.PutUint32(u[24:], q) }
func (u packet) lid() uint16        { return binary.BigEndian.Uint16(u[28:]) }
func (u packet) setLID(l uint16)    { binary.BigEndian.PutUint16(u[28:], l) }
func (u packet) mad() mad           { return mad(u[umadHdrLen:]) }

// mad is a management datagram (IBA 13.4.2).
type mad []byte

func (m mad) class() byte        { return m[1] }
func (m mad) method() byte       { return m[3] }
func (m mad) status() uint16     { return binary.BigEndian.Uint16(m[4:]) }
func (m mad) setStatus(s uint16) { binary.BigEndian.PutUint16(m[4:], s) }
func (m mad) hopCount() byte     { return m[7] }
func (m mad) tid() uint64        { return binary.BigEndian.Uint64(m[8:]) }
func (m mad) attr() uint16       { return binary.BigEndian.Uint16(m[16:]) }
func (m mad) attrMod() uint32    { return binary.BigEndian.Uint32(m[20:]) }

// oui is a vendor MAD's OUI (classes 0x30-0x4f, IBA 13.4.5).
func (m mad) oui() uint32 { return uint32(m[37])<<16 | uint32(m[38])<<8 | uint32(m[39]) }

// smpData is an SMP's 64-byte attribute (LID-routed and directed).
func (m mad) smpData() []byte { return m[64:128] }

// drPath is a directed-route SMP's initial path.
func (m mad) drPath() []byte { return m[128:192] }

// gsData is a GS class's data: PerfMgt (13.4.3).
func (m mad) gsData() []byte { return m[64:256] }

// isResponse says whether the MAD answers another.
func (m mad) isResponse() bool { return m.method()&respBit != 0 }

// reply is a response to request u: the same packet, its MAD turned into
// the response; the caller fills (and first clears) the attribute data.
func reply(u packet) packet {
	r := make(packet, umadHdrLen+madLen)
	copy(r, u[:umadHdrLen+madLen])
	m := r.mad()
	switch m.method() {
	case methodGetTbl:
		m[3] = methodTblRsp
	case methodDelete:
		m[3] = methodDelResp
	default:
		m[3] = methodResp
	}
	m.setStatus(0)
	r.setStatus(0)
	r.setLength(len(r))
	return r
}

func put16(b []byte, v uint16) { binary.BigEndian.PutUint16(b, v) }
func put32(b []byte, v uint32) { binary.BigEndian.PutUint32(b, v) }
func put64(b []byte, v uint64) { binary.BigEndian.PutUint64(b, v) }
func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

// oversized says whether a MAD is longer than one MAD without being an RMPP
// transfer, which the kernel's write refuses (ib_create_send_mad, EINVAL):
// handed on, it ended the receiver's loop (ibping -S: "recv failed: No
// space left on device"; review).
func oversized(u packet) bool {
	return len(u) > umadHdrLen+madLen && u[umadHdrLen+26]&1 == 0
}
