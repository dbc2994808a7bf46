//go:build integration

package ibshim_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// topoMatrix reads nvidia-smi topo -m: the cell of each row and column
// name, such as {"GPU0", "NIC3"}.
func topoMatrix(t *testing.T, out string) map[[2]string]string {
	t.Helper()
	lines := strings.Split(regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(out, ""), "\n")
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

// nvidia-smi asks NVML the PCIe path between each GPU and NIC, and the
// mock answers from the same PCI tree lspci and hwloc read, so topo -m
// relates the NICs as on the real systems: a DGX H100's GPUs each PXB to
// their own ConnectX-7 (its user guide's layout) and the two ports of a
// storage card PIX, NODE to the GPUs of their socket (as a real H200
// node's); a DGX A100's GPU pairs PXB to their two HCAs (ucx-py#749)
// and its storage ports PIX.
func TestNvidiaSMITopoRelatesNICsAsOnRealNodes(t *testing.T) {
	for _, tc := range []struct {
		profile string
		want    map[string]string // "GPU0 NIC0": level
		ownNICs int               // PXB NICs per GPU
	}{
		{"h100", map[string]string{
			"GPU0 NIC0": "PXB", "GPU1 NIC3": "PXB", "GPU2 NIC4": "PXB", "GPU3 NIC5": "PXB",
			"GPU4 NIC6": "PXB", "GPU5 NIC9": "PXB", "GPU6 NIC10": "PXB", "GPU7 NIC11": "PXB",
			"NIC1 NIC2": "PIX", "NIC7 NIC8": "PIX", "GPU0 NIC1": "NODE", "GPU7 NIC8": "NODE",
			"GPU0 NIC8": "SYS", "GPU0 NIC6": "SYS", "NIC0 NIC3": "NODE",
		}, 1},
		{"a100", map[string]string{
			"GPU0 NIC0": "PXB", "GPU0 NIC1": "PXB", "GPU1 NIC0": "PXB", "GPU2 NIC2": "PXB", "GPU3 NIC3": "PXB",
			"GPU4 NIC6": "PXB", "GPU5 NIC7": "PXB", "GPU6 NIC8": "PXB", "GPU7 NIC9": "PXB",
			"NIC0 NIC1": "PXB", "NIC4 NIC5": "PIX", "NIC10 NIC11": "PIX", "GPU0 NIC6": "SYS",
		}, 2},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			m := topoMatrix(t, nodeOf(t, tc.profile, "nvidia-smi topo -m"))
			for k, want := range tc.want {
				a, b, _ := strings.Cut(k, " ")
				if got := m[[2]string{a, b}]; got != want {
					t.Errorf("%s to %s: %q, want %s", a, b, got, want)
				}
			}
			for k, v := range m {
				if back := m[[2]string{k[1], k[0]}]; back != v {
					t.Errorf("%s to %s is %s, back %s", k[0], k[1], v, back)
				}
				if k[0] != k[1] && !regexp.MustCompile(`^(PIX|PXB|PHB|NODE|SYS|NV\d+)$`).MatchString(v) {
					t.Errorf("%s to %s: %q", k[0], k[1], v)
				}
			}
			for g := 0; g < 8; g++ {
				own := 0
				for n := 0; n < 12; n++ {
					if m[[2]string{fmt.Sprintf("GPU%d", g), fmt.Sprintf("NIC%d", n)}] == "PXB" {
						own++
					}
				}
				if own != tc.ownNICs {
					t.Errorf("GPU%d is PXB to %d NICs, want %d", g, own, tc.ownNICs)
				}
			}
		})
	}
}
