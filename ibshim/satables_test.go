//go:build integration

package ibshim_test

// saquery's switch and port table queries (SwitchInfo, LFT, MFT, SL-to-VL,
// P_Key and VL arbitration records): as many records as OpenSM lists for
// the modelled subnet, holding what the switches' and ports' own tables
// hold.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/ibshim/fabric"
)

func TestSAListsTheSwitchAndPortTables(t *testing.T) {
	bin := mcgroup(t)
	f := model(t)
	s := f.Subnets[0]
	a, b := f.Find("mlx5_0").Ports[1], f.Find("mlx5_3").Ports[1]
	leaf := a.Peer.Node
	var switches, switchPorts, cas, caBlocks, sl2vl int
	for _, nd := range s.Nodes {
		if nd.Type == fabric.Switch {
			switches++
			switchPorts += len(nd.Ports)
			sl2vl += len(nd.Ports) * len(nd.Ports)
		} else if !nd.Ports[1].Down() {
			cas++
			caBlocks += (int(nd.PartitionCap) + 31) / 32
		}
	}
	lftBlocks := int(s.TopLID)/64 + 1
	count := func(name string) string { return fmt.Sprintf(" | grep -c '^%s dump:'", name) }
	out := nodeOf(t, "h100", fmt.Sprintf(`saquery -C mlx5_0 SWIR`+count("SwitchInfoRecord")+`; echo ==
saquery -C mlx5_0 SWIR %[2]d; echo ==
saquery -C mlx5_0 LFTR`+count("LFT Record")+`; echo ==
saquery -C mlx5_0 LFTR %[2]d/1; echo ==
saquery -C mlx5_0 SL2VL`+count("SL2VLTableRecord")+`; echo ==
saquery -C mlx5_0 VLAR`+count("VLArbTableRecord")+`; echo ==
saquery -C mlx5_0 PKTR 2>&1; echo ==
saquery -C mlx5_0 --smkey 1 PKTR`+count("PKeyTableRecord")+`; echo ==
saquery -C mlx5_0 --smkey 1 PKTR %[3]d; echo ==
%[1]s mlx5_0 > /dev/null && %[1]s mlx5_3 join | sed -n 's/joined mlid //p'; echo ==
saquery -C mlx5_0 MFTR`+count("MFT Record")+`; echo ==
m=$(saquery -C mlx5_0 -g | sed -n 's/.*Mlid\.*//p'); saquery -C mlx5_0 MFTR %[2]d/3/$(( (m - 0xc000) / 32 ))`,
		bin, leaf.Ports[0].LID, a.LID))
	parts := strings.Split(out, "==\n")
	if len(parts) != 12 {
		t.Fatalf("output:\n%s", out)
	}
	num := func(i int) int { n, _ := strconv.Atoi(strings.TrimSpace(parts[i])); return n }
	mlid, _ := strconv.ParseUint(strings.TrimSpace(parts[9]), 0, 16)
	tree := s.MulticastTree([]*fabric.Port{a, b})
	blocks := (int(mlid)-0xc000)/32 + 1
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"SwitchInfoRecords (one a switch)", num(0), switches},
		{"LFT records (every switch's blocks up to the top LID)", num(2), switches * lftBlocks},
		{"SL-to-VL records (every pair of a switch's ports, one a CA)", num(4), sl2vl + cas},
		{"VL arbitration records (blocks 1 to 4 of every port)", num(5), 4 * (switchPorts + cas)},
		{"P_Key records (a block a switch port, PartitionCap's a CA)", num(7), switchPorts + caBlocks},
		{"MFT records (blocks up to the group's, five positions, on the tree's switches)", num(10), len(tree) * blocks * 5},
	} {
		if c.got != c.want {
			t.Errorf("saquery: %d %s, want %d", c.got, c.what, c.want)
		}
	}
	if !strings.Contains(parts[1], fmt.Sprintf("LinearFDBTop............................0x%X\n", s.TopLID)) ||
		!strings.Contains(parts[1], "MulticastFDBCap.........................0x4000\n") {
		t.Errorf("saquery SWIR %d:\n%s\nwant the switch's SwitchInfo, top LID %#x", leaf.Ports[0].LID, parts[1], s.TopLID)
	}
	rows := regexp.MustCompile(`(?m)^\t\t(\d+)\t(\d+)$`).FindAllStringSubmatch(parts[3], -1)
	if len(rows) != 64 {
		t.Fatalf("saquery LFTR %d/1:\n%s\nwant LIDs 64 to 127", leaf.Ports[0].LID, parts[3])
	}
	for _, r := range rows {
		lid, _ := strconv.Atoi(r[1])
		port, _ := strconv.Atoi(r[2])
		want := 255 // past the top LID
		if lid < len(leaf.LFT) {
			want = int(leaf.LFT[lid])
		}
		if port != want {
			t.Errorf("saquery LFTR: LID %d out of port %d, the switch's LFT says %d", lid, port, want)
		}
	}
	if !strings.Contains(parts[6], "SA_ERR_REQ_INVALID") {
		t.Errorf("saquery PKTR without OpenSM's SA key:\n%s\nwant the SA to refuse it: P_Key records are for trusted requests", parts[6])
	}
	if got := regexp.MustCompile(`Block\.+(\d+)`).FindAllStringSubmatch(parts[8], -1); len(got) != 4 || got[3][1] != "3" ||
		!strings.Contains(parts[8], "PKey Table:\n\t\t0xffff 0x0000") {
		t.Errorf("saquery PKTR %d:\n%s\nwant blocks 0 to 3, the default partition first", a.LID, parts[8])
	}
	// The leaf's ports 48 to 63 for the group's MLID: the uplink the tree
	// takes (position 3).
	want := fmt.Sprintf("%#04x\t%#04x", mlid, tree[leaf][3])
	if tree[leaf][3] == 0 || !strings.Contains(parts[11], want) {
		t.Errorf("saquery MFTR %d/3/%d:\n%s\nwant %q", leaf.Ports[0].LID, blocks-1, parts[11], want)
	}
}
