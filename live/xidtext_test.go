package live

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// What the tools that read the kernel log match, as they publish them.
var (
	// gpud (components/accelerator/nvidia/xid/matcher.go).
	gpudXID    = regexp.MustCompile(`NVRM: Xid.*?: (\d+),`)
	gpudDevice = regexp.MustCompile(`NVRM: Xid \(((?:PCI:)?[0-9a-fA-F:]+)\)`)
	// NVSentinel's syslog monitor: an XID, the UUID line, NVLink 5 and
	// XID 74's link.
	sentinelXID   = regexp.MustCompile(`NVRM: Xid \(PCI:([0-9a-fA-F:]+)\): (\d+),?\s*(.*)`)
	sentinelUUID  = regexp.MustCompile(`NVRM: GPU at PCI:([0-9a-fA-F:.]+): (GPU-[0-9a-fA-F-]+)`)
	sentinelNVL5  = regexp.MustCompile(`NVRM: Xid \(PCI:([^)]+)\): (\d+)(?:, pid=[^,]*)?(?:, name=[^,]*)?, (\w+)\s+(\w+)\s+(\w+)\s+(\w+)\s+Link\s+(-?\d+)\s+\((0x[0-9a-fA-F]+)\s+(0x[0-9a-fA-F]+)`)
	sentinelLink  = regexp.MustCompile(`link\s+(\d+)\((0x[0-9a-fA-F]+),\s*(0x[0-9a-fA-F]+),\s*(0x[0-9a-fA-F]+),\s*(0x[0-9a-fA-F]+),\s*(0x[0-9a-fA-F]+),\s*(0x[0-9a-fA-F]+),\s*(0x[0-9a-fA-F]+)\)`)
	sentinelGPCSM = regexp.MustCompile(`\(GPC\s+(\d+),\s*TPC\s+(\d+),\s*SM\s+(\d+)\)`)
)

func xidDevice() *snapshot.Device {
	d := &snapshot.Device{PCIDomain: 0, PCIBus: 0xcb, PCIDevice: 0}
	copy(d.UUID[:], "GPU-6271c883-6ceb-c4ea-be14-5b03d88b5dc5")
	copy(d.Serial[:], "1650091303591")
	return d
}

func TestXIDLinesHaveTheDriversShape(t *testing.T) {
	d := xidDevice()
	for _, c := range []struct {
		driver string
		r      Reported
		p      *Process
		want   string
	}{
		{"580.105.08", Reported{XID: 79}, nil, "NVRM: Xid (PCI:0000:cb:00): 79, GPU has fallen off the bus."},
		{"535.261.03", Reported{XID: 79}, nil, "NVRM: Xid (PCI:0000:cb:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."},
		{"570.148.08", Reported{XID: 109}, &Process{PID: 1797828, Name: "/usr/bin/pt_main_thread"},
			"NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"},
		{"580.105.08", Reported{XID: 13}, &Process{PID: 7, Name: "a-name-longer-than-fifteen"},
			"NVRM: Xid (PCI:0000:cb:00): 13, pid=7, name=a-name-longer-t, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Illegal Instruction Parameter"},
		{"580.105.08", Reported{XID: 74, Link: 14}, nil,
			"NVRM: Xid (PCI:0000:cb:00): 74, NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"},
		{"580.105.08", Reported{XID: 119, GPU: 3}, nil,
			"NVRM: Xid (PCI:0000:cb:00): 119, Timeout after 6s of waiting for RPC response from GPU3 GSP! Expected function 76 (GSP_RM_CONTROL) (0x90cc0301 0xc)."},
		{"580.105.08", Reported{XID: 43}, &Process{PID: 9, Name: "python3", MIG: &MIGRef{GI: 1, CI: 0}},
			"NVRM: Xid (PCI:0000:cb:00 GPU-I:01 GPU-CI:00): 43, pid=9, name=python3, Ch 00000018"},
		// No real text of XID 64 was found: the number alone.
		{"580.105.08", Reported{XID: 64}, nil, "NVRM: Xid (PCI:0000:cb:00): 64, "},
	} {
		if got := XIDLine(d, c.driver, c.r, c.p); got != c.want {
			t.Errorf("driver %s, %+v:\n got %q\nwant %q", c.driver, c.r, got, c.want)
		}
	}
	if got, want := strings.Join(AfterLines(d, 79), "\n"), "NVRM: GPU 0000:cb:00.0: GPU has fallen off the bus.\n"+
		"NVRM: GPU 0000:cb:00.0: GPU serial number is 1650091303591."; got != want {
		t.Errorf("after XID 79:\n got %q\nwant %q", got, want)
	}
	if got := AfterLines(d, 48); got != nil {
		t.Errorf("after XID 48: %q, want nothing", got)
	}
	got := strings.Join(GPULines(d), "\n")
	if want := "NVRM: GPU at PCI:0000:cb:00: GPU-6271c883-6ceb-c4ea-be14-5b03d88b5dc5\nNVRM: GPU Board Serial Number: 1650091303591"; got != want {
		t.Errorf("GPU lines:\n got %q\nwant %q", got, want)
	}
	if m := sentinelUUID.FindStringSubmatch(got); m == nil || m[1] != "0000:cb:00" || m[2] != "GPU-6271c883-6ceb-c4ea-be14-5b03d88b5dc5" {
		t.Errorf("NVSentinel's UUID pattern reads %q from %q", m, got)
	}
}

