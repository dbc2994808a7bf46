//go:build integration

package smi

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// The -lgip rows of the real boards (docs/research/mig.md 2.1-2.3):
// name, id, total, GiB, SM, DEC, ENC, CE, JPEG, OFA; "?" where no real
// row shows it (B200's 3g, 4g and 7g engines). The A100's memory is R580's
// (testdata/hardware/lgip-a100-r580.txt), as a 2025 driver before it shows
// too; the guide's 9.62, 19.50 and 39.25 GiB are R450.80's.
var realLGIP = map[string][]string{
	"a100": {
		"1g.5gb 19 7 4.75 14 0 0 1 0 0", "1g.5gb+me 20 1 4.75 14 1 0 1 1 1", "1g.10gb 15 4 9.75 14 1 0 1 0 0",
		"2g.10gb 14 3 9.75 28 1 0 2 0 0", "3g.20gb 9 2 19.62 42 2 0 3 0 0", "4g.20gb 5 1 19.62 56 2 0 4 0 0",
		"7g.40gb 0 1 39.38 98 5 0 7 1 1",
	},
	"h100": {
		"1g.10gb 19 7 9.75 16 1 0 1 1 0", "1g.10gb+me 20 1 9.75 16 1 0 1 1 1", "1g.20gb 15 4 19.62 26 1 0 1 1 0",
		"2g.20gb 14 3 19.62 32 2 0 2 2 0", "3g.40gb 9 2 39.50 60 3 0 3 3 0", "4g.40gb 5 1 39.50 64 4 0 4 4 0",
		"7g.80gb 0 1 79.25 132 7 0 8 7 1",
	},
	"b200": {
		"1g.23gb 19 7 20.50 18 1 0 2 1 0", "1g.23gb+me 20 1 20.50 18 1 0 2 1 1", "1g.45gb 15 4 44.25 30 1 0 2 1 0",
		"2g.45gb 14 3 44.25 36 2 0 4 2 0", "3g.90gb 9 2 89.00 70 ? ? ? ? ?", "4g.90gb 5 1 89.00 72 ? ? ? ? ?",
		"7g.180gb 0 1 178.50 148 ? ? ? ? ?",
	},
}

// sameRows compares rows field by field, "?" in want matching anything.
func sameRows(got, want []string) bool {
	return slices.EqualFunc(got, want, func(g, w string) bool {
		return slices.EqualFunc(strings.Fields(g), strings.Fields(w), func(a, b string) bool { return b == "?" || a == b })
	})
}

// The real -lgipp of the A100 and H100; B200's is inferred to be theirs.
const realLGIPP = `GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 20 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 15 Placements: {0,2,4,6}:2
GPU  0 Profile ID 14 Placements: {0,2,4}:2
GPU  0 Profile ID  9 Placements: {0,4}:4
GPU  0 Profile ID  5 Placement : {0}:4
GPU  0 Profile ID  0 Placement : {0}:8
`

var lgipRow = regexp.MustCompile(`(?m)^\|\s+0\s+MIG (\S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+)\s+No\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\n\|\s+(\d+)\s+(\d+)\s+(\d+)\s+\|$`)

// lgip parses -lgip into "name id total GiB SM DEC ENC CE JPEG OFA" rows
// and the free counts by name.
func lgip(out string) ([]string, map[string]string) {
	var rows []string
	free := map[string]string{}
	for _, m := range lgipRow.FindAllStringSubmatch(out, -1) {
		rows = append(rows, strings.Join([]string{m[1], m[2], m[4], m[5], m[6], m[7], m[8], m[9], m[10], m[11]}, " "))
		free[m[1]] = m[3]
	}
	return rows, free
}

