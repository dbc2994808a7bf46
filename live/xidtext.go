package live

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// xidLevel is the printk level of the driver's lines: it gives none, so
// the kernel's default, warning, as real logs show them.
const xidLevel = 4

// xidTexts are the messages real drivers log after each XID's number, as
// captured kernel logs show them (docs/live-state.md); the
// numbers in them (channels, addresses, registers) are one capture's. An
// XID missing here is logged with an empty message: no real text of it
// was found, and none is made up.
var xidTexts = map[uint32]string{
	13:  "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Illegal Instruction Parameter",
	31:  "Ch 0000003b, intr 10000000. MMU Fault: ENGINE GRAPHICS HUBCLIENT_SCC faulted @ 0x0_04687000. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
	32:  "Channel ID 00000000 intr 00004000",
	43:  "Ch 00000018",
	45:  "Ch 00000001",
	48:  "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fdf0de80 partition 5, subpartition 1",
	62:  "00002740 00002b08 00001126 0000117a 0000279f 0002a91a 00000011 00000000",
	63:  "Row Remapper: New row marked for remapping, reset gpu to activate.",
	69:  "Class Error: ChId 003b, Class 0000c197, Offset 00002040, Data 00004b30, ErrorCode 0000000c",
	74:  "NVLink: fatal error detected on link %d(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
	79:  "GPU has fallen off the bus.",
	109: "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",
	119: "Timeout after 6s of waiting for RPC response from GPU%d GSP! Expected function 76 (GSP_RM_CONTROL) (0x90cc0301 0xc).",
	145: "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)",
	149: "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
	154: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
}

// channelXIDs are errors of a process's channel: the driver names the
// process that owns it.
var channelXIDs = map[uint32]bool{13: true, 31: true, 32: true, 43: true, 45: true, 68: true, 69: true, 109: true}

// XIDLine is the line the driver logs for an XID on a GPU. p is the
// process the XID is charged to, nil for none. Drivers before 570 name
// an unknown one; from 570 they leave pid and name out (the drivers'
// krcReportXid).
func XIDLine(d *snapshot.Device, driver string, r Reported, p *Process) string {
	var b strings.Builder
	fmt.Fprintf(&b, "NVRM: Xid (PCI:%04x:%02x:%02x", d.PCIDomain, d.PCIBus, d.PCIDevice)
	if p != nil && p.MIG != nil {
		// A MIG device's channel: its instances in the tag.
		fmt.Fprintf(&b, " GPU-I:%02d GPU-CI:%02d", p.MIG.GI, p.MIG.CI)
	}
	fmt.Fprintf(&b, "): %d, ", r.XID)
	switch {
	case p != nil:
		fmt.Fprintf(&b, "pid=%d, name=%s, ", p.PID, comm(p.Name))
	case driverMajor(driver) < 570:
		b.WriteString("pid='<unknown>', name=<unknown>, ")
	}
	switch t := xidTexts[r.XID]; r.XID {
	case 74:
		fmt.Fprintf(&b, t, r.Link)
	case 119:
		fmt.Fprintf(&b, t, r.GPU)
	default:
		b.WriteString(t)
	}
	return b.String()
}

// GPULines are what the driver logs of a GPU before its first XID since
// it was loaded: its UUID, and its serial number if it has one.
func GPULines(d *snapshot.Device) []string {
	out := []string{fmt.Sprintf("NVRM: GPU at PCI:%04x:%02x:%02x: %s", d.PCIDomain, d.PCIBus, d.PCIDevice, cstr(d.UUID[:]))}
	if s := cstr(d.Serial[:]); s != "" {
		out = append(out, "NVRM: GPU Board Serial Number: "+s)
	}
	return out
}

// AfterLines are what the driver logs after an XID's own line: a GPU
// fallen off the bus says so again, with its serial number if it has one
// (osinit.c, through NV_DEV_PRINTF's "GPU dddd:bb:dd.f: " prefix).
func AfterLines(d *snapshot.Device, xid uint32) []string {
	if xid != 79 {
		return nil
	}
	tag := fmt.Sprintf("NVRM: GPU %04x:%02x:%02x.0: ", d.PCIDomain, d.PCIBus, d.PCIDevice)
	out := []string{tag + "GPU has fallen off the bus."}
	if s := cstr(d.Serial[:]); s != "" {
		out = append(out, tag+"GPU serial number is "+s+".")
	}
	return out
}

// ChargedTo is the process an XID is charged to: for a channel error, the
// first process on the GPU (what the mock knows of channels); else none.
func ChargedTo(s *State, r Reported) *Process {
	if !channelXIDs[r.XID] {
		return nil
	}
	for _, p := range s.Processes() {
		if p.GPU == r.GPU {
			return &p
		}
	}
	return nil
}

// comm is a process name as the kernel keeps it: 15 bytes at most.
func comm(name string) string {
	name = path.Base(name)
	if name == "" || name == "." || name == "/" {
		return "<unknown>"
	}
	if len(name) > 15 {
		return name[:15]
	}
	return name
}

// driverMajor is the major number of a driver version such as 580.105.08;
// 0 when it has none.
func driverMajor(v string) int {
	n, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	return n
}
