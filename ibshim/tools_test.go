//go:build integration

package ibshim_test

// Debian's unmodified InfiniBand tools (infiniband-diags, ibverbs-utils)
// read the node's HCAs and the whole modelled fabric in nvmock exec: sysfs
// through mounts, MADs through the umad shim and the fabric daemon, verbs
// through the provider. Expected values come from the same fabric model,
// built here.

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// node runs script in nvmock exec on an h100 node and returns its output.
func node(t *testing.T, script string) string {
	t.Helper()
	return nodeOf(t, "h100", script)
}

// nodeOf runs script in nvmock exec on a node of the built-in profile prof.
func nodeOf(t *testing.T, prof, script string, execArgs ...string) string {
	t.Helper()
	bin := builtNvmock(t)
	for _, tool := range []string{"ibstat", "ibnetdiscover", "ibv_devinfo"} {
		testenv.Tool(t, tool)
	}
	args := append([]string{"exec", "--profile", prof, "--assets", filepath.Join(testenv.BuildDir(), "driver")}, execArgs...)
	cmd := exec.Command(bin, append(args, "--", "sh", "-c", script)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nvmock exec: %v\n%s", err, out)
	}
	return string(out)
}

// model is the fabric the exec'd node is in: named after this host, at
// the slot its name hashes to.
func model(t *testing.T) *fabric.Fabric {
	t.Helper()
	return modelOf(t, "h100")
}

func modelOf(t *testing.T, prof string) *fabric.Fabric {
	t.Helper()
	host, _ := os.Hostname()
	f, err := fabric.Build(testenv.Node(t, prof, 8), host, -1)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// field is the value after "name:" (and the dots smpquery pads with) on
// its line of out.
func field(t *testing.T, out, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `:\.*\s*(.*)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q in:\n%s", name, out)
	}
	return strings.TrimSpace(m[1])
}

func TestIbstatAndIbstatusShowTheHCAs(t *testing.T) {
	f := model(t)
	ca := f.Find("mlx5_0")
	out := node(t, "ibstat -l; echo ==; ibstat mlx5_0; echo ==; ibstat mlx5_2; echo ==; ibstatus mlx5_0; echo ==; cat /sys/class/infiniband/mlx5_2/node_desc")
	parts := strings.Split(out, "==\n")
	if len(parts) != 5 {
		t.Fatalf("output:\n%s", out)
	}
	if got := strings.Fields(parts[0]); len(got) != 12 || !strings.Contains(parts[0], "mlx5_11\n") {
		t.Errorf("ibstat -l = %v, want the 12 RDMA devices mlx5_0..mlx5_11", got)
	}
	for name, want := range map[string]string{
		"CA type": "MT4129", "Firmware version": "28.39.2048", "Node GUID": fmt.Sprintf("0x%016x", ca.GUID),
		"Rate": "400", "Base lid": strconv.Itoa(int(ca.Ports[1].LID)), "SM lid": "1", "State": "Active",
		"Physical state": "LinkUp", "Link layer": "InfiniBand",
	} {
		if got := field(t, parts[1], name); got != want {
			t.Errorf("ibstat mlx5_0: %s = %q, want %q", name, got, want)
		}
	}
	if got := field(t, parts[2], "Link layer"); got != "Ethernet" {
		t.Errorf("ibstat mlx5_2 (the storage card's Ethernet port): link layer %q", got)
	}
	// mlx5_2 is port 2 of mlx5_1's card.
	card := f.Find("mlx5_1")
	if got := field(t, parts[2], "System image GUID"); got != fmt.Sprintf("0x%016x", card.SysGUID) {
		t.Errorf("ibstat mlx5_2: system image GUID %s, want its card's (mlx5_1's) %#016x", got, card.SysGUID)
	}
	if got := field(t, parts[2], "Node GUID"); got != fmt.Sprintf("0x%016x", card.GUID+1) {
		t.Errorf("ibstat mlx5_2: node GUID %s, want port 1's plus one, %#016x", got, card.GUID+1)
	}
	if got := field(t, parts[3], "rate"); got != "400 Gb/sec (4X NDR)" {
		t.Errorf("ibstatus: rate %q", got)
	}
	// rdma-ndd names every RDMA device after its host, RoCE ones too.
	if host, _ := os.Hostname(); parts[4] != host+" mlx5_2\n" {
		t.Errorf("mlx5_2's node_desc %q, want %q", parts[4], host+" mlx5_2")
	}
}

func TestVerbsToolsOpenEveryHCA(t *testing.T) {
	f := model(t)
	ca := f.Find("mlx5_0")
	out := node(t, "ibv_devices; echo ==; ibv_devinfo -v -d mlx5_0")
	parts := strings.Split(out, "==\n")
	guid := fmt.Sprintf("%016x", ca.GUID)
	if !strings.Contains(parts[0], guid) || strings.Count(parts[0], "mlx5_") != 12 {
		t.Errorf("ibv_devices lists:\n%s\nwant 12 devices, mlx5_0 with %s", parts[0], guid)
	}
	v := parts[1]
	for name, want := range map[string]string{
		"fw_ver": "28.39.2048", "vendor_part_id": "4129", "board_id": "MT_0000000838",
		"port_lid": strconv.Itoa(int(ca.Ports[1].LID)), "sm_lid": "1", "link_layer": "InfiniBand",
		"active_width": "4X (2)", "active_speed": "100.0 Gbps (128)", "state": "PORT_ACTIVE (4)",
	} {
		if got := field(t, v, name); got != want {
			t.Errorf("ibv_devinfo -v: %s = %q, want %q", name, got, want)
		}
	}
	gid := fmt.Sprintf("fe80:0000:0000:0000:%s:%s:%s:%s", guid[0:4], guid[4:8], guid[8:12], guid[12:16])
	if !strings.Contains(v, gid) {
		t.Errorf("ibv_devinfo -v has no GID[0] %s", gid)
	}
}

// A directed route that starts at a switch reached by its LID (iblinkinfo
// -S GUID) walks from that switch: its ports show the hosts cabled to them
// (QA: the walk began at the asking port, so leaf02 showed a made-up cable
// to leaf01 and its other ports timed out).
func TestAMixedRouteStartsAtTheLIDItWasSentTo(t *testing.T) {
	out := node(t, `G=$(ibswitches -C mlx5_0 | grep leaf02 | awk '{print $3}'); iblinkinfo -t 500 -C mlx5_0 -S $G`)
	// 64 ports, and the port after them to the switch's Aggregation Node.
	if n := strings.Count(out, `LinkUp)==>`); n != 65 || strings.Contains(out, "Port not available") || !strings.Contains(out, ` mlx5_3"`) {
		t.Errorf("iblinkinfo -S leaf02 shows %d active links, want its 64 ports and its aggregation node's, the hosts' mlx5_3 among them:\n%.3000s", n, out)
	}
	if strings.Contains(out, "leaf01") {
		t.Errorf("iblinkinfo -S leaf02 shows a cable to another leaf:\n%.3000s", out)
	}
}