// Every nvidia-smi partitions a mock A100, H100 and B200 as on the real boards:
// the profile table, placements, creating and listing instances, MIG
// devices in -L, the main view and -q, and destroying them again.
func TestEveryNvidiaSMIPartitionsMIG(t *testing.T) {
	for _, board := range []string{"a100", "h100", "b200"} {
		snap, p := testenv.Snapshot(t, board, 2)
		bus := snapshot.BusID(p, 0)
		three := map[string]string{"a100": "3g.20gb", "h100": "3g.40gb", "b200": "3g.90gb"}[board]
		one := map[string]string{"a100": "1g.5gb", "h100": "1g.10gb", "b200": "1g.23gb"}[board]
		// b200's profile has persistence mode off, as captured: nvidia-smi
		// warns of it when it changes the MIG mode.
		warn := ""
		if !p.Board.Modes.Persistence {
			warn = "\nWarning: persistence mode is disabled on device " + bus + ". See the Known Issues section of the nvidia-smi(1) man page" +
				" for more information. Run with [--help | -h] switch to get more information on how to enable persistence mode.\n"
		}
		for _, s := range testenv.NvidiaSMIs(t) {
			if board == "b200" && major(s.Version) < 535 {
				// Blackwell needs R570. 470's nvidia-smi, asking profile info
				// v1, which has no name, makes names of the memory
				// (1g.21gb for 20.50 GiB), where later ones print the driver's.
				continue
			}
			t.Run(board+"/"+s.Version, func(t *testing.T) {
				testenv.LiveState(t, snap, 2, time.Time{})
				run := smiRunner(t, s.Path, snap)
				// Rows are compared with runs of spaces squashed: the columns
				// are nvidia-smi's own.
				expect := func(out string, want ...string) {
					t.Helper()
					for _, w := range want {
						if !strings.Contains(squash(out), squash(w)) {
							t.Errorf("want %q in:\n%s", w, out)
						}
					}
				}

				expect(run("mig", "-lgi"), "No MIG-enabled devices found.")
				// 470 asks for the profiles its NVML knew: 1_SLICE_REV2
				// (id 15) came later.
				wantRows, wantPP := realLGIP[board], realLGIPP
				if strings.HasPrefix(s.Version, "470.") {
					wantRows = slices.DeleteFunc(slices.Clone(wantRows), func(r string) bool { return strings.Contains(r, " 15 ") })
					wantPP = strings.Replace(wantPP, "GPU  0 Profile ID 15 Placements: {0,2,4,6}:2\n", "", 1)
				}
				// With MIG off the boards' 570 and 580 drivers answer the
				// profiles; nvidia-smi 550 and later list them, all free,
				// as R580's does (testdata/hardware/lgip-h100-mig-off.txt),
				// where 470 and 535 first ask each GPU's MIG mode.
				rows, free := lgip(run("mig", "-lgip"))
				if major(s.Version) < 550 {
					if len(rows) != 0 {
						t.Errorf("-lgip lists profiles with MIG off: %v", rows)
					}
				} else {
					if !sameRows(rows, wantRows) {
						t.Errorf("-lgip with MIG off:\n%s\nwant the real board's\n%s", strings.Join(rows, "\n"), strings.Join(wantRows, "\n"))
					}
					for _, r := range rows {
						if name, total := strings.Fields(r)[0], strings.Fields(r)[2]; free[name] != total {
							t.Errorf("-lgip with MIG off: %s free %s of %s, want all free", name, free[name], total)
						}
					}
				}
				expect(run("-i", "0", "-mig", "1"), "Enabled MIG Mode for GPU "+bus+"\n"+warn+"All done.\n")
				// A GPU in MIG mode has no utilization of its own.
				if q := run("-i", "0", "--query-gpu=mig.mode.current,mig.mode.pending,utilization.gpu", "--format=csv,noheader"); !regexp.MustCompile(`^Enabled, Enabled, \[(N/A|Not Supported)\]\n$`).MatchString(q) {
					t.Errorf("--query-gpu of a GPU in MIG mode: %q", q)
				}

				rows, free = lgip(run("mig", "-lgip"))
				if !sameRows(rows, wantRows) {
					t.Errorf("-lgip:\n%s\nwant the real board's\n%s", strings.Join(rows, "\n"), strings.Join(wantRows, "\n"))
				}
				if free[one] != "7" {
					t.Errorf("-lgip: %s free %s, want 7", one, free[one])
				}
				if major(s.Version) >= 550 { // GPU 1, MIG off, too
					wantPP += strings.ReplaceAll(wantPP, "GPU  0", "GPU  1")
				}
				if out := run("mig", "-lgipp"); strings.TrimSpace(out) != strings.TrimSpace(wantPP) {
					t.Errorf("-lgipp:\n%s\nwant\n%s", out, wantPP)
				}

				expect(run("mig", "-cgi", "9,"+one, "-C"),
					fmt.Sprintf("Successfully created GPU instance ID  2 on GPU  0 using profile MIG %s (ID  9)\n", three),
					fmt.Sprintf("Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 using profile MIG %s (ID  2)\n", three),
					// After a 3g at 4:4, a 1g takes slice 0, as NVIDIA's
					// guide shows -cgi 9,19,14,19 on a real A100.
					fmt.Sprintf("Successfully created GPU instance ID  7 on GPU  0 using profile MIG %s (ID 19)\n", one))
				expect(run("mig", "-cgi", "0"), "Unable to create a GPU instance on GPU  0 using profile 0: Insufficient Resources")
				if _, free := lgip(run("mig", "-lgip")); free[one] != "3" || free[three] != "0" {
					t.Errorf("-lgip after creating: %s free %s (want 3), %s free %s (want 0)", one, free[one], three, free[three])
				}
				expect(run("mig", "-lgi"),
					fmt.Sprintf("| 0 MIG %s 19 7 0:1 |", one),
					fmt.Sprintf("| 0 MIG %s 9 2 4:4 |", three))
				expect(run("mig", "-lci"), fmt.Sprintf("| 0 2 MIG %s 2 0 0:3 |", three))
				expect(run("mig", "-lcip", "-gi", "2"),
					fmt.Sprintf("| 0 2 MIG 1c.%s 0 0/3 ", three),
					fmt.Sprintf("| 0 2 MIG %s 2* 0/1 ", three))

				out := run("-L")
				m := regexp.MustCompile(`(?m)^  MIG ` + regexp.QuoteMeta(three) + `\s+Device  0: \(UUID: (MIG-[0-9a-f-]{36})\)\n  MIG ` + regexp.QuoteMeta(one) + `\s+Device  1: \(UUID: MIG-[0-9a-f-]{36}\)\nGPU 1:`).FindStringSubmatch(out)
				if m == nil {
					t.Errorf("-L lacks the two MIG devices under GPU 0:\n%s", out)
				}
				expect(run(), "| 0 2 0 0 |", "| 0 7 0 1 |")
				q := run("-q", "-i", "0")
				expect(q, "MIG Device\n        Index                             : 0\n        GPU Instance ID                   : 2\n        Compute Instance ID               : 0\n")

				expect(run("-i", "0", "-mig", "0"), "In use by another client")
				expect(run("mig", "-dgi", "-gi", "2"), "In use by another client")
				expect(run("mig", "-dci"), "Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID  2")
				expect(run("mig", "-dgi"), "Successfully destroyed GPU instance ID  2 from GPU  0", "Successfully destroyed GPU instance ID  7 from GPU  0")
				expect(run("-i", "0", "-mig", "0"), "Disabled MIG Mode for GPU "+bus+"\n"+warn+"All done.\n")
				expect(run("mig", "-lgi"), "No MIG-enabled devices found.")
			})
		}
	}
}

