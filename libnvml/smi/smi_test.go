//go:build integration

package smi

import (
	"encoding/csv"
	"encoding/xml"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/profile"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// smi runs the real nvidia-smi against the mock with a compiled snapshot.
func smi(t *testing.T, snap string, extraEnv []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(testenv.NvidiaSMI(t), args...)
	cmd.Env = testenv.Env(t, snap, extraEnv...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run nvidia-smi %v: %v", args, err)
	}
	return string(out), code
}

var (
	dateLine = regexp.MustCompile(`(?m)^[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9]\d \d\d:\d\d:\d\d \d{4} +$`)
	stamp    = regexp.MustCompile(`(Timestamp +: |<timestamp>)[^<\n]*`)
)

// normalize removes the wall-clock time nvidia-smi prints.
func normalize(s string) string {
	s = dateLine.ReplaceAllString(s, "<date>")
	return stamp.ReplaceAllString(s, "${1}<date>")
}

var queryFields = "index,name,uuid,pci.bus_id,memory.total,memory.used,memory.free,temperature.gpu,power.draw,power.limit,utilization.gpu,clocks.sm,clocks.max.sm,compute_cap,driver_version,pstate"

var views = []struct {
	name string
	args []string
}{
	{"default", nil},
	{"list", []string{"-L"}},
	{"query", []string{"-q"}},
	{"query-xml", []string{"-q", "-x"}},
	{"query-gpu", []string{"--query-gpu=" + queryFields, "--format=csv"}},
	{"topo", []string{"topo", "-m"}},
	{"nvlink", []string{"nvlink", "-s"}},
}

// Every view of the a100 profile, and the node-level views (default, -L,
// topo -m, nvlink -s) of every built-in profile, against golden files: what a
// user of that node sees.
func TestEveryViewMatchesItsGoldenFile(t *testing.T) {
	nodeViews := map[string]bool{"default": true, "list": true, "topo": true, "nvlink": true}
	for _, name := range profile.Builtins() {
		snap, _ := testenv.Snapshot(t, name, 0)
		for _, v := range views {
			if name != "a100" && !nodeViews[v.name] {
				continue
			}
			t.Run(name+"/"+v.name, func(t *testing.T) {
				out, code := smi(t, snap, nil, v.args...)
				if code != 0 {
					t.Fatalf("nvidia-smi %v exited %d:\n%s", v.args, code, out)
				}
				for _, bad := range []string{"Unknown Error", "Function Not Found", "nvmock:"} {
					if strings.Contains(out, bad) {
						t.Errorf("output contains %q", bad)
					}
				}
				checkGolden(t, filepath.Join("testdata", name+"-"+v.name+".golden"), normalize(out))
			})
		}
	}
}

func checkGolden(t *testing.T, golden, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -tags integration ./libnvml/smi -update)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s:\n%s", golden, testenv.FirstDiff(string(want), got))
	}
}

type xmlLog struct {
	Driver string         `xml:"driver_version"`
	CUDA   string         `xml:"cuda_version"`
	Count  int            `xml:"attached_gpus"`
	GPUs   []xmlGPUClocks `xml:"gpu"`
}

type xmlGPUClocks struct {
	xmlGPU
	Clocks []struct {
		Mem      string   `xml:"value"`
		Graphics []string `xml:"supported_graphics_clock"`
	} `xml:"supported_clocks>supported_mem_clock"`
}

type xmlGPU struct {
	ID       string `xml:"id,attr"`
	Name     string `xml:"product_name"`
	UUID     string `xml:"uuid"`
	Serial   string `xml:"serial"`
	Minor    string `xml:"minor_number"`
	VBIOS    string `xml:"vbios_version"`
	FBTotal  string `xml:"fb_memory_usage>total"`
	Draw     string `xml:"gpu_power_readings>instant_power_draw"`
	MaxLimit string `xml:"gpu_power_readings>max_power_limit"`
	Shutdown string `xml:"temperature>gpu_temp_max_threshold"`
	MaxSM    string `xml:"max_clocks>sm_clock"`
	LinkGen  string `xml:"pci>pci_gpu_link_info>pcie_gen>max_link_gen"`
}

