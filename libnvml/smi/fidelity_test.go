//go:build integration

package smi

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/fidelity"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

// minFidelity is the floor: the percentage of static `nvidia-smi -q -x`
// fields of a profile's first GPU that must match the real capture of its
// board (testdata/hardware), for every built-in profile and every nvidia-smi
// scored. Besides, no static field may be N/A where the board has a value.
const minFidelity = 98.0

// An smiBuild is one real nvidia-smi to render the mock with.
type smiBuild struct {
	version string // its own version, such as 550.163.01; the driver is the profile's
	path    string
}

var fidelitySMIList = flag.String("fidelity-smi", "",
	"score with these nvidia-smi builds instead of the one make deps fetches: VERSION=PATH,...")

// fidelitySMIs are the nvidia-smi builds to score with: those given with
// -fidelity-smi, else every release make deps fetches.
func fidelitySMIs(t *testing.T) []smiBuild {
	t.Helper()
	if *fidelitySMIList == "" {
		var builds []smiBuild
		for _, s := range testenv.NvidiaSMIs(t) {
			builds = append(builds, smiBuild{s.Version, s.Path})
		}
		return builds
	}
	var builds []smiBuild
	for _, item := range strings.Split(*fidelitySMIList, ",") {
		version, path, ok := strings.Cut(item, "=")
		if !ok || version == "" || path == "" {
			t.Fatalf("-fidelity-smi: %q is not VERSION=PATH", item)
		}
		builds = append(builds, smiBuild{version, path})
	}
	return builds
}

// TestEveryProfileMatchesItsRealBoard renders every built-in profile with
// the real nvidia-smi -q -x and scores its first GPU against the capture of
// the physical board (internal/fidelity). The log gives, per nvidia-smi and
// board, the score and every static field that misses, then a table of the
// scores (go test -v, or on failure).
func TestEveryProfileMatchesItsRealBoard(t *testing.T) {
	scoreEveryProfile(t, fidelitySMIs(t))
}

// scoreEveryProfile scores every built-in profile with each nvidia-smi.
func scoreEveryProfile(t *testing.T, builds []smiBuild) {
	boards := profile.Builtins()
	snapshots := map[string]string{}
	captures := map[string]fidelity.Leaves{}
	for _, board := range boards {
		snapshots[board], _ = testenv.Snapshot(t, board, 0)
		capture, err := fidelity.FirstGPUFile(filepath.Join("testdata", "hardware", "qx-"+board+".xml"))
		if err != nil {
			t.Fatalf("capture of %s: %v", board, err)
		}
		captures[board] = capture
	}
	counted := readFieldCounts(t)
	fields := map[string]int{}
	scores := map[smiBuild]map[string]float64{}
	for _, build := range builds {
		scores[build] = map[string]float64{}
		t.Run(build.version, func(t *testing.T) {
			for _, board := range boards {
				t.Run(board, func(t *testing.T) {
					r := scoreProfile(t, build, snapshots[board], captures[board])
					scores[build][board] = r.Score
					key := build.version + " " + board
					fields[key] = r.Static.Total()
					// The score counts only fields both print: one the
					// mock stops printing would raise it (review).
					if n, ok := counted[key]; ok && r.Static.Total() < n && !*update {
						t.Errorf("%d static fields of the capture scored, %d before (%s): the mock's nvidia-smi -q -x no longer prints some; if that is right, run with -update", r.Static.Total(), n, fieldCountsFile)
					}
				})
			}
		})
	}
	t.Log(scoreTable(builds, boards, scores))
	if *update {
		writeFieldCounts(t, fields)
	}
}

// fieldCountsFile records, per nvidia-smi and board, how many static
// fields of the capture the mock's -q -x prints too.
const fieldCountsFile = "testdata/fidelity-fields.txt"

func readFieldCounts(t *testing.T) map[string]int {
	t.Helper()
	data, err := os.ReadFile(fieldCountsFile)
	if err != nil && *update {
		return nil // about to be made
	}
	if err != nil {
		t.Fatalf("%v (run with -update to make it)", err)
	}
	counts := map[string]int{}
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var version, board string
		var n int
		if _, err := fmt.Sscanf(line, "%s %s %d", &version, &board, &n); err != nil {
			t.Fatalf("%s:%d: %q is not \"VERSION BOARD COUNT\": %v", fieldCountsFile, i+1, line, err)
		}
		counts[version+" "+board] = n
	}
	return counts
}

func writeFieldCounts(t *testing.T, fields map[string]int) {
	t.Helper()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		fmt.Fprintf(&b, "%s %d\n", k, fields[k])
	}
	if err := os.WriteFile(fieldCountsFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// scoreProfile renders a snapshot with one nvidia-smi, scores its first GPU
// against the capture and fails the test where the score falls short.
func scoreProfile(t *testing.T, build smiBuild, snapshot string, capture fidelity.Leaves) fidelity.Report {
	// Every GPU is rendered and the first scored: no visibility variable,
	// the mock's or NVIDIA's, is needed to pick it.
	cmd := exec.Command(build.path, "-q", "-x")
	cmd.Env = testenv.Env(t, snapshot)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s -q -x: %v\n%s%s", build.path, err, out, &stderr)
	}
	mock, err := fidelity.FirstGPU(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("%s -q -x: %v", build.path, err)
	}
	for _, e := range fidelity.Exclude(mock, capture, fidelity.Unrenderable) {
		t.Logf("left out of the score: %s", e)
	}
	r := fidelity.Compare(mock, capture)
	t.Logf("static fidelity %.1f%% (floor %.0f%%): %d of %d static fields match; %v",
		r.Score, minFidelity, r.Static.Same, r.Static.Total(), r.Static)
	// The static fields that miss, the worst kind first: what to fix.
	for _, o := range []fidelity.Outcome{fidelity.MockNA, fidelity.Diff, fidelity.HardwareNA, fidelity.BothNA} {
		for _, row := range r.Select(fidelity.Static, o) {
			t.Logf("  %-7s %s: mock %q, board %q", o, row.Path, row.Mock, row.Hardware)
		}
	}
	if r.Score < minFidelity {
		t.Errorf("static fidelity %.1f%% is below the floor of %.0f%%", r.Score, minFidelity)
	}
	// The worst miss: N/A where the real board has a value, a reading's
	// (the BBX flush, memory power) as much as what the board is.
	for _, k := range []fidelity.Kind{fidelity.Static, fidelity.Dynamic, fidelity.Identity} {
		for _, row := range r.Select(k, fidelity.MockNA) {
			t.Errorf("N/A where the board has a value: %s (%s): mock %q, board %q", row.Path, k, row.Mock, row.Hardware)
		}
	}
	return r
}

// scoreTable lays the scores out with a row per board and a column per
// nvidia-smi; "-" where a board was not scored.
func scoreTable(builds []smiBuild, boards []string, scores map[smiBuild]map[string]float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "static fidelity (floor %.0f%%)\n%-8s", minFidelity, "board")
	for _, build := range builds {
		fmt.Fprintf(&b, " %12s", build.version)
	}
	for _, board := range boards {
		fmt.Fprintf(&b, "\n%-8s", board)
		for _, build := range builds {
			score, ok := scores[build][board]
			cell := "-"
			if ok {
				cell = fmt.Sprintf("%.1f%%", score)
				if score < minFidelity {
					cell = "below " + cell
				}
			}
			fmt.Fprintf(&b, " %12s", cell)
		}
	}
	return b.String()
}