func TestDiscoveryFindsTheWholeModelledFabric(t *testing.T) {
	f := model(t)
	out := node(t, "ibnetdiscover -C mlx5_0; echo ==; ibswitches -C mlx5_0 | wc -l; ibhosts -C mlx5_0 | wc -l; echo ==; ibnetdiscover -C mlx5_1 | grep -c '^Ca'; echo ==; iblinkinfo -C mlx5_0")
	parts := strings.Split(out, "==\n")
	compute := f.Subnets[0]
	var switches, cas int
	for _, nd := range compute.Nodes {
		if nd.Type == fabric.Switch {
			switches++
		} else {
			cas++
		}
		if !strings.Contains(parts[0], fmt.Sprintf("%q", nd.Desc)) {
			t.Errorf("ibnetdiscover does not show %q", nd.Desc)
		}
	}
	if got := strings.Fields(parts[1]); len(got) != 2 || got[0] != strconv.Itoa(switches) || got[1] != strconv.Itoa(cas) {
		t.Errorf("ibswitches, ibhosts count %v, want %d and %d", got, switches, cas)
	}
	if got := strings.TrimSpace(parts[2]); got != "67" {
		t.Errorf("the storage fabric has %s CAs, want 67 (2 rails of 32 nodes, and its 3 switches' Aggregation Nodes)", got)
	}
	if n := strings.Count(parts[3], "4X        106.25 Gbps Active/  LinkUp"); n < cas {
		t.Errorf("iblinkinfo shows %d active 4X NDR links, want at least %d:\n%.2000s", n, cas, parts[3])
	}
}

func TestQueriesReachSwitchesAndTheSM(t *testing.T) {
	f := model(t)
	s := f.Subnets[0]
	ca := f.Find("mlx5_0")
	leaf := ca.Ports[1].Peer.Node
	script := fmt.Sprintf("smpquery -C mlx5_0 nodedesc %d; echo ==; smpquery -C mlx5_0 -D nodeinfo 0,1; echo ==; ibroute -C mlx5_0 %d; echo ==; sminfo -C mlx5_0; echo ==; saquery -C mlx5_0 | grep -c NodeRecord; saquery -C mlx5_0 -p --src-to-dst %d:%d",
		leaf.Ports[0].LID, leaf.Ports[0].LID, ca.Ports[1].LID, s.Nodes[len(s.Nodes)-1].Ports[1].LID)
	parts := strings.Split(node(t, script), "==\n")
	if !strings.Contains(parts[0], leaf.Desc) {
		t.Errorf("smpquery nodedesc: %q, want %q", parts[0], leaf.Desc)
	}
	if got := field(t, parts[1], "LocalPort"); got != strconv.Itoa(ca.Ports[1].Peer.Num) {
		t.Errorf("the leaf says the SMP came in on port %s, want %d (the node's slot + 1)", got, ca.Ports[1].Peer.Num)
	}
	// The leaf forwards this node's LID down to it.
	route := regexp.MustCompile(fmt.Sprintf(`(?m)^0x%04x (\d+) :`, ca.Ports[1].LID)).FindStringSubmatch(parts[2])
	if route == nil || route[1] != fmt.Sprintf("%03d", ca.Ports[1].Peer.Num) {
		t.Errorf("ibroute of the leaf routes LID %d by %v, want port %d:\n%.1500s", ca.Ports[1].LID, route, ca.Ports[1].Peer.Num, parts[2])
	}
	want := fmt.Sprintf("sm lid 1 sm guid 0x%016x", s.SM.Node.GUID)
	if !strings.Contains(parts[3], want) || !strings.Contains(parts[3], "SMINFO_MASTER") {
		t.Errorf("sminfo: %q, want %q, master", parts[3], want)
	}
	if n := strings.Fields(parts[4])[0]; n != strconv.Itoa(len(s.Nodes)) {
		t.Errorf("saquery lists %s NodeRecords, want %d", n, len(s.Nodes))
	}
	if !strings.Contains(parts[4], "rate....................0x95") || !strings.Contains(parts[4], "mtu.....................0x85") {
		t.Errorf("saquery path record: want exactly 400 Gb/s and 4096 MTU:\n%s", parts[4])
	}
}

