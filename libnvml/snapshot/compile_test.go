package snapshot

import (
	"bytes"
	"encoding/binary"
	"regexp"
	"testing"

	"github.com/nvmock/nvmock/profile"
)

func decode(t *testing.T, data []byte) (Header, []Device, []uint32) {
	h, devs, _, pool := decodeAll(t, data)
	return h, devs, pool
}

func decodeAll(t *testing.T, data []byte) (Header, []Device, []NIC, []uint32) {
	t.Helper()
	r := bytes.NewReader(data)
	var h Header
	if err := binary.Read(r, binary.LittleEndian, &h); err != nil {
		t.Fatal(err)
	}
	devs := make([]Device, h.DeviceCount)
	nics := make([]NIC, h.NICCount)
	pool := make([]uint32, h.PoolCount)
	if err := binary.Read(r, binary.LittleEndian, devs); err != nil {
		t.Fatal(err)
	}
	if err := binary.Read(r, binary.LittleEndian, nics); err != nil {
		t.Fatal(err)
	}
	if err := binary.Read(r, binary.LittleEndian, pool); err != nil {
		t.Fatal(err)
	}
	if r.Len() != 0 {
		t.Fatalf("%d trailing bytes", r.Len())
	}
	return h, devs, nics, pool
}

func cstr(b []byte) string { return string(b[:bytes.IndexByte(b, 0)]) }

func a100(t *testing.T, gpus int) *profile.Profile {
	t.Helper()
	p, err := profile.Builtin("a100")
	if err != nil {
		t.Fatal(err)
	}
	if gpus > 0 {
		p.GPUs = gpus
	}
	return p
}