// Every XID, on either side of 570, with and without a process, reads
// back as its number and device in the parsers' patterns.
func TestEveryXIDLineReadsBackInTheParsers(t *testing.T) {
	d := xidDevice()
	// (A MIG device's channel adds its instances to the tag, which gpud's
	// and NVSentinel's device patterns then miss, as on a real node.)
	for _, driver := range []string{"535.261.03", "580.105.08"} {
		for _, p := range []*Process{nil, {PID: 42, Name: "python3"}} {
			for x := uint32(1); x <= MaxXID; x++ {
				r := Reported{XID: x, Link: 2}
				line := XIDLine(d, driver, r, p)
				num := strconv.Itoa(int(x))
				if m := gpudXID.FindStringSubmatch(line); m == nil || m[1] != num {
					t.Fatalf("gpud reads XID %q from %q", m, line)
				}
				if m := gpudDevice.FindStringSubmatch(line); m == nil || m[1] != "PCI:0000:cb:00" {
					t.Fatalf("gpud reads device %q from %q", m, line)
				}
				if m := sentinelXID.FindStringSubmatch(line); m == nil || m[1] != "0000:cb:00" || m[2] != num {
					t.Fatalf("NVSentinel reads %q from %q", m, line)
				}
			}
		}
	}
	for x, re := range map[uint32]*regexp.Regexp{145: sentinelNVL5, 149: sentinelNVL5, 74: sentinelLink, 13: sentinelGPCSM} {
		if line := XIDLine(d, "580.105.08", Reported{XID: x, Link: 2}, nil); !re.MatchString(line) {
			t.Errorf("XID %d: NVSentinel's pattern %s does not read %q", x, re, line)
		}
	}
}

func TestChannelErrorsAreChargedToTheGPUsProcess(t *testing.T) {
	f := newState(t, 2)
	me := Process{PID: uint32(os.Getpid()), GPU: 0, Type: 1, Name: "worker"}
	update(t, f, func(s *State) error { return s.AddProcess(me, 1) })
	s := f.Read()
	for _, c := range []struct {
		r    Reported
		want uint32
	}{
		{Reported{GPU: 0, XID: 13}, me.PID},
		{Reported{GPU: 0, XID: 43}, me.PID},
		{Reported{GPU: 0, XID: 79}, 0}, // not a channel's
		{Reported{GPU: 1, XID: 13}, 0}, // nothing runs there
	} {
		var got uint32
		if p := ChargedTo(s, c.r); p != nil {
			got = p.PID
		}
		if got != c.want {
			t.Errorf("%+v charged to pid %d, want %d", c.r, got, c.want)
		}
	}
}