func TestPerfqueryCountsTheMADsThatCrossedThePort(t *testing.T) {
	out := node(t, "perfquery -C mlx5_0; echo ==; ibnetdiscover -C mlx5_0 >/dev/null; perfquery -C mlx5_0 -x; echo ==; perfquery -C mlx5_0 -r >/dev/null; perfquery -C mlx5_0")
	parts := strings.Split(out, "==\n")
	before, _ := strconv.Atoi(field(t, parts[0], "PortXmitPkts"))
	after, _ := strconv.Atoi(field(t, parts[1], "PortXmitPkts"))
	if before < 1 || after < before+100 {
		t.Errorf("PortXmitPkts %d, then %d after ibnetdiscover: want its hundreds of SMPs counted", before, after)
	}
	// After the reset only the queries since count: a few MADs.
	if reset, _ := strconv.Atoi(field(t, parts[2], "PortXmitPkts")); reset >= after || reset > 8 {
		t.Errorf("after perfquery -r: PortXmitPkts %d (before the reset %d), want only the few queries since", reset, after)
	}
}

func TestIbpingReachesModelledNodesAndOtherPrograms(t *testing.T) {
	f := model(t)
	ca := f.Find("mlx5_0")
	var other *fabric.Node
	for _, nd := range f.Subnets[0].Nodes {
		if nd.Type == fabric.CA && nd.Slot != f.Local {
			other = nd
			break
		}
	}
	host, _ := os.Hostname()
	script := fmt.Sprintf(`ibping -C mlx5_0 -c 2 %d; echo ==
ibping -C mlx5_0 -S & srv=$!; sleep 0.5; ibping -C mlx5_0 -c 2 %d; kill $srv; echo ==
ibping -C mlx5_0 -c 1 -t 200 1 || true`, other.Ports[1].LID, ca.Ports[1].LID)
	parts := strings.Split(node(t, script), "==\n")
	if want := fmt.Sprintf("--- %s.(none) (Lid %d) ibping statistics ---", f.Hosts[other.Slot], other.Ports[1].LID); !strings.Contains(parts[0], want) || !strings.Contains(parts[0], " 0% packet loss") {
		t.Errorf("ibping to a modelled node:\n%s\nwant %q and no loss", parts[0], want)
	}
	if want := fmt.Sprintf("Pong from %s.", host); !strings.Contains(parts[1], want) || !strings.Contains(parts[1], " 0% packet loss") {
		t.Errorf("ibping to ibping -S on this node:\n%s\nwant %q and no loss", parts[1], want)
	}
	if !strings.Contains(parts[2], "100% packet loss") {
		t.Errorf("ibping to a switch, which runs no ibping server:\n%s\nwant a timeout", parts[2])
	}
}

// nvidia-smi finds the NICs through hwloc's OpenFabrics devices, as on a
// real node: all twelve of a DGX H100, storage and Ethernet ports too.
func TestNvidiaSMITopoListsTheNICs(t *testing.T) {
	out := node(t, "nvidia-smi topo -m")
	for i := 0; i < 12; i++ {
		if want := fmt.Sprintf("NIC%d: mlx5_%d\n", i, i); !strings.Contains(out, want) {
			t.Errorf("nvidia-smi topo -m has no %q in its NIC legend:\n%s", strings.TrimSpace(want), out)
		}
	}
}

