package profile

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/validate/content"
)

// Inputs found in review (issue 11): each is refused with exactly one line
// naming the file, the field and the problem, before anything is compiled
// or installed.
func TestBoundsAreOneLineNamingFileAndField(t *testing.T) {
	long := "NVIDIA " + strings.Repeat("Ultra ", 13) + "GPU" // 88 characters
	for _, c := range []struct {
		name, src, want string
	}{
		{"a clock range of three thousand entries",
			"base: a100\nname: x\nboard:\n  clocks:\n    supported:\n      - {memory: 1215, max: 3000, min: 1, step: 1}\n",
			"profile x.yaml:6: board.clocks.supported[0]: range 3000 MHz down to 1 by 1 gives 3000 clocks; at most 1024"},
		{"a graphics clock list longer than any board's",
			"base: a100\nname: x\nboard:\n  clocks:\n    supported:\n      - {memory: 1215, graphics: [" + clockList(1025) + "]}\n",
			"profile x.yaml:6: board.clocks.supported[0].graphics: has 1025 clocks; at most 1024"},
		{"a long range in one GPU's override",
			"base: a100\nname: x\ndevices:\n  - index: 2\n    board:\n      clocks:\n        supported:\n          - {memory: 1215, max: 4000000, min: 1, step: 1}\n",
			"profile x.yaml:8: devices[0].board.clocks.supported[0]: range 4000000 MHz down to 1 by 1 gives 4000000 clocks; at most 1024"},
		{"more GPUs than nvidia-smi can show",
			"base: a100\nname: x\ngpus: 65\n",
			"profile x.yaml:3: gpus: 65 is out of range; use 1 to 64"},
		{"4096 GPUs, the old bound",
			"base: a100\nname: x\ngpus: 4096\n",
			"profile x.yaml:3: gpus: 4096 is out of range; use 1 to 64"},
		{"a count too large to allocate",
			"base: a100\nname: x\ngpus: 4294967296\n",
			"profile x.yaml:3: gpus: 4294967296 is out of range; use 1 to 64"},
		{"a string YAML reads as a boolean",
			"base: a100\nname: y\n",
			`profile x.yaml:2: name: y is read by YAML as true, not as the text written; quote it: "y"`},
		{"a serial prefix YAML reads as octal",
			"base: a100\nname: x\nboard:\n  serialPrefix: 0165\n",
			`profile x.yaml:4: board.serialPrefix: 0165 is read by YAML as 117, not as the text written; quote it: "0165"`},
		{"a driver version YAML reads as a number",
			"base: a100\nname: x\ndriver:\n  version: 570.10\n",
			`profile x.yaml:4: driver.version: 570.10 is read by YAML as 570.1, not as the text written; quote it: "570.10"`},
		{"a plain value over two lines (found by FuzzParse)",
			"base: a100\nname: x\ngpus: 3:x\n\n  y\n",
			`profile x.yaml:3: gpus: "3:x\ny" is not a whole number`},
		{"a MIG layout on a board without MIG (docs review)",
			"base: t4\nname: x\nboard:\n  modes:\n    mig:\n      layout: all-balanced\n",
			`profile x.yaml:6: board.modes.mig.layout: "all-balanced": the board has no MIG profiles (gpuInstances), so it cannot be partitioned`},
		{"a power reading above the limit the GPU enforces (docs review)",
			"base: a100\nname: x\nboard:\n  power:\n    draw: 900\n",
			"profile x.yaml:5: board.power.draw: 900 W is above enforcedLimit 400 W"},
		{"a negative number for an unsigned field",
			"base: a100\nname: x\ntopology:\n  numaNodes: [0, -1]\n",
			"profile x.yaml:4: topology.numaNodes[1]: -1 is not a whole number from 0 to 4294967295"},
		{"a bad size in a GPU's override names its place",
			"base: a100\nname: x\ndevices:\n  - index: 1\n    board:\n      memory: {total: 40Gb}\n",
			`profile x.yaml:6: devices[0].board.memory.total: "40Gb" is not a quantity; use bytes or a binary suffix such as "40960Mi", "80Gi" or "20GiB"`},
		{"a quoted number for a count",
			"base: a100\nname: x\ndevices:\n  - index: \"1\"\n    board: {}\n",
			`profile x.yaml:4: devices[0].index: "1" is not a whole number`},
		{"a CUDA version YAML reads as the same text is taken; an octal count is not",
			"base: a100\nname: x\ndriver:\n  version: 570.148.08\n  cudaVersion: 12.8\ngpus: 0165\n",
			"profile x.yaml:6: gpus: 0165 is read by YAML as the octal 117; write it without the leading 0"},
		{"an unknown key with a dash has its line",
			"base: a100\nname: x\nx-common: 1\n",
			"profile x.yaml:3: x-common: unknown field; known fields here: name, description, base, gpus, driver, board, devices, topology, pcie, infiniband"},
		{"a key given twice",
			"base: a100\nname: x\ngpus: 8\ngpus: 2\n",
			"profile x.yaml:3: gpus: given twice (lines 3 and 4); keep one"},
		{"a product name too long for nvidia-smi (and a node label)",
			"base: a100\nname: x\nboard:\n  productName: " + long + "\n",
			`profile x.yaml:4: board.productName: "` + long[:63] + `"... is longer than 63 bytes`},
		{"NVSwitches with no PCIe tree to place them",
			"base: h100\nname: x\ntopology:\n  nvswitches: [\"0000:f0:00.0\"]\n",
			"profile x.yaml:4: topology.nvswitches: needs a pcie: tree placing them, with pcie.nvswitchDevice: NVML names each link's switch by its PCI address, which lspci must show; leave them out where the switches are not PCI devices of the node"},
		{"a GPU whose PCI class is left out",
			"base: t4\nname: x\nboard:\n  pci: {baseClass: 0}\n",
			"profile x.yaml:4: board.pci.baseClass: 0: a GPU is a display controller, class 3 (give baseClass: 3)"},
		{"a compute capability of another architecture",
			"base: a100\nname: x\nboard:\n  computeCapability: \"9.0\"\n",
			"profile x.yaml:4: board.computeCapability: 9.0 is not among Ampere GPUs' compute capabilities (8.0, 8.6, 8.7)"},
		{"a driver newer than the architecture's last",
			"base: t4\nname: x\ndriver: {version: \"580.105.08\"}\nboard:\n  architecture: Kepler\n  computeCapability: \"3.7\"\n",
			"profile x.yaml:3: driver.version: 580.105.08: the 470 series is the last driver for Kepler GPUs"},
		{"a BAR1 that is not a power of two",
			"base: t4\nname: x\nboard:\n  bar1: {total: 100Gi}\n",
			"profile x.yaml:4: board.bar1.total: 102400Mi is not a PCI BAR's size: a power of two, 1Mi or more (256Mi, 64Gi, ...)"},
		{"more GPUs than a coherent board has memory nodes",
			"base: gb200\nname: x\ngpus: 8\n",
			"profile x.yaml:3: gpus: 8, but topology.gpuNumaNodes lists 4: each GPU of a coherent board has its memory's own NUMA node; list one per GPU"},
		{"host names in another base than decimal",
			"base: h100\nname: x\ninfiniband:\n  fabric: {hostName: \"d%b\"}\n",
			`profile x.yaml:4: infiniband.fabric.hostName: "d%b" must be a host name with one %d (or %02d) for the node's number, such as "dgx%02d"`},
		{"a fabric name too long for the switches' descriptions",
			"base: h100\nname: x\ninfiniband:\n  fabric: {name: \"" + strings.Repeat("f", 40) + "\"}\n",
			`profile x.yaml:4: infiniband.fabric.name: "` + strings.Repeat("f", 40) + `" with switch model "MQM9700" makes switch descriptions of 71 bytes, past a NodeDescription's 64; shorten the name`},
		{"a GPU at function 1",
			"base: t4\nname: x\ngpus: 2\ntopology:\n  busIds: [\"0000:17:00.0\", \"0000:17:00.1\"]\n",
			`profile x.yaml:5: topology.busIds[1]: "0000:17:00.1": a GPU is function 0 of its PCI device (the others are its audio and USB controllers)`},
		{"a product name whose label would end in a dash",
			"base: a100\nname: x\nboard:\n  productName: \"NVIDIA A100 -\"\n",
			`profile x.yaml:4: board.productName: "NVIDIA A100 -" makes the node label nvidia.com/gpu.product="NVIDIA-A100--", which Kubernetes refuses (it must start and end with a letter or digit); begin and end the name with one`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(c.src))
			if err == nil {
				t.Fatal("accepted")
			}
			if err.Error() != c.want {
				t.Errorf("got\n  %s\nwant\n  %s", err, c.want)
			}
		})
	}
}