func TestQueryXMLParsesAndCarriesTheProfile(t *testing.T) {
	snap, p := testenv.Snapshot(t, "a100", 0)
	out, code := smi(t, snap, nil, "-q", "-x")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	var log xmlLog
	dec := xml.NewDecoder(strings.NewReader(out))
	dec.Strict = false // nvidia-smi prints a DOCTYPE naming an external DTD
	if err := dec.Decode(&log); err != nil {
		t.Fatalf("-q -x is not XML: %v", err)
	}
	if log.Driver != p.Driver.Version || log.CUDA != p.Driver.CUDAVersion || log.Count != p.GPUs || len(log.GPUs) != p.GPUs {
		t.Fatalf("header: driver %q cuda %q count %d/%d", log.Driver, log.CUDA, log.Count, len(log.GPUs))
	}
	b := p.Board
	ids := snapshot.Identities(p, testenv.Seed)
	for i, g := range log.GPUs {
		want := xmlGPU{
			ID: ids[i].BusID, Name: b.ProductName, UUID: ids[i].UUID, Serial: ids[i].Serial,
			Minor: strconv.Itoa(i), VBIOS: b.VBIOSVersion,
			FBTotal:  fmt.Sprintf("%d MiB", uint64(b.Memory.Total)>>20),
			Draw:     fmt.Sprintf("%.2f W", *b.Power.Draw),
			MaxLimit: fmt.Sprintf("%.2f W", *b.Power.MaxLimit),
			Shutdown: fmt.Sprintf("%d C", *b.Thermal.Shutdown),
			MaxSM:    fmt.Sprintf("%d MHz", *b.Clocks.Max.SM),
			LinkGen:  strconv.Itoa(int(b.PCI.MaxLinkGen)),
		}
		if got := g.xmlGPU; got != want {
			t.Errorf("gpu %d:\n got  %+v\n want %+v", i, got, want)
		}
		sc := b.Clocks.Supported[0]
		if len(g.Clocks) != 1 || g.Clocks[0].Mem != fmt.Sprintf("%d MHz", sc.Memory) ||
			len(g.Clocks[0].Graphics) != int((sc.Max-sc.Min)/sc.Step+1) || g.Clocks[0].Graphics[0] != fmt.Sprintf("%d MHz", sc.Max) {
			t.Errorf("gpu %d supported clocks: %+v", i, g.Clocks)
		}
	}
}

func TestQueryGPUValuesComeFromTheProfile(t *testing.T) {
	snap, p := testenv.Snapshot(t, "a100", 0)
	out, code := smi(t, snap, nil, "--query-gpu="+queryFields, "--format=csv,noheader")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	b := p.Board
	total := uint64(b.Memory.Total) >> 20
	free := (uint64(b.Memory.Total) - uint64(b.Memory.Reserved) - uint64(b.Memory.Used)) >> 20
	for i, id := range snapshot.Identities(p, testenv.Seed) {
		want := []string{strconv.Itoa(i), b.ProductName, id.UUID, id.BusID,
			fmt.Sprintf("%d MiB", total), fmt.Sprintf("%d MiB", uint64(b.Memory.Used)>>20), fmt.Sprintf("%d MiB", free),
			strconv.Itoa(int(*b.Thermal.GPU)), fmt.Sprintf("%.2f W", *b.Power.Draw), fmt.Sprintf("%.2f W", *b.Power.Limit),
			fmt.Sprintf("%d %%", *b.Utilization.GPU), fmt.Sprintf("%d MHz", *b.Clocks.Current.SM), fmt.Sprintf("%d MHz", *b.Clocks.Max.SM),
			b.ComputeCapability, p.Driver.Version, b.Modes.PerformanceState}
		if i >= len(rows) {
			t.Fatalf("only %d rows", len(rows))
		}
		for k := range rows[i] {
			rows[i][k] = strings.TrimSpace(rows[i][k])
		}
		if strings.Join(rows[i], "|") != strings.Join(want, "|") {
			t.Errorf("gpu %d:\n got  %v\n want %v", i, rows[i], want)
		}
	}
}