// A DGX B200 has two kinds of HCA: ConnectX-7 for compute and dual-port
// BlueField-3 for storage (port 1 InfiniBand, port 2 Ethernet). Each
// reports its own part, firmware, PSID, PCI revision and port capability
// mask (the BlueField-3's with IsSMDisabled), as the real ones do, in
// sysfs, the verbs provider and PortInfo; topo -m lists all twelve.
func TestB200HasConnectX7AndBlueField3(t *testing.T) {
	f := modelOf(t, "b200")
	bf := f.Find("mlx5_8")
	var other *fabric.Node // another node's BlueField-3, in the storage subnet
	for _, nd := range bf.Subnet.Nodes {
		if nd.HCA == "mlx5_8" && nd.Slot != f.Local {
			other = nd
			break
		}
	}
	out := nodeOf(t, "b200", fmt.Sprintf(`ibstat mlx5_0; echo ==; ibstat mlx5_8; echo ==; ibstat mlx5_9; echo ==; ibv_devinfo -v -d mlx5_8; echo ==
ibnetdiscover -C mlx5_8 | grep -c '^Ca'; echo ==; nvidia-smi topo -m; echo ==; smpquery -C mlx5_8 portinfo %d 1`, other.Ports[1].LID))
	parts := strings.Split(out, "==\n")
	if len(parts) != 7 {
		t.Fatalf("output:\n%s", out)
	}
	for i, want := range []map[string]string{
		{"CA type": "MT4129", "Firmware version": "28.43.3608", "Hardware version": "0", "Rate": "400", "Link layer": "InfiniBand",
			"Capability mask": "0xa651e848"},
		{"CA type": "MT41692", "Firmware version": "32.47.1088", "Hardware version": "1", "Rate": "400", "Link layer": "InfiniBand",
			"Node GUID": fmt.Sprintf("0x%016x", bf.GUID), "Base lid": strconv.Itoa(int(bf.Ports[1].LID)), "Capability mask": "0xa751ec48"},
		{"CA type": "MT41692", "Link layer": "Ethernet", "System image GUID": fmt.Sprintf("0x%016x", bf.SysGUID)},
		{"vendor_part_id": "41692", "hw_ver": "0x1", "board_id": "MT_0000000965", "fw_ver": "32.47.1088", "port_cap_flags": "0xa751ec48",
			"device_cap_flags": "0x21361c36", "max_qp_rd_atom": "16", "atomic_cap": "ATOMIC_HCA (1)", "device_cap_flags_ex": "0x3000005021361C36"},
	} {
		for name, w := range want {
			if got := field(t, parts[i], name); got != w {
				t.Errorf("part %d: %s = %q, want %q\n%s", i, name, got, w, parts[i])
			}
		}
	}
	var cas int
	for _, nd := range f.Subnets[1].Nodes {
		if nd.Type != fabric.Switch {
			cas++
		}
	}
	if got := strings.TrimSpace(parts[4]); got != strconv.Itoa(cas) {
		t.Errorf("ibnetdiscover on the storage fabric finds %s CAs, want the model's %d", got, cas)
	}
	for i := 0; i < 12; i++ {
		if want := fmt.Sprintf("NIC%d: mlx5_%d\n", i, i); !strings.Contains(parts[5], want) {
			t.Errorf("nvidia-smi topo -m has no %q in its NIC legend:\n%s", strings.TrimSpace(want), parts[5])
		}
	}
	if !strings.Contains(parts[6], "CapMask:.........................0xa751ec48") || !strings.Contains(parts[6], "IsSMdisabled") {
		t.Errorf("smpquery portinfo of %s's port:\n%s\nwant CapMask 0xa751ec48 with IsSMdisabled", other.Desc, parts[6])
	}
}

// A port with its cable out and one with error counts show as on a real
// node: sysfs (ibstat, the verbs provider) and the fabric (iblinkinfo,
// discovery, the SM) agree that the link is down, and the PMA's error
// counters read what was set until perfquery resets them.
func TestPortFaultsShowInEveryPlane(t *testing.T) {
	f := model(t)
	var cas int
	for _, nd := range f.Subnets[0].Nodes {
		if nd.Type == fabric.CA {
			cas++
		}
	}
	out := nodeOf(t, "h100", `ibstat mlx5_3; echo ==; ibv_devinfo -d mlx5_3; echo ==
cat /sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error /sys/class/infiniband/mlx5_0/ports/1/counters/link_downed; echo ==
perfquery -C mlx5_0; echo ==; perfquery -C mlx5_0 -R; perfquery -C mlx5_0; echo ==
iblinkinfo -C mlx5_0 | grep -c 'Down/ Polling'; echo ==
ibnetdiscover -C mlx5_0 | grep -c '^Ca'; echo ==
sminfo -C mlx5_3 >/dev/null 2>&1; echo $?`,
		"--ib-fault", "mlx5_3=down", "--ib-fault", "mlx5_0=symbol_error:12,link_downed:1")
	parts := strings.Split(out, "==\n")
	if len(parts) != 8 {
		t.Fatalf("output:\n%s", out)
	}
	for name, want := range map[string]string{"State": "Down", "Physical state": "Polling", "Rate": "10", "Base lid": "65535", "SM lid": "0"} {
		if got := field(t, parts[0], name); got != want {
			t.Errorf("ibstat mlx5_3 (cable out): %s = %q, want %q", name, got, want)
		}
	}
	for name, want := range map[string]string{"state": "PORT_DOWN (1)", "port_lid": "65535", "sm_lid": "0"} {
		if got := field(t, parts[1], name); got != want {
			t.Errorf("ibv_devinfo mlx5_3: %s = %q, want %q", name, got, want)
		}
	}
	if got := strings.Fields(parts[2]); !slices.Equal(got, []string{"12", "1"}) {
		t.Errorf("sysfs counters symbol_error, link_downed of mlx5_0: %v, want 12 and 1", got)
	}
	if a, b := field(t, parts[3], "SymbolErrorCounter"), field(t, parts[3], "LinkDownedCounter"); a != "12" || b != "1" {
		t.Errorf("perfquery mlx5_0: SymbolErrorCounter %s, LinkDownedCounter %s; want 12 and 1", a, b)
	}
	if a := field(t, parts[4], "SymbolErrorCounter"); a != "0" {
		t.Errorf("perfquery after perfquery -R: SymbolErrorCounter %s, want 0", a)
	}
	if got := strings.TrimSpace(parts[5]); got != "1" {
		t.Errorf("iblinkinfo shows %s links Down/Polling, want 1 (the leaf's port to mlx5_3)", got)
	}
	if got := strings.TrimSpace(parts[6]); got != strconv.Itoa(cas-1) {
		t.Errorf("ibnetdiscover finds %s CAs, want the fabric's %d but mlx5_3", got, cas-1)
	}
	if got := strings.TrimSpace(parts[7]); got == "0" {
		t.Error("sminfo through the down port found an SM")
	}
}

