package hostprep

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/profile"
)

// Fixed build stamps in the real driver's spelling, so that the tree (and
// its hash) depends only on its inputs.
const (
	procBuildDate = "Wed Jul 16 09:52:50 UTC 2025"
	procGCC       = "gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) "
	procBuilder   = "dvs-builder@U22-I3-B17-02-5"
)

// ProcVersion is /proc/driver/nvidia/version as the kernel module writes
// it (two spaces around the version; GCC line padded to line up with the
// NVRM one): the proprietary module's, or with open the open module's,
// which names itself so and its build. The architecture named is x86_64,
// the kernel's the mock runs on, even for a Grace tray, whose own line
// says aarch64.
func ProcVersion(driver string, open bool) string {
	if open {
		return fmt.Sprintf("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  (%s)  %s\nGCC version:  %s\n", driver, procBuilder, procBuildDate, procGCC)
	}
	return fmt.Sprintf("NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  %s\nGCC version:  %s\n", driver, procBuildDate, procGCC)
}

// OpenModules says whether a board runs NVIDIA's open kernel modules:
// Blackwell runs no other (NVIDIA: the proprietary modules do not support
// it); older boards keep the proprietary ones their captures came from.
func OpenModules(b *profile.Board) bool {
	return b.Architecture == "Blackwell"
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

// Majors the NVIDIA modules take from the kernel's dynamic range when they
// load (register_chrdev with 0: from 511 down once 254-234 are used). They
// differ from node to node (a GB200 NVL72 tray shows 497 nvidia-caps and 498
// nvidia-caps-imex-channels, an HGX node 510 nvidia-uvm); the overlay names
// 509 and 510, beside nvidia-uvm's 511 (DevNodes), which a node without
// NVIDIA's modules leaves free (Install checks).
const (
	capsMajor         = 509
	imexChannelsMajor = 510
)

// ProcDevices is /proc/devices as the kernel prints it ("%3d %s" per
// register_chrdev name) with NVIDIA's modules loaded, NVIDIA's lines only.
// NVIDIA's DRA driver reads the nvidia-caps and nvidia-caps-imex-channels
// majors from it (the compute-domain plugin: the IMEX channel and
// fabric-imex-mgmt device nodes it gives containers; given the overlay's
// file as ALT_PROC_DEVICES_PATH, its chart's altProcDevices).
func ProcDevices() string {
	return fmt.Sprintf("Character devices:\n%3d nvidia-frontend\n%3d nvidia-caps\n%3d nvidia-caps-imex-channels\n%3d nvidia-uvm\n\nBlock devices:\n",
		nvidiaMajor, capsMajor, imexChannelsMajor, uvmMajor)
}

// Minors of /dev/nvidia-caps/nvidia-cap<minor> (nv-caps.c): mig/config 1,
// mig/monitor 2, then one per GPU instance and compute instance of up to 32
// GPUs (32 x 15 x (1 + 8) = 4320: /proc/driver/nvidia-caps/mig-minors), then
// fabric-imex-mgmt, 4323 as on a real GB200 tray.
const (
	capMigConfigMinor  = 1
	capMigMonitorMinor = 2
	capFabricIMEXMinor = 4323
)

// ProcCapability is a file of /proc/driver/nvidia/capabilities: the minor of
// the capability's /dev/nvidia-caps node, its mode (decimal, as the module
// prints it), and whether the driver may create and fix the node
// (NVreg_ModifyDeviceFiles, 1 by default).
func ProcCapability(minor int, mode os.FileMode) string {
	return fmt.Sprintf("DeviceFileMinor: %d\nDeviceFileMode: %d\nDeviceFileModify: 1\n", minor, mode)
}

// checkMajors refuses a node where another driver holds a major the overlay
// names for nvidia-caps, the IMEX channels or nvidia-uvm: NVIDIA's DRA
// driver and nvidia-ctk make device nodes from these numbers in containers
// (and --real-device-numbers makes nvidia-uvm's), which would then open that
// driver's devices. No /proc/devices (a test's proc root): nothing is taken.
func checkMajors(procRoot string) error {
	if procRoot == "" {
		procRoot = "/proc"
	}
	p := filepath.Join(procRoot, "devices")
	data, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	chars := string(data)
	if i := strings.Index(chars, "Block devices:"); i >= 0 {
		chars = chars[:i]
	}
	for _, l := range strings.Split(chars, "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		names := map[int]string{capsMajor: "nvidia-caps", imexChannelsMajor: "nvidia-caps-imex-channels", uvmMajor: "nvidia-uvm"}
		// NVIDIA's own driver at its own major (a real node installed
		// with --force: nvidia-uvm at 511 most often) is no conflict.
		if n, err := strconv.Atoi(f[0]); err == nil && names[n] != "" && f[1] != names[n] {
			return fmt.Errorf("%s: major %d is %s's; the overlay names it for NVIDIA's %s, so containers would open %s's devices through nodes made from it", p, n, f[1], names[n], f[1])
		}
	}
	return nil
}