// The capture of a real H100 with MIG off has the rows realLGIP holds for
// it, every instance free.
func TestRealH100WithMIGOffListsEveryProfileFree(t *testing.T) {
	out, err := os.ReadFile(filepath.Join("testdata", "hardware", "lgip-h100-mig-off.txt"))
	if err != nil {
		t.Fatal(err)
	}
	rows, free := lgip(string(out))
	if strings.Join(rows, "\n") != strings.Join(realLGIP["h100"], "\n") {
		t.Errorf("capture rows:\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(realLGIP["h100"], "\n"))
	}
	for _, r := range rows {
		if f := strings.Fields(r); free[f[0]] != f[2] {
			t.Errorf("capture: %s free %s of %s", f[0], free[f[0]], f[2])
		}
	}
}

// smiRunner runs the nvidia-smi at path on snap and gives its output,
// failing the test if it fails.
func smiRunner(t *testing.T, path, snap string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		out, _, err := runSMI(t, path, snap, nil, args...)
		if err != nil {
			t.Fatalf("nvidia-smi %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
}

// major is a driver or nvidia-smi version's branch: 550 for 550.163.01.
func major(version string) int {
	n, _ := strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	return n
}

var spaces = regexp.MustCompile(` +`)

func squash(s string) string { return spaces.ReplaceAllString(s, " ") }