// A GB200 tray's four ConnectX-7 are its compute HCAs, cabled into a
// rack's fabric; its BlueField-3s are Ethernet, in none.
func TestGB200TrayHasFourComputeHCAs(t *testing.T) {
	f := modelOf(t, "gb200")
	var cas, hosts int
	for _, nd := range f.Subnets[0].Nodes {
		if nd.Type == fabric.CA {
			cas++
			if nd.Slot >= 0 {
				hosts++
			}
		}
	}
	out := nodeOf(t, "gb200", "ibstat -l | wc -l; echo ==; ibstat mlx5_0; echo ==; ibstat mlx5_2; echo ==; ibhosts | wc -l; echo ==; nvidia-smi topo -m")
	parts := strings.Split(out, "==\n")
	if len(parts) != 5 {
		t.Fatalf("output:\n%s", out)
	}
	if got := strings.TrimSpace(parts[0]); got != "8" {
		t.Errorf("ibstat -l lists %s devices, want 8 (4 ConnectX-7, 4 BlueField-3 functions)", got)
	}
	if a, b := field(t, parts[1], "CA type"), field(t, parts[1], "Link layer"); a != "MT4129" || b != "InfiniBand" {
		t.Errorf("mlx5_0: %s, %s; want MT4129 on InfiniBand", a, b)
	}
	if a, b := field(t, parts[2], "CA type"), field(t, parts[2], "Link layer"); a != "MT41692" || b != "Ethernet" {
		t.Errorf("mlx5_2: %s, %s; want MT41692 on Ethernet", a, b)
	}
	if got := strings.TrimSpace(parts[3]); got != strconv.Itoa(cas) || hosts != 18*4 {
		t.Errorf("ibhosts lists %s CAs; the model has %d, %d of them trays', want 18 trays x 4", got, cas, hosts)
	}
	if !strings.Contains(parts[4], "NIC7: mlx5_7\n") {
		t.Errorf("nvidia-smi topo -m lists no NIC7:\n%s", parts[4])
	}
}

// On a Quantum (HDR) fabric every switch lists 41 ports and on a
// Quantum-2 (NDR) one 65, the last its SHARP Aggregation Node, which
// ibhosts and iblinkinfo show as real ones do and which runs no ibping
// server.
func TestQuantumAggregationNodesShowInTheTools(t *testing.T) {
	for _, tc := range []struct {
		profile, rate string
		port          int
	}{{"a100", "53.125", 41}, {"h100", "106.25", 65}} {
		t.Run(tc.profile, func(t *testing.T) { checkAggregationNodesInTheTools(t, tc.profile, tc.rate, tc.port) })
	}
}

func checkAggregationNodesInTheTools(t *testing.T, name, rate string, port int) {
	f := modelOf(t, name)
	var switches int
	var an *fabric.Node
	for _, nd := range f.Subnets[0].Nodes {
		if nd.Type == fabric.Switch {
			switches++
		} else if nd.Slot < 0 && an == nil {
			an = nd
		}
	}
	lid := an.Ports[1].LID
	out := nodeOf(t, name, fmt.Sprintf(`ibswitches -C mlx5_0 | grep -c 'ports %d '; echo ==
ibhosts -C mlx5_0 | grep -c '"Mellanox Technologies Aggregation Node"'; echo ==
iblinkinfo -C mlx5_0 | grep -c ' %d\[  \] ==( 4X        %s Gbps Active/  LinkUp)==> .*"Mellanox Technologies Aggregation Node"'; echo ==
smpquery -C mlx5_0 nodeinfo %d; echo ==
ibping -C mlx5_0 -c 1 -t 200 %d`, port, port, rate, lid, lid))
	parts := strings.Split(out, "==\n")
	if len(parts) != 5 {
		t.Fatalf("output:\n%s", out)
	}
	for i, what := range []string{fmt.Sprintf("ibswitches lines with %d ports", port), "ibhosts' Aggregation Nodes", fmt.Sprintf("iblinkinfo's port-%d links to them", port)} {
		if got := strings.TrimSpace(parts[i]); got != strconv.Itoa(switches) {
			t.Errorf("%s: %s, want one per switch, %d", what, got, switches)
		}
	}
	if got := field(t, parts[3], "DevId"); got != "0xcf09" {
		t.Errorf("smpquery nodeinfo of an Aggregation Node: DevId %s, want 0xcf09", got)
	}
	if !strings.Contains(parts[4], "100% packet loss") {
		t.Errorf("ibping to an Aggregation Node:\n%s\nwant a timeout", parts[4])
	}
}

