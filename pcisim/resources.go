package pcisim

import (
	"fmt"
	"strings"

	"github.com/nvmock/nvmock/profile"
)

type bar struct {
	start, size    uint64
	prefetch, is64 bool
}

type window struct{ start, size uint64 }

// resources are a function's memory: its BARs, or a bridge's windows.
type resources struct {
	bars               [6]bar
	window32, window64 window
}

// Where the address allocator starts: 32-bit MMIO below 4 GiB as firmware
// places it, 64-bit prefetchable above 2 TiB. 32-bit MMIO ends where the
// IOAPIC's and the firmware's ranges start.
const (
	mmio32Base = 0x9000_0000
	mmio32End  = 0xfec0_0000
	mmio64Base = 0x200_0000_0000
	mib        = 1 << 20
)

type allocator struct{ next32, next64 uint64 }

// check says whether the 32-bit memory fits below mmio32End: a 32-bit BAR
// or bridge window decodes nothing above 4 GiB (review: an a100 node of
// more than 40 GPUs put NVSwitch BARs there).
func (a *allocator) check() error {
	if a.next32 > mmio32End {
		return fmt.Errorf("its 32-bit memory (GPUs' and NVSwitches' BAR0) needs %d MiB, more than the %d MiB below 4 GiB; give the node fewer GPUs",
			(a.next32-mmio32Base)/mib, (mmio32End-mmio32Base)/mib)
	}
	return nil
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }

func (a *allocator) bar(size uint64, is64, prefetch bool) bar {
	next := &a.next32
	if prefetch {
		next = &a.next64
	}
	start := alignUp(*next, size)
	*next = start + size
	return bar{start: start, size: size, prefetch: prefetch, is64: is64}
}

// barsOf sizes a function's BARs as its real counterpart has them.
func barsOf(f *profile.PCIFunction, n *profile.Node, a *allocator) [6]bar {
	var b [6]bar
	switch f.Role {
	case profile.RoleGPU:
		// BAR0 registers, BAR1 the framebuffer aperture, BAR3 the GPU's
		// own 32 MiB; BAR1 is the board's BAR1 size (a power of two), or
		// 256 MiB, the aperture without resizable BARs, where NVML has N/A.
		b[0] = a.bar(16*mib, false, false)
		bar1 := uint64(n.GPUs[f.Index].Board.BAR1.Total)
		if bar1 == 0 {
			bar1 = 256 * mib
		}
		b[1] = a.bar(bar1, true, true)
		b[3] = a.bar(32*mib, true, true)
	case profile.RoleNIC:
		b[0] = a.bar(32*mib, true, true)
	case profile.RoleNVSwitch:
		b[0] = a.bar(32*mib, false, false)
	}
	return b
}

// Resource flags as the kernel prints them in the resource file.
const (
	flagMem32       = 0x0004_0200 // IORESOURCE_MEM | SIZEALIGN
	flagMem64Pref   = 0x0014_220c // MEM | PREFETCH | MEM_64 | SIZEALIGN, BAR type bits
	flagWindow32    = 0x0000_0200
	flagWindow64Pre = 0x0010_2201
)

// resourceFile is the kernel's resource file: 13 lines for an endpoint
// (6 BARs, the ROM, 6 SR-IOV BARs), 17 for a bridge (its 4 windows after).
func resourceFile(f *profile.PCIFunction, r *resources) string {
	lines := 13
	if f.Role.IsBridge() {
		lines = 17
	}
	var b strings.Builder
	line := func(start, size, flags uint64) {
		if size == 0 {
			start, flags = 0, 0
		}
		end := uint64(0)
		if size > 0 {
			end = start + size - 1
		}
		fmt.Fprintf(&b, "0x%016x 0x%016x 0x%016x\n", start, end, flags)
	}
	for i := 0; i < lines; i++ {
		switch {
		case i < 6 && !f.Role.IsBridge():
			x := r.bars[i]
			flags := uint64(flagMem32)
			if x.prefetch {
				flags = flagMem64Pref
			}
			line(x.start, x.size, flags)
		case i == 14 && f.Role.IsBridge():
			line(r.window32.start, r.window32.size, flagWindow32)
		case i == 15 && f.Role.IsBridge():
			line(r.window64.start, r.window64.size, flagWindow64Pre)
		default:
			line(0, 0, 0)
		}
	}
	return b.String()
}