func TestCompiledSnapshotCarriesTheProfile(t *testing.T) {
	p := a100(t, 0)
	data, err := Compile(p, Options{Seed: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	h, devs, pool := decode(t, data)
	if string(h.Magic[:]) != "NVMOCKSS" || h.Version != Version || h.CudaVersion != 12080 || cstr(h.DriverVersion[:]) != p.Driver.Version {
		t.Errorf("header: %+v", h)
	}
	d := devs[3]
	if cstr(d.Name[:]) != p.Board.ProductName || d.MemoryTotal != uint64(p.Board.Memory.Total) || d.PowerMaxMW != 400000 ||
		d.Minor != 3 || cstr(d.PCIBusID[:]) != "00000000:4E:00.0" || d.TempThreshold[0] != 92 {
		t.Errorf("device 3 does not carry the profile: %+v", d)
	}
	mem := pool[d.SupportedMemFirst : d.SupportedMemFirst+d.SupportedMemCount]
	gfx := pool[d.SupportedGfxFirst[0] : d.SupportedGfxFirst[0]+d.SupportedGfxCount[0]]
	// 1410 down to 210 by 15 MHz, as in the capture.
	if len(mem) != 1 || mem[0] != 1215 || len(gfx) != 81 || gfx[0] != 1410 || gfx[80] != 210 {
		t.Errorf("supported clocks: mem %v, %d graphics clocks from %d", mem, len(gfx), gfx[0])
	}
}

var uuidRE = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestIdentitiesAreUniquePerNodeAndStable(t *testing.T) {
	p := a100(t, 64)
	seen := map[string]bool{}
	for _, seed := range []string{"node-a", "node-b"} {
		for _, id := range Identities(p, seed) {
			if !uuidRE.MatchString(id.UUID) || len(id.Serial) != 13 {
				t.Errorf("bad identity %+v", id)
			}
			if seen[id.UUID] || seen[id.BusID+seed] {
				t.Errorf("duplicate %s or %s", id.UUID, id.BusID)
			}
			seen[id.UUID], seen[id.BusID+seed] = true, true
		}
	}
	if UUID("a100", "node-a", 5) != UUID("a100", "node-a", 5) {
		t.Error("UUID not deterministic")
	}
}

func TestUnseededSnapshotLeavesIdentitiesToTheLibrary(t *testing.T) {
	data, err := Compile(a100(t, 2), Options{Unseeded: true})
	if err != nil {
		t.Fatal(err)
	}
	h, devs, _ := decode(t, data)
	if h.Flags&FlagUnseeded == 0 || cstr(devs[0].UUID[:]) != "" || cstr(devs[0].Serial[:]) != "1650" {
		t.Errorf("unseeded: flags %d uuid %q serial %q", h.Flags, cstr(devs[0].UUID[:]), cstr(devs[0].Serial[:]))
	}
}

func TestCompileRejectsAnInvalidProfile(t *testing.T) {
	p := a100(t, 0)
	p.GPUs = 0
	if _, err := Compile(p, Options{Seed: "x"}); err == nil {
		t.Error("compiled a profile with 0 GPUs")
	}
}

func BenchmarkCompile64(b *testing.B) {
	p, _ := profile.Builtin("a100")
	p.GPUs = 64
	for i := 0; i < b.N; i++ {
		if _, err := Compile(p, Options{Seed: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDeviceOverridesReachTheirGPU(t *testing.T) {
	p, err := profile.Parse("hot.yaml", []byte("base: a100\nname: hot\ndevices:\n  - index: 5\n    board:\n      thermal: {gpu: 81}\n      productName: NVIDIA A100 (hot)\n"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := Compile(p, Options{Seed: "s"})
	if err != nil {
		t.Fatal(err)
	}
	_, devs, _ := decode(t, data)
	if devs[5].TempGPU != 81 || cstr(devs[5].Name[:]) != "NVIDIA A100 (hot)" || devs[4].TempGPU != 33 {
		t.Errorf("gpu 5: %d C %q; gpu 4: %d C", devs[5].TempGPU, cstr(devs[5].Name[:]), devs[4].TempGPU)
	}
}

// all-disabled, one layout for a pool of several boards, asks nothing of
// a board without MIG: its MIG mode stays N/A, as the board's own.
func TestAllDisabledLeavesABoardWithoutMIGAsItIs(t *testing.T) {
	for _, layout := range []string{"all-disabled", "0=all-disabled"} {
		p, err := profile.Parse("pool.yaml", []byte("base: t4\nboard: {modes: {mig: {layout: \""+layout+"\"}}}\n"))
		if err != nil {
			t.Fatal(err)
		}
		data, err := Compile(p, Options{Seed: "s"})
		if err != nil {
			t.Fatal(err)
		}
		t4, err := profile.Builtin("t4")
		if err != nil {
			t.Fatal(err)
		}
		want, err := Compile(t4, Options{Seed: "s"})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, want) {
			t.Errorf("%s: the snapshot differs from t4's", layout)
		}
	}
	if _, err := profile.Parse("pool.yaml", []byte("base: t4\nboard: {modes: {mig: {layout: all-1g.5gb}}}\n")); err == nil {
		t.Error("a layout with instances on a board without MIG was taken")
	}
}

// Behind a Gen4 switch an H100 trains to Gen4, and NVML says so as the
// PCI tree (lspci's LnkSta) does; its own maximum stays Gen5. Review: NVML
// kept the board's Gen5.
func TestAGPUBehindASlowerSwitchTrainsDown(t *testing.T) {
	p, err := profile.Parse("g4.yaml", []byte("base: h100\nname: g4\npcie:\n  switch: {linkGen: 4, linkWidth: 8}\n"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := p.Node()
	if err != nil {
		t.Fatal(err)
	}
	gen, width := node.GPUs[0].Function.TrainedLink()
	data, err := Compile(p, Options{Seed: "s"})
	if err != nil {
		t.Fatal(err)
	}
	_, devs, _ := decode(t, data)
	d := devs[0]
	if d.PcieGen != 4 || d.PcieWidth != 8 || d.PcieGen != gen || d.PcieWidth != width || d.PcieMaxGen != 4 || d.PcieMaxWidth != 8 || d.PcieGPUMaxGen != 5 {
		t.Errorf("NVML's link: gen %d x%d, max gen %d x%d, GPU max gen %d; the tree's gen %d x%d; want 4 x8, max 4 x8, GPU max 5",
			d.PcieGen, d.PcieWidth, d.PcieMaxGen, d.PcieMaxWidth, d.PcieGPUMaxGen, gen, width)
	}
}

// topo -m asks the PCIe path between GPUs and NICs: the snapshot places
// every NIC function of the tree as it places the GPUs, a card's two
// functions on one slot.
func TestNICsArePlacedInTheGPUsTree(t *testing.T) {
	data, err := Compile(a100(t, 0), Options{Seed: "s"})
	if err != nil {
		t.Fatal(err)
	}
	_, devs, nics, _ := decodeAll(t, data)
	if len(nics) != 12 {
		t.Fatalf("%d NICs, want the DGX A100's 12", len(nics))
	}
	// mlx5_0 (0c:00.0) shares GPU0's top switch, not its leaf, and its
	// NUMA node (3, of eight).
	n, g := nics[0], devs[0]
	if n.PCIDomain != 0 || n.PCIBDF != 0x0c<<8 || n.PcieRoot != g.PcieRoot || n.PcieSwitchTop != g.PcieSwitchTop ||
		n.PcieSwitchLeaf == g.PcieSwitchLeaf || n.NUMANode != 3 {
		t.Errorf("mlx5_0: %+v; GPU0: root %d, switches %d, %d", n, g.PcieRoot, g.PcieSwitchTop, g.PcieSwitchLeaf)
	}
	var storage []NIC // 61:00.0 and 61:00.1
	for _, n := range nics {
		if n.PCIBDF>>3 == 0x61<<5 {
			storage = append(storage, n)
		}
	}
	if len(storage) != 2 || storage[0].PcieRoot != storage[1].PcieRoot || storage[1].PCIBDF&7 != 1 {
		t.Errorf("the storage card's functions: %+v", storage)
	}
}

// Switches are numbered over the node: a tree repeated one PCI domain up
// (GPUs 8-15) has switches of its own.
func TestSwitchesOfRepeatedTreesDiffer(t *testing.T) {
	data, err := Compile(a100(t, 16), Options{Seed: "s"})
	if err != nil {
		t.Fatal(err)
	}
	_, devs, nics, _ := decodeAll(t, data)
	a, b := devs[0], devs[8]
	if a.PcieSwitchLeaf == NA || a.PcieSwitchLeaf == b.PcieSwitchLeaf || a.PcieSwitchTop == b.PcieSwitchTop || a.PcieRoot == b.PcieRoot {
		t.Errorf("GPU0 (root %d, switches %d, %d) and GPU8 (root %d, switches %d, %d) share a place", a.PcieRoot, a.PcieSwitchTop, a.PcieSwitchLeaf,
			b.PcieRoot, b.PcieSwitchTop, b.PcieSwitchLeaf)
	}
	if len(nics) != 24 || nics[12].PCIDomain != 1<<16 {
		t.Errorf("%d NICs, the 13th in domain %#x; want 24, the second tree's in 0x10000", len(nics), nics[12].PCIDomain)
	}
}

// Board ids come from the PCI address, and a repeated tree's GPUs (domain
// + 0x10000) keep boards of their own (QA: GPU 8 of 9 A100s had GPU 0's).
func TestRepeatedGPUsKeepBoardIDsOfTheirOwn(t *testing.T) {
	data, err := Compile(a100(t, 16), Options{Seed: "s"})
	if err != nil {
		t.Fatal(err)
	}
	_, devs, _ := decode(t, data)
	seen := map[uint32]int{}
	for i, d := range devs {
		if j, dup := seen[d.BoardID]; dup {
			t.Errorf("GPUs %d and %d share board id %#x", j, i, d.BoardID)
		}
		seen[d.BoardID] = i
	}
	if devs[0].BoardID != 0x700 {
		t.Errorf("GPU 0's board id %#x, want 0x700 from its address 0000:07:00.0", devs[0].BoardID)
	}
}