// A port's sysfs traffic counters are its PMA's, as on a real HCA, where
// node exporters read them: they move with the MADs perfquery counts, 64
// words a MAD, a fault set later leaves them alone, and perfquery -R
// resets them, with the error counters, until ctl ib sets faults again.
func TestSysfsTrafficCountersFollowThePMA(t *testing.T) {
	bin := builtNvmock(t)
	out := nodeOf(t, "h100", fmt.Sprintf(`c=/sys/class/infiniband/mlx5_0/ports/1/counters
# The daemon shows them within 200 ms; a busy machine may take longer.
show() { for i in $(seq 100); do [ "$(cat $c/port_xmit_packets)" != "$1" ] && break; sleep 0.05; done
	sleep 0.3; cat $c/port_xmit_packets $c/port_rcv_packets $c/port_xmit_data $c/unicast_xmit_packets; }
cat $c/port_xmit_packets; echo ==
perfquery -C mlx5_0 >/dev/null; perfquery -C mlx5_0 >/dev/null; show 0; echo ==
perfquery -C mlx5_0 | grep -E 'PortXmitPkts|PortRcvPkts'; echo ==
ctl() { %s ctl "$@"; }
ctl ib errors mlx5_0 symbol_error:3; cat $c/symbol_error; sleep 0.3; cat $c/port_xmit_packets; echo ==
perfquery -C mlx5_0 -R; show "$(cat $c/port_xmit_packets)"; cat $c/symbol_error; echo ==
ctl ib errors mlx5_0 symbol_error:4; cat $c/symbol_error; perfquery -C mlx5_0 | grep SymbolErrorCounter`, bin))
	parts := strings.Split(out, "==\n")
	if len(parts) != 6 {
		t.Fatalf("output:\n%s", out)
	}
	num := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%q: %v\n%s", s, err, out)
		}
		return v
	}
	if got := strings.TrimSpace(parts[0]); got != "0" {
		t.Errorf("port_xmit_packets before any MAD: %s, want 0", got)
	}
	moved := strings.Fields(parts[1])
	if len(moved) != 4 {
		t.Fatalf("sysfs counters after two perfquery:\n%s", parts[1])
	}
	xmit, rcv, data, unicast := num(moved[0]), num(moved[1]), num(moved[2]), num(moved[3])
	if xmit == 0 || rcv == 0 || data != 64*xmit || unicast != xmit {
		t.Errorf("sysfs after two perfquery: xmit %d, rcv %d packets, %d words, unicast %d; want them moved, 64 words a packet", xmit, rcv, data, unicast)
	}
	// perfquery's own MADs come after what sysfs showed.
	if p := num(field(t, parts[2], "PortXmitPkts")); p < xmit {
		t.Errorf("perfquery's PortXmitPkts %d, less than sysfs showed before (%d)", p, xmit)
	}
	if ctl := strings.Fields(parts[3]); len(ctl) != 2 || ctl[0] != "3" || num(ctl[1]) < xmit {
		t.Errorf("after ctl ib errors: symbol_error and port_xmit_packets %v, want 3 and at least %d packets", ctl, xmit)
	}
	if after := strings.Fields(parts[4]); len(after) != 5 || num(after[0]) >= xmit || after[4] != "0" {
		t.Errorf("sysfs after perfquery -R:\n%s\nwant fewer than %d packets, and symbol_error 0 as the PMA reads it", parts[4], xmit)
	}
	if !strings.HasPrefix(parts[5], "4\n") || !strings.Contains(parts[5], "SymbolErrorCounter:..............4") {
		t.Errorf("ctl ib errors after the reset: sysfs and perfquery\n%s\nwant 4 in both", parts[5])
	}
}

// A standalone nvmock ibd given the node's live state follows ctl ib as
// the plugin's daemon does; one without it keeps its own faults.
func TestAStandaloneDaemonFollowsTheNodesFaultsWithState(t *testing.T) {
	bin := builtNvmock(t)
	out := nodeOf(t, "h100", fmt.Sprintf(`T=$(mktemp -d)
%[1]s ibd --socket $T/a.sock --state %[2]s 2>/dev/null & a=$!
%[1]s ibd --profile h100 --socket $T/b.sock 2>/dev/null & b=$!
for i in $(seq 100); do [ -S $T/a.sock ] && [ -S $T/b.sock ] && break; sleep 0.05; done
%[1]s ctl ib errors mlx5_0 symbol_error:7
for s in a b; do NVMOCK_IBD=$T/$s.sock perfquery -C mlx5_0 | grep SymbolErrorCounter; done
kill $a $b; wait`, bin, live.ExecState))
	want := "SymbolErrorCounter:..............7\nSymbolErrorCounter:..............0\n"
	if !strings.HasSuffix(out, want) {
		t.Errorf("perfquery through a daemon with --state, then one without:\n%s\nwant 7, then 0", out)
	}
}

// nvmock ctl ib changes a running node's ports: ibstat, iblinkinfo and
// perfquery in the same namespace follow each change, and up restores the
// port's LID; ctl ib lists what is set.
func TestCtlIBChangesPortsWhileProgramsRun(t *testing.T) {
	lid := model(t).Find("mlx5_3").Ports[1].LID
	bin := builtNvmock(t)
	out := nodeOf(t, "h100", fmt.Sprintf(`ctl() { %s ctl "$@"; }
ctl ib down mlx5_3 && ibstat mlx5_3 | grep -E 'State:|Base lid'; iblinkinfo -C mlx5_0 | grep -c 'Down/ Polling'; echo ==
perfquery -C mlx5_0 -G %#x 2>&1 | grep -c 'LinkDownedCounter'; echo ==
ctl ib up mlx5_3 && ibstat mlx5_3 | grep -E 'State:|Base lid'; iblinkinfo -C mlx5_0 | grep -c 'Down/ Polling'; echo ==
ctl ib errors mlx5_0 symbol_error:9 && perfquery -C mlx5_0 | grep SymbolErrorCounter; cat /sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error; echo ==
ctl ib; ctl status | grep InfiniBand; echo ==
ctl ib clear && ctl ib`, bin, model(t).Find("mlx5_3").GUID))
	parts := strings.Split(out, "==\n")
	if len(parts) != 6 {
		t.Fatalf("output:\n%s", out)
	}
	if !strings.Contains(parts[0], "State: Down") || !strings.Contains(parts[0], "Base lid: 65535") || !strings.HasSuffix(parts[0], "\n1\n") {
		t.Errorf("after ctl ib down mlx5_3:\n%s\nwant it Down, LID 65535, and one link Down/Polling", parts[0])
	}
	if strings.TrimSpace(parts[1]) != "0" {
		t.Errorf("perfquery reached mlx5_3 by its GUID while it was down:\n%s", parts[1])
	}
	if want := fmt.Sprintf("Base lid: %d", lid); !strings.Contains(parts[2], "State: Active") || !strings.Contains(parts[2], want) || !strings.HasSuffix(parts[2], "\n0\n") {
		t.Errorf("after ctl ib up mlx5_3:\n%s\nwant it Active, %s, and no link down", parts[2], want)
	}
	if !strings.Contains(parts[3], "SymbolErrorCounter:..............9") || !strings.HasSuffix(parts[3], "\n9\n") {
		t.Errorf("after ctl ib errors mlx5_0 symbol_error:9: perfquery and sysfs:\n%s", parts[3])
	}
	if got := strings.TrimSpace(parts[4]); got != "mlx5_3=link_downed:1\nmlx5_0=symbol_error:9\nInfiniBand port faults: mlx5_3=link_downed:1; mlx5_0=symbol_error:9" {
		t.Errorf("ctl ib lists:\n%s\nwant mlx5_3's one link_downed, then mlx5_0's errors (as set), and ctl status saying so", got)
	}
	if got := strings.TrimSpace(parts[5]); got != "no InfiniBand port faults" {
		t.Errorf("ctl ib after clear: %q", got)
	}
}