func clockList(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprint(2000 - i)
	}
	return strings.Join(s, ", ")
}

func TestBoundsAdmitTheirLimit(t *testing.T) {
	for _, src := range []string{
		"base: a100\nname: x\ngpus: 64\n",
		"base: a100\nname: x\nboard:\n  clocks:\n    supported:\n      - {memory: 1215, max: 2023, min: 1000, step: 1}\n",
		"base: a100\nname: x\nboard:\n  clocks:\n    supported:\n      - {memory: 1215, graphics: [" + clockList(1024) + "]}\n",
		"base: a100\nname: x\nboard:\n  productName: NVIDIA " + strings.Repeat("x", 56) + "\n", // 63 characters
		"base: a100\nname: x\nboard:\n  productName: \"NVIDIA A100 (hot) \u00e9dition\"\n",
	} {
		if _, err := Parse("x.yaml", []byte(src)); err != nil {
			t.Errorf("%q: %v", src, err)
		}
	}
}

// ProductLabel must give what gpu-feature-discovery gives (sanitise in
// k8s-device-plugin v0.18.2 internal/lm/resource.go: drop characters other
// than [A-Za-z0-9-_. ], then join the words with "-").
func TestProductLabelIsGFDs(t *testing.T) {
	for name, want := range map[string]string{
		"NVIDIA A100-SXM4-40GB":          "NVIDIA-A100-SXM4-40GB",
		"NVIDIA H100 80GB HBM3":          "NVIDIA-H100-80GB-HBM3",
		"NVIDIA GB200":                   "NVIDIA-GB200",
		"Tesla T4":                       "Tesla-T4",
		"NVIDIA L40S":                    "NVIDIA-L40S",
		"NVIDIA RTX 6000 Ada Generation": "NVIDIA-RTX-6000-Ada-Generation",
		"NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition": "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition",
		"Quadro RTX 6000 with Max-Q Design":                       "Quadro-RTX-6000-with-Max-Q-Design",
		"NVIDIA A100 (hot)":                                       "NVIDIA-A100-hot",
		"  NVIDIA   A100\t80GB ":                                  "NVIDIA-A10080GB", // GFD drops a tab before it splits words
		"GeForce GTX 1080/PCIe/SSE2":                              "GeForce-GTX-1080PCIeSSE2",
		"NVIDIA GH200 480GB, v1.0_a":                              "NVIDIA-GH200-480GB-v1.0_a",
		"GPU \u00e9 X":                                            "GPU-X",
	} {
		if got := ProductLabel(name); got != want {
			t.Errorf("ProductLabel(%q) = %q, want %q", name, got, want)
		}
	}
}

// gfdSanitise restates GFD's sanitise (k8s-device-plugin v0.18.2
// internal/lm/resource.go), the reference ProductLabel must agree with.
func gfdSanitise(input string) string {
	input = regexp.MustCompile("[^A-Za-z0-9-_. ]").ReplaceAllString(input, "")
	return strings.Join(strings.Fields(input), "-")
}

func TestProductLabelAgreesWithGFDOnEveryCharacter(t *testing.T) {
	for r := rune(0); r < 0x3100; r++ {
		for _, in := range []string{"A" + string(r) + "B", " " + string(r) + " x" + string(r) + string(r) + " "} {
			if got, want := ProductLabel(in), gfdSanitise(in); got != want {
				t.Errorf("ProductLabel(%q) = %q, GFD gives %q", in, got, want)
			}
		}
	}
}

func TestEveryBuiltinBoardMakesAValidProductLabel(t *testing.T) {
	for _, name := range Builtins() {
		p, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		v := ProductLabel(p.Board.ProductName)
		if errs := content.IsLabelValue(v); len(errs) > 0 || v != strings.ReplaceAll(p.Board.ProductName, " ", "-") {
			t.Errorf("%s: %q gives %q: %v", name, p.Board.ProductName, v, errs)
		}
	}
}
