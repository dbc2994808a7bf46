package profile

import (
	"fmt"
	"slices"
)

// validateChip checks the chip facts and the clock event reasons.
func (b *Board) validateChip(c *checker) {
	if b.BusType != "" {
		c.enum("board.busType", b.BusType, BusTypes)
	}
	if b.PowerSource != "" {
		c.enum("board.powerSource", b.PowerSource, PowerSources)
	}
	if b.EGM != "" {
		c.enum("board.egm", b.EGM, map[string]uint32{"Enabled": 1, "Disabled": 0})
	}
	if w := b.MemoryBusWidth; w != nil && (*w == 0 || *w > 16384) {
		c.fail("board.memoryBusWidth", "%d bits is out of range (1 to 16384)", *w)
	}
	if n := b.CUDACores; n != nil && (*n == 0 || *n > 1<<20) {
		c.fail("board.cudaCores", "%d is out of range (1 to %d)", *n, 1<<20)
	}
	for i, r := range b.ClockEventReasons {
		c.enum(fmt.Sprintf("board.clockEventReasons[%d]", i), r, ClockEventReasonBits)
		if slices.Contains(b.ClockEventReasons[:i], r) {
			c.fail(fmt.Sprintf("board.clockEventReasons[%d]", i), "%s is listed twice", r)
		}
	}
}

// validateFabricHealth checks the fabric's health fields.
func (f *Fabric) validateHealth(c *checker) {
	if f.HealthSummary != "" {
		c.enum("board.fabric.healthSummary", f.HealthSummary, FabricHealthSummaries)
	}
	if f.HealthMask > 0xffff {
		c.fail("board.fabric.healthMask", "0x%X has bits above NVML's 16", uint32(f.HealthMask))
	}
}

// ClockEventReasonMask is the board's supported reasons as NVML's bit mask.
func (b *Board) ClockEventReasonMask() uint32 {
	var m uint32
	for _, r := range b.ClockEventReasons {
		m |= ClockEventReasonBits[r]
	}
	return m
}

// validateNVSwitches checks the node's NVLink switches against the board.
func (p *Profile) validateNVSwitches(c *checker) {
	t := &p.Topology
	if len(t.NVSwitches) == 0 {
		if len(t.LinksPerSwitch) > 0 {
			c.fail("topology.linksPerSwitch", "is set but topology.nvswitches is empty")
		}
		return
	}
	nl := p.Board.NVLink
	if nl == nil || nl.Remote != "switch" {
		c.fail("topology.nvswitches", "the board's NVLinks do not reach switches (board.nvlink.remote is not \"switch\")")
		return
	}
	if p.PCIe == nil {
		c.fail("topology.nvswitches", "needs a pcie: tree placing them, with pcie.nvswitchDevice: NVML names each link's switch by its PCI address, which lspci must show; leave them out where the switches are not PCI devices of the node")
	}
	if len(t.NVSwitches) > int(nl.Links) {
		c.fail("topology.nvswitches", "%d switches for %d links per GPU; a switch takes at least one link", len(t.NVSwitches), nl.Links)
	}
	for i, s := range t.NVSwitches {
		a, err := ParsePCIAddress(s)
		if err != nil {
			c.fail(fmt.Sprintf("topology.nvswitches[%d]", i), "%v", err)
		} else if a.Domain > 0xffff {
			c.fail(fmt.Sprintf("topology.nvswitches[%d]", i), "%q: domains above ffff are not supported for switches", s)
		}
	}
	if len(t.LinksPerSwitch) > 0 {
		var sum uint32
		for _, n := range t.LinksPerSwitch {
			sum += n
		}
		if len(t.LinksPerSwitch) != len(t.NVSwitches) || sum != nl.Links {
			c.fail("topology.linksPerSwitch", "%v: need one count per switch (%d) adding up to board.nvlink.links (%d)", t.LinksPerSwitch, len(t.NVSwitches), nl.Links)
		}
	}
}

// LinkSwitches gives, for each of links NVLinks of a GPU, the index of the
// switch it reaches in NVSwitches, or nil where no switch is on the node.
func (t *Topology) LinkSwitches(links uint32) []int {
	n := uint32(len(t.NVSwitches))
	if n == 0 || links == 0 {
		return nil
	}
	per := t.LinksPerSwitch
	var sum uint32
	for _, k := range per {
		sum += k
	}
	if sum != links {
		// An even split, the first switches taking the remainder (also for
		// a GPU whose board override changed its link count).
		per = nil
		for i := uint32(0); i < n; i++ {
			k := links / n
			if i < links%n {
				k++
			}
			per = append(per, k)
		}
	}
	var out []int
	for sw, k := range per {
		for j := uint32(0); j < k; j++ {
			out = append(out, sw)
		}
	}
	return out
}