// The verbs provider's path is rendered from --assets, so a relative
// one must be made absolute: libibverbs opens it from the command's own
// working directory.
func TestExecTakesARelativeAssetsDir(t *testing.T) {
	bin := builtNvmock(t)
	testenv.Tool(t, "ibv_devices")
	cmd := exec.Command(bin, "exec", "--profile", "h100", "--assets", "driver", "--", "sh", "-c", "cd / && ibv_devices")
	cmd.Dir = testenv.BuildDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nvmock exec: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "couldn't load driver") || strings.Count(string(out), "mlx5_") != 12 {
		t.Errorf("ibv_devices with --assets driver (relative):\n%s\nwant the 12 devices and no libibverbs warning", out)
	}
}

// A cable pulled on one real node (nvmock ctl ib) reaches the other's
// daemon: its discovery no longer finds that CA, and its leaf's port to it
// is Down/Polling. (A discovery that runs while the news arrives may find
// the link gone mid-walk and warn of a timeout, as on a real fabric: the
// loop's warnings are not the answer.)
func TestAPortFaultReachesTheOtherNode(t *testing.T) {
	testenv.Tool(t, "ibnetdiscover")
	bin := builtNvmock(t)
	// node-a lives until the test ends: a node that went away by
	// itself would take its HCAs' names and faults with it.
	out, nodeA := twoNodes(t, []string{"sh", "-c", bin + " ctl ib down mlx5_0 && exec sleep 600"},
		`for i in $(seq 100); do n=$(ibnetdiscover -C mlx5_0 2>/dev/null | grep -c '"node-a mlx5_'); [ "$n" = 14 ] && break; sleep 0.1; done
echo $n; iblinkinfo -C mlx5_0 | grep -c 'Down/ Polling'`)
	if got := strings.Fields(out); !slices.Equal(got, []string{"14", "1"}) {
		t.Errorf("node-b names node-a's HCAs and sees links down: %v; want 14 (16 less mlx5_0's two lines) and 1\nnode-a:\n%s", got, nodeA)
	}
}

// twoNodes runs two h100 nodes of one fabric on this machine, each in
// nvmock exec with its own daemon, peered over TCP: node-a (slot 0) runs
// cmdA, which must end on SIGINT, while node-b (slot 1) runs scriptB. It
// returns node-b's output and what node-a printed by then.
func twoNodes(t *testing.T, cmdA []string, scriptB string) (outB, outA string) {
	t.Helper()
	bin := builtNvmock(t)
	a, b := freePort(t), freePort(t)
	assets := filepath.Join(testenv.BuildDir(), "driver")
	node := func(host, slot, listen, peer string, cmd ...string) *exec.Cmd {
		args := []string{"exec", "--profile", "h100", "--assets", assets, "--ib-host", host, "--ib-slot", slot,
			"--ib-listen", listen, "--ib-peers", peer, "--"}
		return exec.Command(bin, append(args, cmd...)...)
	}
	serverOut := &startNode(t, node("node-a", "0", a, b, cmdA...)).out
	out, err := node("node-b", "1", b, a, "sh", "-c", scriptB).CombinedOutput()
	if err != nil {
		t.Fatalf("node-b: %v\n%s\nnode-a:\n%s", err, out, serverOut.String())
	}
	return string(out), serverOut.String()
}

// Two exec'd nodes that claim one slot are told so: the daemon's
// warnings reach exec's stderr (they went nowhere).
func TestExecSaysTwoNodesClaimOneSlot(t *testing.T) {
	bin := builtNvmock(t)
	a := freePort(t)
	assets := filepath.Join(testenv.BuildDir(), "driver")
	serverOut := &startNode(t, exec.Command(bin, "exec", "--profile", "h100", "--assets", assets, "--ib-host", "node-a", "--ib-slot", "0", "--ib-listen", a, "--", "sleep", "600")).out
	// node-b meets node-a at once: node-a listens first.
	waitListening(t, a, serverOut)
	nodeB := startNode(t, exec.Command(bin, "exec", "--profile", "h100", "--assets", assets, "--ib-host", "node-b", "--ib-slot", "0", "--ib-peers", a, "--", "sleep", "600"))
	waitOutput(t, nodeB, "nvmock exec: fabric daemon: peer claims slot 0, which is this node's")
}

