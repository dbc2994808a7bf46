//go:build integration

package smi

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// topoCell is the cell of GPU a's row and GPU b's column in topo -m.
func topoCell(t *testing.T, out string, a, b int) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		f := strings.Split(l, "\t")
		if len(f) > b+1 && strings.TrimSpace(regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(f[0], "")) == "GPU"+string(rune('0'+a)) {
			return strings.TrimSpace(f[b+1])
		}
	}
	t.Fatalf("no GPU%d row in topo -m:\n%s", a, out)
	return ""
}

// MIG mode costs a GPU its NVLink peers, and an A100 its links as well:
// NVIDIA's Fabric Manager guide says an A100's NVLinks (and the NVSwitches'
// side) are trained off while MIG is on and retrained when it is off again,
// where Hopper's and later stay active. nvidia-smi shows it: nvlink -s,
// topo -m (the PCIe path instead of NV12) and topo -p2p n.
func TestMIGModeTakesAGPUsNVLinkPeers(t *testing.T) {
	for _, board := range []string{"a100", "h100"} {
		snap, _ := testenv.Snapshot(t, board, 2)
		links := map[string]string{"a100": "NV12", "h100": "NV18"}[board]
		for _, s := range testenv.NvidiaSMIs(t) {
			if board == "h100" && major(s.Version) < 525 {
				continue // no R470 driver runs Hopper
			}
			t.Run(board+"/"+s.Version, func(t *testing.T) {
				testenv.LiveState(t, snap, 2, time.Time{})
				run := smiRunner(t, s.Path, snap)
				p2p := func() string { return strings.Fields(strings.Split(run("topo", "-p2p", "n"), "\n")[1])[2] }
				if c, p := topoCell(t, run("topo", "-m"), 0, 1), p2p(); c != links || p != "OK" {
					t.Fatalf("MIG off: topo -m %s, p2p %s; want %s, OK", c, p, links)
				}
				run("-i", "0", "-mig", "1")
				gpu0, gpu1 := run("nvlink", "-s", "-i", "0"), run("nvlink", "-s", "-i", "1")
				if !strings.Contains(gpu1, "Link 0: 25") && !strings.Contains(gpu1, "Link 0: 26.562 GB/s") {
					t.Errorf("nvlink -s of GPU 1, MIG off:\n%s", gpu1)
				}
				c, p := topoCell(t, run("topo", "-m"), 0, 1), p2p()
				if p != "NS" {
					t.Errorf("topo -p2p n with GPU 0 in MIG mode: %s, want NS", p)
				}
				if board == "h100" {
					if c != links || !strings.Contains(gpu0, "Link 17: 26.562 GB/s") {
						t.Errorf("an H100's links stay active in MIG mode: topo -m %s, nvlink -s:\n%s", c, gpu0)
					}
					return
				}
				if c == links || strings.Contains(gpu0, "GB/s") {
					t.Errorf("an A100's links are trained off in MIG mode: topo -m %s, nvlink -s:\n%s", c, gpu0)
				}
				run("-i", "0", "-mig", "0")
				if c, p := topoCell(t, run("topo", "-m"), 0, 1), p2p(); c != links || p != "OK" {
					t.Errorf("MIG off again: topo -m %s, p2p %s; want %s, OK", c, p, links)
				}
			})
		}
	}
}

// A link taken down by a fault shows inactive in nvlink -s, which reads
// the link state field, and its GPU's row of topo -m counts one link less.
func TestAnNVLinkFaultShowsTheLinkInactive(t *testing.T) {
	snap, _ := testenv.Snapshot(t, "a100", 2)
	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			f := testenv.LiveState(t, snap, 2, time.Time{})
			err := f.Update(func(st *live.State, now int64) error {
				return st.AddFault(0, live.Fault{Kind: live.FaultNvlinkDown, Count: 1}, now)
			})
			if err != nil {
				t.Fatal(err)
			}
			out := smiRunner(t, s.Path, snap)("nvlink", "-s", "-i", "0")
			if !strings.Contains(out, "Link 1: <inactive>") || !strings.Contains(out, "Link 2: 25") {
				t.Errorf("nvlink -s with link 1 down:\n%s", out)
			}
			topo := smiRunner(t, s.Path, snap)("topo", "-m")
			if a, b := topoCell(t, topo, 0, 1), topoCell(t, topo, 1, 0); a != "NV11" || b != "NV12" {
				t.Errorf("topo -m with GPU 0's link 1 down: GPU0-GPU1 %s, GPU1-GPU0 %s; want NV11, NV12", a, b)
			}
		})
	}
}

// A Grace-Blackwell GPU's NVLink-C2C links to its CPU show in nvidia-smi
// c2c -s with every release that has it (535 on), as NCCL's topology
// dump of a GB300 tray gives them: five links at 44712 MB/s. A board
// without C2C has none.
func TestC2CLinksOfAGraceBlackwellGPU(t *testing.T) {
	for _, s := range testenv.NvidiaSMIs(t) {
		if major(s.Version) < 535 {
			continue
		}
		t.Run(s.Version, func(t *testing.T) {
			for _, c := range []struct {
				board, want string
			}{{"gb300", strings.Repeat("44.712 GB/s\n", 5)}, {"h100", ""}} {
				snap, _ := testenv.Snapshot(t, c.board, 1)
				out := smiRunner(t, s.Path, snap)("c2c", "-s")
				links := regexp.MustCompile(`(?m)^\s+C2C Link (\d): (.*)$`).FindAllStringSubmatch(out, -1)
				var speeds strings.Builder
				for i, l := range links {
					if l[1] != strconv.Itoa(i) {
						t.Errorf("%s: link %s listed as the %d-th", c.board, l[1], i)
					}
					speeds.WriteString(l[2] + "\n")
				}
				if speeds.String() != c.want || (c.want == "" && !strings.Contains(out, "No Devices support C2C.")) {
					t.Errorf("%s: c2c -s:\n%s\nwant links %q", c.board, out, c.want)
				}
			}
		})
	}
}

// nvidia-smi nvlink -ec lists each link's lanes: four on an A100 (NVLink
// 3, as 470 takes them), two on an H100 and a B200 (NVLink 4 and 5).
// QA: 535 and later printed "Unable to retrieve Num Lanes" for every link
// (the export table's field 2 went unanswered) and then assumed four.
func TestNVLinkECCCountsListEachLinksLanes(t *testing.T) {
	for _, s := range testenv.NvidiaSMIs(t) {
		if major(s.Version) < 535 {
			continue
		}
		t.Run(s.Version, func(t *testing.T) {
			for board, lanes := range map[string]int{"a100": 4, "h100": 2, "b200": 2} {
				snap, _ := testenv.Snapshot(t, board, 1)
				out := smiRunner(t, s.Path, snap)("nvlink", "-ec")
				_, after, _ := strings.Cut(out, "Link 0:")
				link0, _, _ := strings.Cut(after, "Link 1:")
				if n := strings.Count(link0, "ECC Correction Count: 0"); n != lanes || strings.Contains(out, "Unable to retrieve") {
					t.Errorf("%s: nvlink -ec shows %d lanes on link 0, want %d:\n%s", board, n, lanes, out)
				}
			}
		})
	}
}
