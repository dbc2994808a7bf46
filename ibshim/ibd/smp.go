package ibd

import (
	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/profile"
)

// SMP attributes (IBA 14.2.5).
const (
	attrNodeDesc = 0x10
	attrNodeInfo = 0x11
	attrSwitch   = 0x12
	attrGUIDInfo = 0x14
	attrPortInfo = 0x15
	attrPKeys    = 0x16
	attrSL2VL    = 0x17
	attrVLArb    = 0x18
	attrLFT      = 0x19
	attrMFT      = 0x1b
	attrSMInfo   = 0x20
	// attrMlnxExtPortInfo is Mellanox's vendor SMP attribute for FDR10,
	// which infiniband-diags reads from ConnectX-3 to -6 and SwitchX to
	// Quantum (ibportstate fails without it).
	attrMlnxExtPortInfo = 0xff90
	attrClassInfo       = 0x01
)

// Port capability masks as ConnectX HCAs and Quantum switches report them
// (docs/research/infiniband.md); isSM is PortInfo.CapabilityMask bit 1.
const (
	switchCapMask  = 0xa659e848
	isSM           = 1 << 1
	smPriority     = 15
	smStateMaster  = 3
	portActive     = 4
	portDown       = 1
	physLinkUp     = 5
	physPolling    = 2
	linkDownPoll   = 2
	mtu4096        = 5
	width4X        = 2
	widthSupported = 1 | 2 | 16 // 1X, 4X, 2X
	speedQDR       = 4
	speedsSDRtoQDR = 1 | 2 | 4
)

// sma answers a subnet management Get at node, which the SMP reached
// through port in; it fills data and returns the MAD status.
func (d *Daemon) sma(m mad, nd *fabric.Node, in *fabric.Port, data []byte) uint16 {
	if m[2] != 1 {
		return statusBadVersion // review: answered as version 1
	}
	if m.method() != methodGet {
		// The fabric is configured by its own SM; a second one may look,
		// not change.
		return statusBadMethodAttr
	}
	mod := m.attrMod()
	switch m.attr() {
	case attrNodeDesc:
		copy(data, nd.Desc)
	case attrNodeInfo:
		nodeInfo(nd, in, data)
	case attrPortInfo:
		p := in
		if nd.Type == fabric.Switch || mod != 0 {
			if int(mod) >= len(nd.Ports) || nd.Ports[mod] == nil {
				return statusBadValue
			}
			p = nd.Ports[mod]
		}
		d.portInfo(p, in, data)
	case attrMlnxExtPortInfo:
		// Every port's: FDR10 (a 10 Gb/s lane rate of ConnectX-3 days) is
		// none of these devices' rates, so not supported, enabled or
		// active, and state change events are off.
		if nd.Type == fabric.Switch || mod != 0 {
			if int(mod) >= len(nd.Ports) || nd.Ports[mod] == nil {
				return statusBadValue
			}
		}
	case attrSwitch:
		if nd.Type != fabric.Switch {
			return statusBadMethodAttr
		}
		switchInfo(nd, data, d.mftTop(nd))
	case attrGUIDInfo:
		if mod == 0 {
			put64(data, in.Base().GUID)
		}
	case attrPKeys:
		if mod&0xffff == 0 {
			put16(data, 0xffff) // the default partition, full member
		}
	case attrLFT:
		if nd.Type != fabric.Switch {
			return statusBadMethodAttr
		}
		for i := range 64 {
			data[i] = 0xff
			if lid := int(mod)*64 + i; lid < len(nd.LFT) {
				data[i] = nd.LFT[lid]
			}
		}
	case attrMFT:
		if nd.Type != fabric.Switch {
			return statusBadMethodAttr
		}
		return d.mft(nd, mod, data)
	case attrSL2VL, attrVLArb:
		// Every SL on VL 0, no arbitration weights.
	case attrSMInfo:
		s := nd.Subnet
		if in.Base() != s.SM {
			return statusBadMethodAttr
		}
		put64(data[0:], s.SM.Node.GUID)
		put32(data[16:], d.activity())
		data[20] = smPriority<<4 | smStateMaster
	default:
		return statusBadMethodAttr
	}
	return 0
}

