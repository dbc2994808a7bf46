package hostprep

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/nvmock/nvmock/libnvml/profile"
	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// Fixed build stamps in the real driver's spelling, so that the tree (and
// its hash) depends only on its inputs.
const (
	procBuildDate = "Wed Jul 16 09:52:50 UTC 2025"
	procGCC       = "gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) "
)

// ProcVersion is /proc/driver/nvidia/version as the proprietary kernel
// module writes it (two spaces around the version; GCC line padded to line
// up with the NVRM one).
func ProcVersion(driver string) string {
	return fmt.Sprintf("NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  %s\nGCC version:  %s\n", driver, procBuildDate, procGCC)
}

// ProcBusID is the directory name under /proc/driver/nvidia/gpus: the
// kernel's lower-case "0000:07:00.0".
func ProcBusID(a profile.PCIAddress) string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", a.Domain, a.Bus, a.Device, a.Function)
}

// ProcInformation is /proc/driver/nvidia/gpus/<bus id>/information, in the
// kernel module's layout (nv-procfs.c: label, tabs, one space, value).
func ProcInformation(b *profile.Board, driver string, id snapshot.Identity, minor int) string {
	na := func(s string) string {
		if s == "" {
			return "N/A"
		}
		return s
	}
	a, _ := profile.ParsePCIAddress(id.BusID) // derived from a validated profile
	var s strings.Builder
	fmt.Fprintf(&s, "Model: \t\t %s\n", b.ProductName)
	fmt.Fprintf(&s, "IRQ:   \t\t %d\n", 0) // MSI-X: the legacy line is unused
	fmt.Fprintf(&s, "GPU UUID: \t %s\n", id.UUID)
	fmt.Fprintf(&s, "Video BIOS: \t %s\n", na(b.VBIOSVersion))
	fmt.Fprintf(&s, "Bus Type: \t PCIe\n")
	fmt.Fprintf(&s, "DMA Size: \t 47 bits\n")
	fmt.Fprintf(&s, "DMA Mask: \t 0x7fffffffffff\n")
	fmt.Fprintf(&s, "Bus Location: \t %s\n", ProcBusID(a))
	fmt.Fprintf(&s, "Device Minor: \t %d\n", minor)
	fmt.Fprintf(&s, "GPU Firmware: \t %s\n", na(b.GSPVersion(driver)))
	fmt.Fprintf(&s, "GPU Excluded:\t No\n")
	return s.String()
}

// Hash names an overlay by its inputs: 16 hex digits of SHA-256 over the
// length-prefixed parts.
func Hash(parts ...any) string {
	h := sha256.New()
	for _, p := range parts {
		var b []byte
		switch v := p.(type) {
		case []byte:
			b = v
		case string:
			b = []byte(v)
		default:
			b = []byte(fmt.Sprint(v))
		}
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