// devRoot makes a dev directory holding the named nodes (plain files do).
func devRoot(t *testing.T, nodes ...string) string {
	d := t.TempDir()
	for _, n := range nodes {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(d, n)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func TestVisibilityAsContainersSeeIt(t *testing.T) {
	snap, p := testenv.Snapshot(t, "a100", 0)
	ids := snapshot.Identities(p, testenv.Seed)
	for _, c := range []struct {
		name string
		env  []string
		want []int // node indices listed by -L; nil: "No devices were found"
	}{
		{"a plain process without device nodes sees every GPU", nil, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"a container given GPUs 1 and 3 sees exactly those", []string{"NVMOCK_DEV_ROOT=" + devRoot(t, "nvidiactl", "nvidia1", "nvidia3")}, []int{1, 3}},
		{"a container given no GPU sees none", []string{"NVMOCK_DEV_ROOT=" + devRoot(t, "nvidiactl")}, nil},
		{"a pod mounting the node's device nodes with void sees all", []string{"NVMOCK_DEV_ROOT=" + devRoot(t, "nvidiactl", "nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidia4", "nvidia5", "nvidia6", "nvidia7"), "NVIDIA_VISIBLE_DEVICES=void"}, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		// The real libnvidia-ml ignores NVIDIA_VISIBLE_DEVICES: on a host, a real node lists all 8.
		{"NVIDIA_VISIBLE_DEVICES on a host does not hide GPUs", []string{"NVIDIA_VISIBLE_DEVICES=3"}, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"a container's device nodes decide, not NVIDIA_VISIBLE_DEVICES", []string{"NVMOCK_DEV_ROOT=" + devRoot(t, "nvidiactl", "nvidia1", "nvidia3"), "NVIDIA_VISIBLE_DEVICES=3,4"}, []int{1, 3}},
		{"NVMOCK_VISIBLE_DEVICES by index narrows a host process", []string{"NVMOCK_VISIBLE_DEVICES=6,2"}, []int{2, 6}},
		{"NVMOCK_VISIBLE_DEVICES by UUID", []string{"NVMOCK_VISIBLE_DEVICES=" + ids[5].UUID}, []int{5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.want == nil {
				// What nvidia-smi says on a node with no GPU.
				if out, code := smi(t, snap, c.env); code != 6 || out != "No devices were found\n" {
					t.Errorf("default view: exit %d:\n%s", code, out)
				}
				if out, code := smi(t, snap, c.env, "-L"); code != 0 || out != "No devices found.\n" {
					t.Errorf("-L: exit %d:\n%s", code, out)
				}
				return
			}
			out, code := smi(t, snap, c.env, "-L")
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			var want strings.Builder
			for vis, node := range c.want {
				fmt.Fprintf(&want, "GPU %d: %s (UUID: %s)\n", vis, p.Board.ProductName, ids[node].UUID)
			}
			if out != want.String() {
				t.Errorf("got:\n%swant:\n%s", out, want.String())
			}
		})
	}
}

// A container given GPU nodes but not the node's snapshot (a DRA claim in a
// namespace that did not opt in) sees the built-in board, and the library
// says so once; a plain process on a laptop, the built-in board's home,
// hears nothing. Review: the wrong board passed unnoticed.
func TestTheBuiltInBoardInAContainerIsSaid(t *testing.T) {
	root := t.TempDir()
	lib := filepath.Join(root, "usr", "lib64", "libnvidia-ml.so.1")
	data, err := os.ReadFile(filepath.Join(testenv.LibDir(t), "libnvidia-ml.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, data, 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"LD_LIBRARY_PATH=" + filepath.Dir(lib)}
	warning := "nvmock: no snapshot at " + filepath.Join(root, "etc", "nvmock", "snapshot") + ": showing the built-in a100 board, not this node's GPUs"
	out, code := smi(t, "", append(env, "NVMOCK_DEV_ROOT="+devRoot(t, "nvidiactl", "nvidia2")), "-L")
	if code != 0 || strings.Count(out, warning) != 1 || !strings.Contains(out, "GPU 0: NVIDIA A100-SXM4-40GB") {
		t.Errorf("in a container: exit %d:\n%s\nwant one GPU of the built-in board and once %q", code, out, warning)
	}
	out, code = smi(t, "", env, "-L")
	if code != 0 || strings.Contains(out, "nvmock:") || strings.Count(out, "GPU ") != 8 {
		t.Errorf("on a laptop: exit %d:\n%s\nwant the built-in board's 8 GPUs and no warning", code, out)
	}
}

func TestBadVisibleDevicesEntryFailsInitWithOneLine(t *testing.T) {
	snap, _ := testenv.Snapshot(t, "a100", 0)
	out, code := smi(t, snap, []string{"NVMOCK_VISIBLE_DEVICES=0,17"}, "-L")
	if code == 0 || !strings.Contains(out, `nvmock: NVMOCK_VISIBLE_DEVICES=0,17: entry "17" names no GPU`) {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

func TestSixtyFourGPUsAllAppear(t *testing.T) {
	snap, p := testenv.Snapshot(t, "a100", 64)
	out, code := smi(t, snap, nil, "-L")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := snapshot.Identities(p, testenv.Seed)[63]
	if len(lines) != 64 || !strings.Contains(lines[63], last.UUID) {
		t.Errorf("%d lines, last %q", len(lines), lines[len(lines)-1])
	}
	if _, code := smi(t, snap, nil, "-q"); code != 0 {
		t.Errorf("-q over 64 GPUs exited %d", code)
	}
}

// nvidia-smi reads the enforced limit through its export table (0x360).
func TestEnforcedPowerLimitQueryComesFromTheProfile(t *testing.T) {
	snap, p := testenv.Snapshot(t, "h100", 0)
	out, code := smi(t, snap, []string{"NVMOCK_VISIBLE_DEVICES=0"}, "--query-gpu=enforced.power.limit", "--format=csv,noheader")
	if want := fmt.Sprintf("%.2f W\n", *p.Board.Power.EnforcedLimit); code != 0 || out != want {
		t.Errorf("exit %d, got %q, want %q", code, out, want)
	}
}
