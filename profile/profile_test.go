package profile

import (
	"reflect"
	"strings"
	"testing"
)

func TestEveryBuiltinProfileIsValid(t *testing.T) {
	if len(Builtins()) == 0 {
		t.Fatal("no built-in profiles")
	}
	for _, name := range Builtins() {
		p, err := Builtin(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if p.Name != name {
			t.Errorf("builtin/%s.yaml is named %q", name, p.Name)
		}
	}
}

// Builtin skips Parse's checks for users' files; both must make the same
// profile of every built-in.
func TestBuiltinsDecodeAsParseDoes(t *testing.T) {
	for _, name := range Builtins() {
		data, err := builtinFS.ReadFile("builtin/" + name + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		want, err := Parse(name+".yaml", data)
		if err != nil {
			t.Errorf("%s: Parse: %v", name, err)
			continue
		}
		yamlPath, err := parseBuiltin(name+".yaml", data)
		if err != nil {
			t.Errorf("%s: parseBuiltin: %v", name, err)
			continue
		}
		if !reflect.DeepEqual(yamlPath, want) {
			t.Errorf("%s: parseBuiltin and Parse disagree:\n%+v\n%+v", name, yamlPath, want)
		}
		got, err := Builtin(name)
		if err != nil {
			t.Errorf("%s: Builtin: %v", name, err)
			continue
		}
		// From the generated JSON an empty list (devices: []) comes back
		// as none, which every use takes alike.
		emptyToNil(reflect.ValueOf(want))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Builtin and Parse disagree:\n%+v\n%+v", name, got, want)
		}
	}
}

// emptyToNil sets the empty slices reachable from v to nil.
func emptyToNil(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			emptyToNil(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			emptyToNil(v.Field(i))
		}
	case reflect.Slice:
		if v.Len() == 0 && !v.IsNil() && v.CanSet() {
			v.SetZero()
		}
		for i := range v.Len() {
			emptyToNil(v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			emptyToNil(e)
			v.SetMapIndex(k, e)
		}
	}
}

func TestBuiltinA100MatchesTheRealBoard(t *testing.T) {
	p, err := Builtin("a100")
	if err != nil {
		t.Fatal(err)
	}
	// Values from libnvml/smi/testdata/hardware/qx-a100.xml.
	if p.GPUs != 8 || p.Board.ProductName != "NVIDIA A100-SXM4-40GB" || p.Board.Memory.Total != 40960<<20 ||
		uint32(p.Board.PCI.DeviceID) != 0x20B010DE || *p.Board.Power.MaxLimit != 400 || *p.Board.Thermal.Shutdown != 92 {
		t.Errorf("a100 profile drifted from the capture: %+v", p.Board)
	}
}

// mutate edits the a100 YAML so each case differs from a valid profile in one place.
func a100YAML(t *testing.T) string {
	t.Helper()
	data, err := builtinFS.ReadFile("builtin/a100.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestBadProfilesGiveOneClearErrorNamingFileAndField(t *testing.T) {
	for _, c := range []struct {
		name      string
		old, new_ string
		want      []string
	}{
		{"an unknown field is named with its path", "  productName:", "  productNam: x\n  productName:", []string{"bad.yaml", "board.productNam", "unknown field"}},
		{"a misspelt nested field is named with its path", "    reserved:", "    reservd: 1\n    reserved:", []string{"board.memory.reservd", "unknown field"}},
		{"a string where a number belongs names the field", "gpus: 8", "gpus: eight", []string{"bad.yaml", "gpus", "eight is not a whole number"}},
		{"a size that is not a quantity says how to write one", "total: 40960Mi", "total: 40GB", []string{"\"40GB\" is not a quantity", "80Gi"}},
		{"zero GPUs is out of range", "gpus: 8", "gpus: 0", []string{"gpus: 0 is out of range"}},
		{"reserved memory above total is impossible", "reserved: 518Mi", "reserved: 50000Mi", []string{"board.memory.reserved", "above total"}},
		{"a current clock above max is impossible", "current: {graphics: 210,", "current: {graphics: 2000,", []string{"board.clocks.current.graphics", "above max"}},
		{"a PCIe generation of 9 does not exist", "linkGen: 4", "linkGen: 9", []string{"board.pci.linkGen", "not a PCIe generation"}},
		{"an unknown brand lists the known ones", "brand: NVIDIA", "brand: Nvidya", []string{"board.brand", "\"Nvidya\" is not one of", "\"NVIDIA\""}},
		{"a power limit outside min..max is impossible", "defaultLimit: 400", "defaultLimit: 500", []string{"board.power.defaultLimit", "outside minLimit..maxLimit"}},
		{"a bad CPU list names its index", "cpuAffinity: [\"48-63,176-191\"", "cpuAffinity: [\"63-0\"", []string{"topology.cpuAffinity[0]", "not a CPU list"}},
		{"a socket needs its NUMA nodes", "numaNodes: [0, 1, 2, 3]}", "numaNodes: []}", []string{"topology.sockets[0].numaNodes", "is required"}},
		{"a NUMA node is in one socket", "numaNodes: [4, 5, 6, 7]}", "numaNodes: [3, 4, 5, 6, 7]}", []string{"topology.sockets[1].numaNodes", "NUMA node 3 is already in sockets[0]"}},
		{"a GPU's NUMA node is in a socket", "numaNodes: [4, 5, 6, 7]}", "numaNodes: [4, 5, 6]}", []string{"topology.sockets", "GPU 4's NUMA node 7 (topology.numaNodes) is in no socket"}},
		{"a socket holds its GPUs' CPUs", `cpus: "0-63,128-191"`, `cpus: "0-47,128-191"`, []string{"topology.sockets[0].cpus", "GPU 0's CPUs (topology.cpuAffinity) are not all in \"0-47,128-191\""}},
		{"a NUMA node past 63", "numaNodes: [3, 3, 1, 1, 7, 7, 5, 5]", "numaNodes: [3, 3, 1, 1, 7, 7, 5, 64]", []string{"topology.numaNodes[7]", "NUMA node 64: NUMA nodes go up to 63"}},
		{"a NUMA affinity past node 63", "  sockets:\n", "  numaAffinity: [\"0,64\"]\n  sockets:\n", []string{"topology.numaAffinity[0]", `"0,64" is not a NUMA node list`, "nodes 0 to 63"}},
		{"a NUMA affinity that is not a list", "  sockets:\n", "  numaAffinity: [\"near\"]\n  sockets:\n", []string{"topology.numaAffinity[0]", `"near" is not a NUMA node list`}},
		{"a GPU memory NUMA node past 63", "  sockets:\n", "  gpuNumaNodes: [64, 1, 2, 3, 4, 5, 6, 7]\n  sockets:\n", []string{"topology.gpuNumaNodes[0]", "NUMA node 64: NUMA nodes go up to 63"}},
		{"a socket's NUMA node past 63", "numaNodes: [4, 5, 6, 7]}", "numaNodes: [4, 5, 6, 7, 64]}", []string{"topology.sockets[1].numaNodes", "NUMA node 64: NUMA nodes go up to 63"}},
		{"a socket's CPUs must be a CPU list", `cpus: "0-63,128-191"`, `cpus: "first half"`, []string{"topology.sockets[0].cpus", "not a CPU list"}},
		{"two sockets cannot share CPUs", `cpus: "64-127,192-255"`, `cpus: "60-127,192-255"`, []string{"topology.sockets[1].cpus", `"60-127,192-255" shares CPUs with sockets[0]`}},
		{"sockets need the GPUs' NUMA nodes", "  numaNodes: [3, 3, 1, 1, 7, 7, 5, 5]\n", "", []string{"topology.sockets", "needs topology.numaNodes"}},
		{"a bad device id names the vendor", "deviceId: \"0x20B010DE\"", "deviceId: \"0x20B01234\"", []string{"board.pci.deviceId", "10DE"}},
		{"broken YAML says so", "gpus: 8", "gpus: [8", []string{"bad.yaml", "not valid YAML"}},
		{"an NVLink ucode names the ones there are", "    remote: switch\n", "    remote: switch\n    firmware: [{ucode: NETIR, version: 1.2.3}, {ucode: FALCON, version: 1.2.3}]\n", []string{"board.nvlink.firmware[1].ucode", `"FALCON" is not one of`, `"NETIR UPHY"`}},
		{"an NVLink firmware version has three numbers", "    remote: switch\n", "    remote: switch\n    firmware: [{ucode: MSE, version: \"14:4:0\"}]\n", []string{"board.nvlink.firmware[0].version", `"14:4:0" is not major.minor.subminor`}},
		{"NVLink firmware fits the snapshot", "    remote: switch\n", "    remote: switch\n    firmware: [{ucode: MSE, version: 1.0.0}, {ucode: MSE, version: 1.0.0}, {ucode: MSE, version: 1.0.0}, {ucode: MSE, version: 1.0.0}, {ucode: MSE, version: 1.0.0}, {ucode: MSE, version: 1.0.0}, {ucode: MSE, version: 1.0.0}, {ucode: MSE, version: 1.0.0}, {ucode: MSE, version: 1.0.0}]\n", []string{"board.nvlink.firmware", "9 images; at most 8"}},
		{"a long value is clipped in the message", "brand: NVIDIA", "brand: " + strings.Repeat("x", 5000), []string{"board.brand", `"` + strings.Repeat("x", 64) + `"... (5000 bytes) is not one of`}},
		{"a BBX flush takes some time", "    ecc: \"6.16\"\n", "    ecc: \"6.16\"\n    bbxFlushUs: 0\n", []string{"board.inforom.bbxFlushUs", "0 us is out of range; use 1 to 10000000"}},
		{"a BBX flush in milliseconds would be too long", "    ecc: \"6.16\"\n", "    ecc: \"6.16\"\n    bbxFlushUs: 93088000\n", []string{"board.inforom.bbxFlushUs", "93088000 us is out of range"}},
		{"memory power is not negative", "  thermal:\n", "  memoryPower: {average: -1}\n  thermal:\n", []string{"board.memoryPower.average", "-1 W is out of range; use 0 to 100000"}},
		{"an average power is within the limit", "  power:\n", "  power:\n    average: 99999\n", []string{"board.power.average", "99999 W is above enforcedLimit 400 W"}},
		{"memory draws part of the board's power", "  thermal:\n", "  memoryPower: {average: 99999}\n  thermal:\n", []string{"board.memoryPower.average", "99999 W is above the board's power.enforcedLimit 400 W"}},
		{"an average power is in range", "  power:\n", "  power:\n    average: 1e12\n", []string{"board.power.average", "1e+12 W is out of range"}},
		{"NVLink encryption needs the firmware", "    remote: switch\n", "    remote: switch\n    encryption: true\n", []string{"board.nvlink.encryption", "needs board.nvlink.firmware"}},
		{"C2C links need C2C", "  gspFirmware: true\n", "  gspFirmware: true\n  c2cLinks: {count: 5, mbps: 44712}\n", []string{"board.c2cLinks", "needs board.c2c: Enabled"}},
		{"C2C links are 1 to 16", "  gspFirmware: true\n", "  gspFirmware: true\n  c2c: Enabled\n  c2cLinks: {count: 17, mbps: 44712}\n", []string{"board.c2cLinks.count", "17 is not 1 to 16"}},
		{"an InfiniBand speed names the ones there are", "speed: HDR", "speed: QDR", []string{`bad.yaml:264: infiniband.adapters["0x101b"].speed`, "not HDR, NDR or XDR"}},
		{"a storage HCA must be one of the NICs", "storage: [mlx5_4, mlx5_10]", "storage: [mlx5_4, mlx5_99]", []string{"infiniband.storage[1]", `"mlx5_99" is not the name of a Mellanox NIC`}},
		{"a storage HCA is InfiniBand", "storage: [mlx5_4, mlx5_10]", "storage: [mlx5_4, mlx5_5]", []string{"infiniband.storage[1]", `"mlx5_5" is an Ethernet function (class 0x020000)`}},
		{"a storage HCA is named once", "storage: [mlx5_4, mlx5_10]", "storage: [mlx5_4, mlx5_4]", []string{"infiniband.storage[1]", `"mlx5_4" is already infiniband.storage[0]`}},
		{"a NIC name is not a path", "linkWidth: 16, name: mlx5_0}", "linkWidth: 16, name: ../../tmp/e}", []string{"pcie.nics[0].name", `"../../tmp/e" is not an RDMA device name`}},
		{"a NIC is a network controller", `class: "0x020700", linkGen: 4, linkWidth: 16, name: mlx5_0}`, `class: "0x999999", linkGen: 4, linkWidth: 16, name: mlx5_0}`,
			[]string{"pcie.nics[0].class", `0x999999 is not a network controller's (0x02xxxx`}},
		{"a NIC name has no spaces", "linkWidth: 16, name: mlx5_0}", "linkWidth: 16, name: \"ib 0\"}", []string{"pcie.nics[0].name", `"ib 0" is not an RDMA device name`}},
		{"two NICs cannot share a name", "linkWidth: 16, name: mlx5_1}", "linkWidth: 16, name: mlx5_0}", []string{"pcie.nics[1].name", `"mlx5_0" is already pcie.nics[0]`}},
		{"an adapter needs its speed", "speed: HDR, ", "", []string{`infiniband.adapters["0x101b"].speed`, "is required: HDR, NDR or XDR"}},
		{"a Mellanox NIC needs an adapter entry", `"0x101b": {`, `"0x101c": {`, []string{"pcie.nics[0]", "no infiniband.adapters entry"}},
		{"a GUID prefix is six hex digits", "oui: 1070fd", "oui: 10:70:fd", []string{`infiniband.adapters["0x101b"].oui`, "6 lowercase hex digits"}},
		{"a port capability mask is 32 bits of hex", "oui: 1070fd", "oui: 1070fd, capabilityMask: \"0x1a651e848\"", []string{`infiniband.adapters["0x101b"].capabilityMask`}},
		{"modelled nodes need a number in their name", "hostName: dgxa%02d", "hostName: dgxa", []string{"infiniband.fabric.hostName", "one %d"}},
		{"a MIG placement must fit the memory slices", "placements: [0, 4], computeInstances: [1, 2, 3]", "placements: [0, 6], computeInstances: [1, 2, 3]",
			[]string{"board.modes.mig.gpuInstances[4].placements", "6: an instance of 4 memory slices starts at a multiple of 4"}},
		{"a MIG placement is listed once", "placements: [0, 4], computeInstances: [1, 2, 3]", "placements: [0, 0, 4], computeInstances: [1, 2, 3]",
			[]string{"board.modes.mig.gpuInstances[4].placements", "0 is listed twice"}},
		{"a MIG profile name has a slice count", "name: 2g.10gb,", "name: big,", []string{"board.modes.mig.gpuInstances[3].name", `"big" is not a profile name`}},
		{"the largest compute instance is the whole GPU instance", "computeInstances: [1, 2, 4],", "computeInstances: [1, 2],",
			[]string{"board.modes.mig.gpuInstances[5].computeInstances", "must end with the whole instance's 4 slices"}},
		{"a MIG profile has no more SMs than the board", "memoryMiB: 9984, sms: 28,", "memoryMiB: 9984, sms: 9999,",
			[]string{"board.modes.mig.gpuInstances[3].sms", "9999 is more than the board's cudaCores allow (108 SMs at 64 cores each)"}},
		{"a MIG profile has a copy engine", "sms: 28, copyEngines: 2,", "sms: 28, copyEngines: 0,",
			[]string{"board.modes.mig.gpuInstances[3].copyEngines", "must be set"}},
		{"compute instances name the slice that is wrong", "placements: [0, 2, 4], computeInstances: [1, 2],", "placements: [0, 2, 4], computeInstances: [0, 2],",
			[]string{"board.modes.mig.gpuInstances[3].computeInstances", "[0, 2]: 0 is not a compute instance's slices in a 2-slice instance (1 to 2)"}},
		{"a clock event reason is listed once", "clockEventReasons: [GpuIdle,", "clockEventReasons: [GpuIdle, GpuIdle,",
			[]string{"board.clockEventReasons[1]", "GpuIdle is listed twice"}},
		{"NVML's version is the driver's", `cudaVersion: "12.8"`, `cudaVersion: "12.8"` + "\n  nvmlVersion: hello",
			[]string{"driver.nvmlVersion", `"hello", but driver 570.148.08 with CUDA 12.8 reports "12.570.148.08"`}},
		{"a MIG device's BAR1 fits the board's", "computeInstances: [1, 2, 4], bar1MiB: 12211}", "computeInstances: [1, 2, 4], bar1MiB: 70000}",
			[]string{"board.modes.mig.gpuInstances[5].bar1MiB", "70000 is above the board's BAR1 of 65536 MiB"}},
		{"a MIG device's idle use leaves it memory", "computeInstances: [1, 2, 4],", "computeInstances: [1, 2, 4], usedMiB: 20096,",
			[]string{"board.modes.mig.gpuInstances[5].usedMiB", "20096 leaves nothing of its 20096 MiB"}},
		{"a MIG layout names the board's profiles", "    mig:\n", "    mig:\n      layout: all-2g.5gb\n", []string{"board.modes.mig.layout", `"2g.5gb": the board's profiles are 1g.5gb, 1g.5gb+me`}},
		{"a MIG layout names the node's GPUs", "    mig:\n", "    mig:\n      layout: 8=all-1g.5gb\n", []string{"board.modes.mig.layout", "GPU 8: the node has GPUs 0 to 7"}},
		{"more nodes than a leaf takes do not fit", "nodes: 20", "nodes: 30", []string{"infiniband.fabric.nodes", "30 nodes do not fit on a MQM8790 leaf", "takes 20"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := a100YAML(t)
			if !strings.Contains(src, c.old) {
				t.Fatalf("test setup: %q not in a100.yaml", c.old)
			}
			_, err := Parse("bad.yaml", []byte(strings.Replace(src, c.old, c.new_, 1)))
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if strings.Count(msg, "\n") != 0 {
				t.Errorf("want one line, got:\n%s", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}

// A missing fabric block is one line saying so (it was nine, one a field
// out of range), and a switch with too many ports one line (it was two
// that disagreed).
func TestAnInfiniBandBlockWithoutFabricIsOneLine(t *testing.T) {
	src := a100YAML(t)
	i := strings.Index(src, "  fabric:\n")
	for _, c := range []struct{ name, src, want string }{
		{"no fabric", src[:i], "infiniband.fabric: is required: name, nodes, hostName, spines and switch"},
		{"300 ports", strings.Replace(src, "ports: 40,", "ports: 300,", 1), "infiniband.fabric.switch.ports: 300 is out of range; use 2 to 254"},
	} {
		_, err := Parse("bad.yaml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", c.name, err, c.want)
		}
	}
}

func TestValidationReportsEveryProblemAtOnce(t *testing.T) {
	for _, gpus := range []string{"gpus: 0", "gpus: 70"} { // 70: review, the board's went unsaid
		src := strings.NewReplacer("gpus: 8", gpus, "linkGen: 4", "linkGen: 9").Replace(a100YAML(t))
		_, err := Parse("two.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), "gpus") || !strings.Contains(err.Error(), "linkGen") {
			t.Errorf("%s: want both problems reported, got %v", gpus, err)
		}
	}
}

func TestShownProfileParsesBackToTheSame(t *testing.T) {
	p, err := Builtin("a100")
	if err != nil {
		t.Fatal(err)
	}
	y, err := p.YAML()
	if err != nil {
		t.Fatal(err)
	}
	q, err := Parse("shown.yaml", y)
	if err != nil {
		t.Fatalf("shown profile does not parse: %v\n%s", err, y)
	}
	y2, _ := q.YAML()
	if string(y) != string(y2) {
		t.Errorf("round trip changed the profile:\n%s\n---\n%s", y, y2)
	}
}

func TestQuantities(t *testing.T) {
	for in, want := range map[string]Quantity{"1024": 1024, "1Ki": 1024, "40960Mi": 40960 << 20, "80Gi": 80 << 30, "1Ti": 1 << 40} {
		got, err := ParseQuantity(in)
		if err != nil || got != want {
			t.Errorf("ParseQuantity(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "80GB", "-1", "1.5Gi", "99999999999999Ti"} {
		if _, err := ParseQuantity(in); err == nil {
			t.Errorf("ParseQuantity(%q) accepted", in)
		}
	}
}

func TestAProfileOnABaseChangesOnlyWhatItNames(t *testing.T) {
	p, err := Parse("big.yaml", []byte("base: a100\nname: a100-big\ngpus: 16\nboard:\n  memory: {total: 81920Mi}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := Builtin("a100")
	if p.GPUs != 16 || p.Board.Memory.Total != 81920<<20 || p.Board.Memory.Reserved != a.Board.Memory.Reserved ||
		p.Board.ProductName != a.Board.ProductName || len(p.Topology.BusIDs) != len(a.Topology.BusIDs) {
		t.Errorf("merged profile: %+v", p)
	}
}

func TestDeviceOverridesChangeOneGPU(t *testing.T) {
	src := "base: a100\nname: hot\ndevices:\n  - index: 3\n    board:\n      thermal: {gpu: 80}\n      memory: {used: 10Gi}\n"
	p, err := Parse("hot.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	boards, errs := p.Boards()
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if *boards[3].Thermal.GPU != 80 || boards[3].Memory.Used != 10<<30 || *boards[2].Thermal.GPU != 33 || *boards[3].Thermal.Shutdown != 92 {
		t.Errorf("gpu 3: %d C, %d used; gpu 2: %d C", *boards[3].Thermal.GPU, boards[3].Memory.Used, *boards[2].Thermal.GPU)
	}
}

func TestBadOverridesAndBasesAreNamedWithTheirLine(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      []string
	}{
		{"an override of a GPU the node lacks", "base: a100\nname: x\ndevices:\n  - index: 9\n    board: {}\n", []string{"x.yaml:4: devices[0].index: 9 is not a GPU of this node (0 to 7)"}},
		{"an impossible value in an override", "base: a100\nname: x\ndevices:\n  - index: 1\n    board:\n      memory: {used: 99Gi}\n", []string{"devices[0].board.memory.used", "above total minus reserved"}},
		{"a misspelt field in an override", "base: a100\nname: x\ndevices:\n  - index: 1\n    board:\n      memroy: {}\n", []string{"x.yaml:6: devices[0].board.memroy: unknown field"}},
		{"an unknown base", "base: a200\nname: x\n", []string{"x.yaml:1: base: no built-in profile \"a200\""}},
		{"a misspelt nested field", "base: a100\nname: x\nboard:\n  thermal:\n    shutdwn: 90\n", []string{"x.yaml:5: board.thermal.shutdwn: unknown field"}},
		// h100 gives thresholds relative to T.Limit: no shutdown to compare.
		{"a control character in the name", "base: t4\nname: \"t4\\nx=1\"\n", []string{`name: "t4\nx=1" has a control character`}},
		{"a module id counts from 1", "base: t4\nname: x\ntopology:\n  moduleIds: [0]\n", []string{"topology.moduleIds[0]: 0: module ids are 1 to 64"}},
		{"a temperature no GPU runs at", "base: h100\nname: x\nboard:\n  thermal:\n    gpu: 4000000000\n", []string{"x.yaml:5: board.thermal.gpu: 4000000000 C is above 150 C"}},
		// Review: a null merged over the base and read as zero: the whole
		// board gone without a word. (An optional block's takes it away.)
		{"a null board", "base: h100\nname: x\nboard: ~\n", []string{"x.yaml:3: board: null; give a value, or leave the field out"}},
		{"a null count", "base: a100\nname: x\ngpus: null\n", []string{"x.yaml:3: gpus: null; give a value, or leave the field out"}},
		{"a null in a list", "base: a100\nname: x\ntopology:\n  moduleIds: [1, ~]\n", []string{"topology.moduleIds[1]: null"}},
		// Review: each validated, and the second of a pair was never shown
		// (a layout, a memory clock), or the name printed blank.
		{"a MIG layout in an override", "base: a100\nname: x\ndevices:\n  - index: 3\n    board: {modes: {mig: {layout: all-balanced}}}\n", []string{"devices[0].board.modes.mig.layout: the layout is the node's", `"3=all-balanced"`}},
		{"one memory clock twice", "base: h100\nname: x\nboard:\n  clocks:\n    supported: [{memory: 2619, graphics: [1980]}, {memory: 2619, graphics: [1000]}]\n", []string{"board.clocks.supported[1].memory: 2619 MHz is supported[0]'s already"}},
		{"one graphics clock twice", "base: h100\nname: x\nboard:\n  clocks:\n    supported: [{memory: 2619, graphics: [1980, 1980]}]\n", []string{"board.clocks.supported[0].graphics[1]: 1980 MHz is listed twice"}},
		{"a module id twice", "base: a100\nname: x\ntopology:\n  moduleIds: [1, 1, 2, 3, 4, 5, 6, 7]\n", []string{"topology.moduleIds[1]: 1 is GPU 0's already"}},
		{"a blank name", "base: t4\nname: \"  \"\n", []string{`name: "  " is blank`}},
		{"a null key", "base: t4\n~: c\n", []string{"x.yaml:2: a null as a key"}},
		{"a list as a key", "base: t4\n? [a, b]\n: c\n", []string{"x.yaml:2: a list as a key"}},
		{"a snapshot", "NVMOCKSS\x01\x00", []string{"a compiled snapshot, not a profile"}},
		{"a gzip file", "\x1f\x8b\x08\x00", []string{"compressed (gzip)"}},
		{"a name with spaces at its ends", "base: t4\nname: \" x \"\n", []string{`name: " x " begins or ends with a space`}},
		{"a blank product name", "base: t4\nname: x\nboard:\n  productName: \"   \"\n", []string{`board.productName: "   " is blank`}},
		{"a product name of no label letters", "base: t4\nname: x\nboard:\n  productName: \"ＮＶＩＤＩＡ\"\n", []string{"board.productName: \"ＮＶＩＤＩＡ\" makes an empty node label"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(c.src))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// A null takes away the base's optional block: an H100 node without
// InfiniBand (docs/profiles.md).
func TestANullTakesAwayTheBasesOptionalBlock(t *testing.T) {
	p, err := Parse("x.yaml", []byte("base: h100\nname: x\ninfiniband: ~\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.InfiniBand != nil {
		t.Errorf("infiniband: ~ kept the base's block: %+v", p.InfiniBand)
	}
}

// A problem in an anchored block is told once, at the anchor, however
// often it is aliased.
func TestAProblemInAnAliasedBlockIsToldOnce(t *testing.T) {
	src := "base: a100\nname: x\ndevices:\n  - index: 1\n    board: &b\n      memroy: {}\n  - index: 2\n    board: *b\n  - index: 3\n    board: *b\n"
	_, err := Parse("x.yaml", []byte(src))
	if err == nil {
		t.Fatal("accepted")
	}
	if got := err.Error(); strings.Count(got, "\n") != 0 || !strings.HasPrefix(got, "profile x.yaml:6: devices[0].board.memroy: unknown field") {
		t.Errorf("error %q, want the one line of the anchor's problem", got)
	}
}