// A peer whose fabric is built from another profile (here two spines, not
// four) is refused with a warning: every LID would differ (QA: they peered
// silently and ibping to the peer timed out).
func TestExecSaysAPeerBuildsAnotherFabric(t *testing.T) {
	bin := builtNvmock(t)
	a := freePort(t)
	assets := filepath.Join(testenv.BuildDir(), "driver")
	other := filepath.Join(t.TempDir(), "two-spines.yaml")
	if err := os.WriteFile(other, []byte("base: h100\nname: h100\ninfiniband:\n  fabric: {spines: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	serverOut := &startNode(t, exec.Command(bin, "exec", "--profile", "h100", "--assets", assets, "--ib-host", "node-a", "--ib-slot", "0", "--ib-listen", a, "--", "sleep", "600")).out
	waitListening(t, a, serverOut)
	nodeB := startNode(t, exec.Command(bin, "exec", "--profile", other, "--assets", assets, "--ib-host", "node-b", "--ib-slot", "1", "--ib-peers", a, "--", "sleep", "600"))
	waitOutput(t, nodeB, `peer builds fabric "superpod" from another profile`)
}

// waitOutput waits for an exec'd node to print want: a fixed run of node-b
// (2 s, then 6 s) ended before its daemon met node-a under CI's load. A
// node that exits first fails at once, not after the 60 s.
func waitOutput(t *testing.T, n *runningNode, want string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(n.out.String(), want); {
		select {
		case <-n.done:
			if !strings.Contains(n.out.String(), want) {
				t.Fatalf("the node exited without printing %q:\n%s", want, n.out.String())
			}
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("in 60 s the node did not print %q:\n%s", want, n.out.String())
		}
	}
}

// waitListening waits for an exec'd node's daemon to listen at addr.
func waitListening(t *testing.T, addr string, out *testenv.SyncBuffer) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node does not listen at %s:\n%s", addr, out.String())
		}
	}
}

// runningNode is an exec'd node startNode started.
type runningNode struct {
	out  testenv.SyncBuffer // what it prints
	done chan struct{}      // closed once it exits
}

// startNode starts an exec'd node, ended (SIGINT, as Ctrl-C) when the test
// ends.
func startNode(t *testing.T, node *exec.Cmd) *runningNode {
	t.Helper()
	n := &runningNode{done: make(chan struct{})}
	node.Stdout, node.Stderr = &n.out, &n.out
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		node.Wait()
		close(n.done)
	}()
	t.Cleanup(func() {
		node.Process.Signal(os.Interrupt)
		<-n.done
	})
	return n
}

// builtNvmock is the nvmock binary make driver built.
func builtNvmock(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(testenv.BuildDir(), "bin", "nvmock")
	if _, err := os.Stat(bin); err != nil {
		testenv.Missing(t, "%s (run make driver)", bin)
	}
	return bin
}

// freePort is a TCP port on 127.0.0.1 nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Two mock nodes of one fabric, each with its own daemon, relay MADs: a
// program on node-b pings ibping -S on node-a, and sees node-a's name in
// the fabric; at a port of node-a where nothing listens, node-a's MAD
// layer turns the ping back with status 0xc, as Linux does with a request
// no program took (ibping counts it lost; ibsysstat, which does not look
// at the status, calls it a success), unlike a modelled node, whose ibping
// -S answers.
func TestTwoNodesPassMADsBetweenTheirDaemons(t *testing.T) {
	testenv.Tool(t, "ibping")
	f, err := fabric.Build(testenv.Node(t, "h100", 8), "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	lid := f.Find("mlx5_0").Ports[1].LID
	quiet := f.Find("mlx5_3").Ports[1].LID
	// The daemons meet within a second of each other starting.
	out, _ := twoNodes(t, []string{"ibping", "-C", "mlx5_0", "-S"}, fmt.Sprintf(`sleep 1.5; ibping -C mlx5_0 -c 2 %d; echo ==
ibping -d -C mlx5_0 -c 1 -t 300 %d 2>&1; ibsysstat -C mlx5_0 %[2]d; echo ==
ibnetdiscover -C mlx5_0 | grep -c '"node-a mlx5_'`, lid, quiet))
	parts := strings.Split(out, "==\n")
	host, _ := os.Hostname()
	if want := fmt.Sprintf("Pong from %s.", host); !strings.Contains(parts[0], want) || !strings.Contains(parts[0], " 0% packet loss") {
		t.Errorf("ibping from node-b to ibping -S on node-a (LID %d):\n%s\nwant %q, no loss", lid, parts[0], want)
	}
	if !strings.Contains(parts[1], "100% packet loss") || !strings.Contains(parts[1], "MAD completed with error status 0xc;") ||
		!strings.Contains(parts[1], "sysstat ping succeeded") {
		t.Errorf("ibping -d and ibsysstat to node-a's mlx5_3, where neither server runs:\n%s\nwant the ping turned back with status 0xc, not the model's answer", parts[1])
	}
	if got := strings.TrimSpace(parts[2]); got != "16" {
		t.Errorf("ibnetdiscover on node-b names node-a's HCAs %s times, want 16 (8 compute CAs, each with its link)", got)
	}
}