func nodeInfo(nd *fabric.Node, in *fabric.Port, b []byte) {
	b[0], b[1], b[2] = 1, 1, byte(nd.Type)
	b[3] = byte(len(nd.Ports) - 1)
	put64(b[4:], nd.SysGUID)
	put64(b[12:], nd.GUID)
	put64(b[20:], in.GUID)
	put16(b[28:], nd.PartitionCap)
	put16(b[30:], nd.DeviceID)
	put32(b[32:], nd.Revision)
	b[36] = byte(in.Num)
	put24(b[37:], fabric.MellanoxVendor)
}

// portInfo fills PortInfo (IBA 14.2.5.6) of port p, asked through port in:
// LocalPortNum is the port the SMP arrived on, whichever port it asks
// about (libibnetdisc follows a switch's other ports by it). A switch's
// external ports carry no LID of their own.
func (d *Daemon) portInfo(p, in *fabric.Port, b []byte) {
	nd := p.Node
	s := nd.Subnet
	external := nd.Type == fabric.Switch && p.Num != 0
	put64(b[8:], s.Prefix)
	if !external {
		put16(b[16:], p.LID)
		if !p.Down() { // no SM has reached it
			put16(b[18:], s.SM.LID)
		}
		cap := nd.CapMask()
		if nd.Type == fabric.Switch {
			cap = switchCapMask
		}
		if p == s.SM || d.issm[p] > 0 {
			cap |= isSM
		}
		put32(b[20:], cap)
	}
	b[28] = byte(in.Num)
	up := p.Peer != nil || p.IsSwitchPort0()
	b[29], b[30] = widthSupported, widthSupported
	state, phys := byte(portDown), byte(physPolling)
	if up {
		b[31] = width4X
		state, phys = portActive, physLinkUp
	}
	b[32] = speedsSDRtoQDR<<4 | state
	b[33] = phys<<4 | linkDownPoll
	b[35] = speedQDR<<4 | speedsSDRtoQDR
	b[36] = mtu4096<<4 | 0 // neighbour MTU, SM's SL
	b[37] = 4 << 4         // VL0-7
	b[38], b[39], b[40] = 0, 8, 8
	b[41] = mtu4096
	b[42] = 0x1f // head-of-queue life: infinite
	b[43] = 4 << 4
	if nd.Type == fabric.CA {
		b[50] = 128 // GUIDCap
	} else {
		b[50] = 1
	}
	b[51] = 18 // subnet timeout
	b[52] = 20 // response time value
	_, extSup := extSpeed(p.Speed)
	ext, _ := extSpeed(p.ActiveSpeed())
	if up {
		b[62] = ext<<4 | extSup
	} else {
		b[62] = extSup
	}
	b[63] = extSup
}

// extSpeed is PortInfo's LinkSpeedExt encoding of a speed, and of the
// speeds a port of that generation supports.
func extSpeed(s profile.IBSpeed) (active, supported byte) {
	switch s {
	case profile.SpeedHDR:
		return 4, 1 | 2 | 4 // 53.125; FDR, EDR, HDR
	case profile.SpeedNDR:
		return 8, 1 | 2 | 4 | 8 // 106.25
	}
	// XDR has no LinkSpeedExt value; it shows in PortInfo's Ext2 fields,
	// which infiniband-diags 44 does not read.
	return 0, 1 | 2 | 4 | 8
}

// switchEnforcementCap is the P_Keys a switch's external port holds.
const switchEnforcementCap = 32

func switchInfo(nd *fabric.Node, b []byte, mcastTop uint16) {
	put16(b[0:], nd.LinearFDBCap)
	put16(b[4:], nd.MulticastFDBCap)
	put16(b[6:], nd.Subnet.TopLID)
	b[9], b[10] = 0xff, 0xff
	b[11] = 18 << 3 // life time value
	put16(b[14:], switchEnforcementCap)
	b[16] = 0x80 | 0x40 | 0x08 // partition enforcement in and out; enhanced port 0
	put16(b[18:], mcastTop)
}
