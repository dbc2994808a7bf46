//go:build integration

package ibshim_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
)

// topoMatrix reads nvidia-smi topo -m: the cell of each row and column
// name, such as {"GPU0", "NIC3"}. R470 names a NIC by its RDMA device, in
// the same order: mlx5_3 is NIC3.
func topoMatrix(t *testing.T, out string) map[[2]string]string {
	t.Helper()
	out = regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(out, "")
	out = regexp.MustCompile(`(?m)(^|\t)mlx5_(\d+)`).ReplaceAllString(out, "${1}NIC$2")
	lines := strings.Split(out, "\n")
	if len(lines) < 2 {
		t.Fatalf("topo -m:\n%s", out)
	}
	cols := strings.Split(lines[0], "\t") // the first names the rows
	dev := regexp.MustCompile(`^(GPU|NIC)\d+$`)
	m := map[[2]string]string{}
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		if len(f) < len(cols) || !dev.MatchString(f[0]) {
			continue
		}
		for i, c := range cols {
			if dev.MatchString(c) {
				m[[2]string{f[0], c}] = strings.TrimSpace(f[i])
			}
		}
	}
	if len(m) == 0 {
		t.Fatalf("no GPU or NIC cells in topo -m:\n%s", out)
	}
	return m
}

// Real topo -m captures: the columns, then every cell of each row shown
// and a GPU's affinity columns (CPU, NUMA, GPU NUMA ID). nvidia-smi asks
// NVML the PCIe path between each GPU and NIC, and the mock answers from
// the same PCI tree lspci and hwloc read, so the mock nodes' matrices must
// be these.
var realTopo = map[string]string{
	// A DGX H100 (a user's capture, R5xx; its last six NIC rows were cut):
	// each GPU PXB to its own ConnectX-7, a storage card's two ports PIX,
	// NODE to the GPUs of their socket; no GPU NUMA ID (N/A) on x86.
	"h100": `
GPU0 GPU1 GPU2 GPU3 GPU4 GPU5 GPU6 GPU7 NIC0 NIC1 NIC2 NIC3 NIC4 NIC5 NIC6 NIC7 NIC8 NIC9 NIC10 NIC11
GPU0  X   NV18 NV18 NV18 NV18 NV18 NV18 NV18 PXB NODE NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS 0-55,112-167 0 N/A
GPU1  NV18 X   NV18 NV18 NV18 NV18 NV18 NV18 NODE NODE NODE PXB NODE NODE SYS SYS SYS SYS SYS SYS 0-55,112-167 0 N/A
GPU2  NV18 NV18 X   NV18 NV18 NV18 NV18 NV18 NODE NODE NODE NODE PXB NODE SYS SYS SYS SYS SYS SYS 0-55,112-167 0 N/A
GPU3  NV18 NV18 NV18 X   NV18 NV18 NV18 NV18 NODE NODE NODE NODE NODE PXB SYS SYS SYS SYS SYS SYS 0-55,112-167 0 N/A
GPU4  NV18 NV18 NV18 NV18 X   NV18 NV18 NV18 SYS SYS SYS SYS SYS SYS PXB NODE NODE NODE NODE NODE 56-111,168-223 1 N/A
GPU5  NV18 NV18 NV18 NV18 NV18 X   NV18 NV18 SYS SYS SYS SYS SYS SYS NODE NODE NODE PXB NODE NODE 56-111,168-223 1 N/A
GPU6  NV18 NV18 NV18 NV18 NV18 NV18 X   NV18 SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE PXB NODE 56-111,168-223 1 N/A
GPU7  NV18 NV18 NV18 NV18 NV18 NV18 NV18 X   SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE NODE PXB 56-111,168-223 1 N/A
NIC0  PXB NODE NODE NODE SYS SYS SYS SYS X   NODE NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS
NIC1  NODE NODE NODE NODE SYS SYS SYS SYS NODE X   PIX NODE NODE NODE SYS SYS SYS SYS SYS SYS
NIC2  NODE NODE NODE NODE SYS SYS SYS SYS NODE PIX X   NODE NODE NODE SYS SYS SYS SYS SYS SYS
NIC3  NODE PXB NODE NODE SYS SYS SYS SYS NODE NODE NODE X   NODE NODE SYS SYS SYS SYS SYS SYS
NIC4  NODE NODE PXB NODE SYS SYS SYS SYS NODE NODE NODE NODE X   NODE SYS SYS SYS SYS SYS SYS
NIC5  NODE NODE NODE PXB SYS SYS SYS SYS NODE NODE NODE NODE NODE X   SYS SYS SYS SYS SYS SYS
`,
	// A GB200 NVL72 compute tray (a user's capture, R570): each GPU's HBM is
	// a NUMA node of its own, so it is SYS to every NIC; the NICs, each in a
	// PCI domain of its own, are SYS to each other but for the two ports of
	// a BlueField-3 (PIX).
	"gb200": `
GPU0 GPU1 GPU2 GPU3 NIC0 NIC1 NIC2 NIC3 NIC4 NIC5 NIC6 NIC7
GPU0  X   NV18 NV18 NV18 SYS SYS SYS SYS SYS SYS SYS SYS 0-71 0,3-9,11-17 2
GPU1  NV18 X   NV18 NV18 SYS SYS SYS SYS SYS SYS SYS SYS 0-71 0,3-9,11-17 10
GPU2  NV18 NV18 X   NV18 SYS SYS SYS SYS SYS SYS SYS SYS 72-143 1,19-25,27-33 18
GPU3  NV18 NV18 NV18 X   SYS SYS SYS SYS SYS SYS SYS SYS 72-143 1,19-25,27-33 26
NIC0  SYS SYS SYS SYS X   SYS SYS SYS SYS SYS SYS SYS
NIC1  SYS SYS SYS SYS SYS X   SYS SYS SYS SYS SYS SYS
NIC2  SYS SYS SYS SYS SYS SYS X   PIX SYS SYS SYS SYS
NIC3  SYS SYS SYS SYS SYS SYS PIX X   SYS SYS SYS SYS
NIC4  SYS SYS SYS SYS SYS SYS SYS SYS X   SYS SYS SYS
`,
	// A DGX A100 (a user's capture from a release with no GPU NUMA ID
	// column, NICs named mlx5_0 to mlx5_11). Its CPUs
	// are in NPS4, so each GPU pair and its two HCAs have a NUMA node of
	// their own, and the storage cards' ports (NIC4/5, NIC10/11) are SYS to
	// every GPU.
	"a100": `
GPU0 GPU1 GPU2 GPU3 GPU4 GPU5 GPU6 GPU7 NIC0 NIC1 NIC2 NIC3 NIC4 NIC5 NIC6 NIC7 NIC8 NIC9 NIC10 NIC11
GPU0  X   NV12 NV12 NV12 NV12 NV12 NV12 NV12 PXB PXB SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS 48-63,176-191 3
GPU1  NV12 X   NV12 NV12 NV12 NV12 NV12 NV12 PXB PXB SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS 48-63,176-191 3
GPU2  NV12 NV12 X   NV12 NV12 NV12 NV12 NV12 SYS SYS PXB PXB SYS SYS SYS SYS SYS SYS SYS SYS 16-31,144-159 1
GPU3  NV12 NV12 NV12 X   NV12 NV12 NV12 NV12 SYS SYS PXB PXB SYS SYS SYS SYS SYS SYS SYS SYS 16-31,144-159 1
GPU4  NV12 NV12 NV12 NV12 X   NV12 NV12 NV12 SYS SYS SYS SYS SYS SYS PXB PXB SYS SYS SYS SYS 112-127,240-255 7
GPU5  NV12 NV12 NV12 NV12 NV12 X   NV12 NV12 SYS SYS SYS SYS SYS SYS PXB PXB SYS SYS SYS SYS 112-127,240-255 7
GPU6  NV12 NV12 NV12 NV12 NV12 NV12 X   NV12 SYS SYS SYS SYS SYS SYS SYS SYS PXB PXB SYS SYS 80-95,208-223 5
GPU7  NV12 NV12 NV12 NV12 NV12 NV12 NV12 X   SYS SYS SYS SYS SYS SYS SYS SYS PXB PXB SYS SYS 80-95,208-223 5
NIC0  PXB PXB SYS SYS SYS SYS SYS SYS X   PXB SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS
NIC1  PXB PXB SYS SYS SYS SYS SYS SYS PXB X   SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS
NIC2  SYS SYS PXB PXB SYS SYS SYS SYS SYS SYS X   PXB SYS SYS SYS SYS SYS SYS SYS SYS
NIC3  SYS SYS PXB PXB SYS SYS SYS SYS SYS SYS PXB X   SYS SYS SYS SYS SYS SYS SYS SYS
NIC4  SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS X   PIX SYS SYS SYS SYS SYS SYS
NIC5  SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS PIX X   SYS SYS SYS SYS SYS SYS
NIC6  SYS SYS SYS SYS PXB PXB SYS SYS SYS SYS SYS SYS SYS SYS X   PXB SYS SYS SYS SYS
NIC7  SYS SYS SYS SYS PXB PXB SYS SYS SYS SYS SYS SYS SYS SYS PXB X   SYS SYS SYS SYS
NIC8  SYS SYS SYS SYS SYS SYS PXB PXB SYS SYS SYS SYS SYS SYS SYS SYS X   PXB SYS SYS
NIC9  SYS SYS SYS SYS SYS SYS PXB PXB SYS SYS SYS SYS SYS SYS SYS SYS PXB X   SYS SYS
NIC10 SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS X   PIX
NIC11 SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS PIX X
`,
}

