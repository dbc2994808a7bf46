package pcisim

import (
	"encoding/binary"

	"github.com/nvmock/nvmock/profile"
)

// configSize is what the kernel exposes for a PCIe function with
// extended configuration space.
const configSize = 4096

// Capability offsets: power management, then PCI Express, as most
// functions lay them out.
const (
	capPM   = 0x40
	capPCIe = 0x60
)

// PCIe device/port types (PCI Express capability register bits 7:4).
const (
	typeEndpoint   = 0x0
	typeRootPort   = 0x4
	typeUpstream   = 0x5
	typeDownstream = 0x6
)

type config []byte

func (c config) w8(off int, v uint8)   { c[off] = v }
func (c config) w16(off int, v uint16) { binary.LittleEndian.PutUint16(c[off:], v) }
func (c config) w32(off int, v uint32) { binary.LittleEndian.PutUint32(c[off:], v) }

// configSpace is a function's configuration space: a type 0 header for
// endpoints, type 1 for bridges (with their bus numbers and windows), and
// the power management and PCI Express capabilities, whose link registers
// say the speed and width the link trained to.
func configSpace(f *profile.PCIFunction, r *resources, l link, multifunction bool) []byte {
	c := config(make([]byte, configSize))
	c.w16(0x00, f.Vendor)
	c.w16(0x02, f.Device)
	c.w16(0x04, 0x0406) // memory space, bus master, INTx disabled
	c.w16(0x06, 0x0010) // capabilities list
	c.w32(0x08, f.Class<<8|uint32(f.Revision))
	hdr := uint8(0)
	if f.Role.IsBridge() {
		hdr = 1
	}
	if multifunction {
		hdr |= 0x80
	}
	c.w8(0x0e, hdr)
	c.w8(0x34, capPM)
	if f.Role.IsBridge() {
		bridgeHeader(c, f, r)
	} else {
		for i, b := range r.bars {
			if b.size == 0 {
				continue
			}
			flags := uint32(0)
			if b.prefetch {
				flags |= 0x8
			}
			if b.is64 {
				flags |= 0x4
			}
			c.w32(0x10+4*i, uint32(b.start)|flags)
			if b.is64 {
				c.w32(0x14+4*i, uint32(b.start>>32))
			}
		}
		c.w16(0x2c, f.SubsystemVendor)
		c.w16(0x2e, f.SubDevice)
		c.w8(0x3d, 1) // INTA
	}
	c.w8(0x3c, 0xff)

	// Power management: version 3, in D0.
	c.w8(capPM, 0x01)
	c.w8(capPM+1, capPCIe)
	c.w16(capPM+2, 0x0003)
	c.w16(capPM+4, 0x0008)

	// PCI Express, version 2.
	p := capPCIe
	c.w8(p, 0x10)
	flags := uint16(0x2)
	switch f.Role {
	case profile.RoleRootPort:
		flags |= typeRootPort << 4
	case profile.RoleSwitchUp:
		flags |= typeUpstream << 4
	case profile.RoleSwitchDown:
		flags |= typeDownstream << 4
	default:
		flags |= typeEndpoint << 4
	}
	c.w16(p+0x02, flags)
	c.w32(p+0x04, 0x00008fc1) // MaxPayload 256, unlimited L0s/L1 latency, role-based errors
	c.w16(p+0x08, 0x2030)     // MaxPayload 256, MaxReadReq 512, relaxed ordering
	linkCap := l.maxGen | l.maxWidth<<4
	if f.Role.IsBridge() { // a port's number; an endpoint's is 0 (review)
		linkCap |= uint32(f.Address.Device) << 24
	}
	linkSta := uint16(l.gen | l.width<<4)
	if f.Role == profile.RoleRootPort || f.Role == profile.RoleSwitchDown {
		linkCap |= 1 << 20 // data link layer active reporting
		linkSta |= 1 << 13 // data link layer active
	}
	c.w32(p+0x0c, linkCap)
	c.w16(p+0x10, 0x0040) // common clock
	c.w16(p+0x12, linkSta|1<<12)
	c.w32(p+0x2c, (1<<l.maxGen-1)<<1) // supported link speeds vector
	c.w16(p+0x30, uint16(l.maxGen))   // target link speed
	if l.gen >= 3 {
		// 8 GT/s and faster need equalization, which a trained link has done.
		c.w16(p+0x32, 0x1e) // equalization complete, phases 1 to 3
	}
	return c
}

// bridgeHeader fills a type 1 header: buses, and the memory windows that
// cover what is behind the bridge (base above limit: no window).
func bridgeHeader(c config, f *profile.PCIFunction, r *resources) {
	c.w8(0x18, uint8(f.Address.Bus))
	c.w8(0x19, uint8(f.Secondary))
	c.w8(0x1a, uint8(f.Subordinate))
	c.w8(0x1c, 0xf0) // no I/O window
	c.w8(0x1d, 0x00)
	if w := r.window32; w.size > 0 {
		c.w16(0x20, uint16(w.start>>16)&0xfff0)
		c.w16(0x22, uint16((w.start+w.size-1)>>16)&0xfff0)
	} else {
		c.w16(0x20, 0xfff0)
		c.w16(0x22, 0x0000)
	}
	if w := r.window64; w.size > 0 {
		end := w.start + w.size - 1
		c.w16(0x24, uint16(w.start>>16)&0xfff0|1)
		c.w16(0x26, uint16(end>>16)&0xfff0|1)
		c.w32(0x28, uint32(w.start>>32))
		c.w32(0x2c, uint32(end>>32))
	} else {
		c.w16(0x24, 0xfff1)
		c.w16(0x26, 0x0001)
	}
}