// Every release that runs the board; R470 runs no Hopper or Blackwell GPU,
// so it shows their links as PCIe paths (README), and only a100 is asked.
func TestNvidiaSMITopoMatchesRealNodes(t *testing.T) {
	for prof, capture := range realTopo {
		for _, smi := range testenv.NvidiaSMIs(t) {
			if strings.HasPrefix(smi.Version, "470.") && prof != "a100" {
				continue
			}
			t.Run(prof+"/"+smi.Version, func(t *testing.T) {
				matchesReal(t, nodeOf(t, prof, smi.Path+" topo -m"), capture)
			})
		}
	}
}

// matchesReal compares topo -m's output with a real capture: the device
// columns, every cell the capture shows, a GPU's affinity columns (CPU,
// NUMA and, in releases that print it, GPU NUMA ID) and the symmetry of
// the rows the capture cut.
func matchesReal(t *testing.T, out, capture string) {
	t.Helper()
	m := topoMatrix(t, out)
	lines := strings.Split(strings.TrimSpace(capture), "\n")
	cols := strings.Fields(lines[0])
	var got []string // the device columns topo -m printed
	for c := range m {
		if c[0] == "GPU0" {
			got = append(got, c[1])
		}
	}
	if len(got) != len(cols) {
		t.Errorf("topo -m has %d GPU and NIC columns %v, real %d", len(got), got, len(cols))
	}
	aff := map[string][]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Split(l, "\t")
		if len(f) > len(cols) && strings.HasPrefix(f[0], "GPU") {
			for _, c := range f[len(cols)+1:] {
				if c = strings.TrimSpace(c); c != "" {
					aff[f[0]] = append(aff[f[0]], c)
				}
			}
		}
	}
	gpuNUMAColumn := strings.Contains(out, "GPU NUMA ID")
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		row := f[0]
		for i, want := range f[1 : len(cols)+1] {
			if got := m[[2]string{row, cols[i]}]; want != "X" && got != want {
				t.Errorf("%s to %s: %q, real %s", row, cols[i], got, want)
			}
		}
		want := f[len(cols)+1:]
		if len(want) == 3 && !gpuNUMAColumn { // a release without the column
			want = want[:2]
		}
		if len(want) > 0 && !slices.Equal(aff[row][:min(len(want), len(aff[row]))], want) {
			t.Errorf("%s affinity columns %q, real %q", row, aff[row], want)
		}
		if len(want) == 3 && len(aff[row]) != 3 {
			t.Errorf("%s affinity columns %q, real %q", row, aff[row], want)
		}
	}
	for k, v := range m {
		if back := m[[2]string{k[1], k[0]}]; back != v {
			t.Errorf("%s to %s is %s, back %s", k[0], k[1], v, back)
		}
	}
}

// The same DGX A100 capture asks which GPUs are near CPUs 48 and 222.
func TestNvidiaSMITopoCPUIsARealDGXA100s(t *testing.T) {
	out := nodeOf(t, "a100", "nvidia-smi topo -c 48; nvidia-smi topo -c 222")
	for _, want := range []string{"affinity with CPU 48 are:\n0, 1\n", "affinity with CPU 222 are:\n6, 7\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("topo -c: want %q in:\n%s", want, out)
		}
	}
}
