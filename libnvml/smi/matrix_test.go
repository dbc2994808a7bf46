//go:build integration

package smi

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/profile"
)

// broken is what no view of a healthy real board prints: nvidia-smi's words
// for an NVML error it did not expect, a missing function or private-table
// entry, and the signs of a crash.
var broken = regexp.MustCompile(`Unknown Error|Uninitialized|Function Not Found|Internal Error|` +
	`Not supported on the device|Failed to run|Segmentation fault|core dumped|Aborted`)

// A knownLimit is output that looks broken but is what the real library
// makes that nvidia-smi print, from a limit of that nvidia-smi; each says
// why, and the test logs it. docs/fidelity.md lists them.
type knownLimit struct {
	versions []string // nil: every version
	boards   []string
	view     string // view name prefix
	text     string // the broken text it explains, or "" for code
	code     int    // the exit code it explains
	why      string
}

// nvlink18 are the boards with 18 NVLinks per GPU.
var nvlink18 = []string{"h100", "b200", "gb200", "gb300"}

const why470Links = "nvidia-smi 470 knows at most 12 NVLinks (its link-to-field switch has 12 cases, " +
	"its NV# names stop at NV12) and no R470 driver runs Hopper or Blackwell"

var knownLimits = []knownLimit{
	{nil, []string{"gb200", "gb300"}, "query", "Unknown Error", 0,
		"these nvidia-smi ask for at most 256 graphics clocks per memory clock, the board lists 260 or 261 " +
			"(its capture): NVML answers INSUFFICIENT_SIZE as the real library does, and nvidia-smi prints Unknown Error"},
	{[]string{"470.256.02"}, nvlink18, "nvlink-status", "", 2, why470Links + ": it stops at link 12"},
	{[]string{"470.256.02"}, nvlink18, "topo", "", 0, why470Links + ": its matrix shows the PCIe path instead of NV18"},
}

func (k knownLimit) covers(version, board, view string) bool {
	return (k.versions == nil || slices.Contains(k.versions, version)) &&
		slices.Contains(k.boards, board) && strings.HasPrefix(view, k.view)
}

// A matrixView is one nvidia-smi command line and the exit codes a real
// board gives it.
type matrixView struct {
	name  string
	args  []string
	codes []int // default: 0
}

// mig -lgip on a board whose MIG is off (or absent) ends with "No MIG-enabled
// devices found." or "No MIG-supported devices found." and exit 6.
var fixedViews = []matrixView{
	{name: "default"},
	{name: "list", args: []string{"-L"}},
	{name: "query", args: []string{"-q"}},
	{name: "query-xml", args: []string{"-q", "-x"}},
	{name: "topo", args: []string{"topo", "-m"}},
	{name: "p2p-read", args: []string{"topo", "-p2p", "r"}},
	{name: "p2p-write", args: []string{"topo", "-p2p", "w"}},
	{name: "p2p-nvlink", args: []string{"topo", "-p2p", "n"}},
	{name: "p2p-atomics", args: []string{"topo", "-p2p", "a"}},
	{name: "nvlink-status", args: []string{"nvlink", "-s"}},
	{name: "nvlink-caps", args: []string{"nvlink", "-c"}},
	{name: "nvlink-errors", args: []string{"nvlink", "-e"}},
	{name: "nvlink-throughput", args: []string{"nvlink", "-gt", "d"}},
	{name: "dmon", args: []string{"dmon", "-c", "2"}},
	{name: "pmon", args: []string{"pmon", "-c", "1"}},
	// nvidia-smi refuses -d with -x before it asks NVML anything.
	{name: "xml-performance", args: []string{"-x", "-q", "-d", "PERFORMANCE"}, codes: []int{2}},
	{name: "mig-lgip", args: []string{"mig", "-lgip"}, codes: []int{0, 6}},
	{name: "compute-policy", args: []string{"compute-policy", "-l"}},
}

// TestEveryNvidiaSMIRunsEveryViewOnEveryBoard runs each nvidia-smi release
// make deps fetches against every built-in board: the default view, -L, -q,
// -q -x, -q -d with each section that release lists, topology and NVLink
// views, every --query-gpu field that release lists, dmon, pmon and mig
// -lgip. Each must exit as a real board's would within 30 s and print
// nothing broken; topo -m must show the same matrix on every release.
// It runs twice: with each release's verified export table, and with the
// generic table an unverified release gets.
func TestEveryNvidiaSMIRunsEveryViewOnEveryBoard(t *testing.T) {
	t.Run("verified", func(t *testing.T) { runMatrix(t, nil) })
	t.Run("generic", func(t *testing.T) { runMatrix(t, []string{"NVMOCK_SMI_TABLE=generic"}) })
}

func runMatrix(t *testing.T, env []string) {
	smis := testenv.NvidiaSMIs(t)
	boards := profile.Builtins()
	snaps := map[string]string{}
	for _, b := range boards {
		snaps[b], _ = testenv.Snapshot(t, b, 0)
	}
	var mu sync.Mutex
	topos := map[string]map[string]string{} // board -> version -> matrix
	for _, b := range boards {
		topos[b] = map[string]string{}
	}
	// The boards run in parallel: dmon and pmon spend their time asleep.
	t.Run("views", func(t *testing.T) {
		for _, s := range smis {
			views := append(slices.Clone(fixedViews), sectionViews(t, s)...)
			fields := queryFieldsOf(t, s)
			for _, b := range boards {
				t.Run(s.Version+"/"+b, func(t *testing.T) {
					t.Parallel()
					for _, v := range views {
						out := runView(t, s, snaps[b], b, v, env)
						if v.name == "topo" {
							mu.Lock()
							topos[b][s.Version] = topoMatrix(out)
							mu.Unlock()
						}
					}
					checkQueryFields(t, s, snaps[b], fields, env)
				})
			}
		}
	})
	for _, b := range boards {
		var first testenv.SMI
		for _, s := range smis {
			m, ok := topos[b][s.Version]
			if !ok || m == "" {
				continue
			}
			if k, ok := limitFor(s.Version, b, "topo", ""); ok {
				t.Logf("%s: topo -m of nvidia-smi %s left out of the comparison: %s", b, s.Version, k.why)
				continue
			}
			if first.Version == "" {
				first = s
				continue
			}
			if want := topos[b][first.Version]; m != want {
				t.Errorf("%s: topo -m of nvidia-smi %s differs from %s's:\n%s\nwant:\n%s", b, s.Version, first.Version, m, want)
			}
		}
	}
}

// runView runs one view and checks its exit code and output.
func runView(t *testing.T, s testenv.SMI, snap, board string, v matrixView, env []string) string {
	t.Helper()
	out, code, err := runSMI(t, s.Path, snap, env, v.args...)
	if err != nil {
		t.Errorf("%s: %v\n%s", v.name, err, out)
		return out
	}
	codes := v.codes
	if codes == nil {
		codes = []int{0}
	}
	if !slices.Contains(codes, code) {
		if k, ok := limitFor(s.Version, board, v.name, ""); ok && k.code == code {
			t.Logf("nvidia-smi %s exits %d: known, %s", strings.Join(v.args, " "), code, k.why)
		} else {
			t.Errorf("nvidia-smi %s exited %d, want %v:\n%s", strings.Join(v.args, " "), code, codes, tail(out))
		}
	}
	for _, m := range broken.FindAllString(out, -1) {
		if k, ok := limitFor(s.Version, board, v.name, m); ok {
			t.Logf("nvidia-smi %s prints %q: known, %s", strings.Join(v.args, " "), m, k.why)
			continue
		}
		t.Errorf("nvidia-smi %s prints %q:\n%s", strings.Join(v.args, " "), m, around(out, m))
		break
	}
	return out
}

func limitFor(version, board, view, text string) (knownLimit, bool) {
	for _, k := range knownLimits {
		if k.covers(version, board, view) && k.text == text {
			return k, true
		}
	}
	return knownLimit{}, false
}

// runSMI runs one nvidia-smi against the mock; a run past 30 s is a hang.
func runSMI(t *testing.T, bin, snap string, env []string, args ...string) (string, int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = testenv.Env(t, snap, env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(out), -1, fmt.Errorf("no exit within 30 s (hang)")
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ee.Exited() {
			return string(out), ee.ExitCode(), nil
		}
		return string(out), -1, fmt.Errorf("killed by %v", ee.ProcessState)
	}
	return string(out), 0, err
}

var sectionList = regexp.MustCompile(`(?s)--display=\s+Display only selected information: (.*?)\n\s+Flags can be combined`)

// sectionViews are -q -d SECTION for every section the release's -h lists.
func sectionViews(t *testing.T, s testenv.SMI) []matrixView {
	t.Helper()
	out, _, err := runSMI(t, s.Path, "", nil, "-h")
	m := sectionList.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("nvidia-smi %s -h lists no -d sections: %v\n%s", s.Version, err, out)
	}
	var views []matrixView
	for _, f := range strings.FieldsFunc(m[1], func(r rune) bool { return r == ',' || r == ' ' || r == '\n' }) {
		views = append(views, matrixView{name: "query-" + f, args: []string{"-q", "-d", f}})
	}
	if len(views) < 15 {
		t.Fatalf("nvidia-smi %s -h: only %d sections in %q", s.Version, len(views), m[1])
	}
	return views
}

var fieldLine = regexp.MustCompile(`(?m)^"([a-z0-9_.]+)"`)

// queryFieldsOf lists every field of the release's --help-query-gpu.
func queryFieldsOf(t *testing.T, s testenv.SMI) []string {
	t.Helper()
	out, _, err := runSMI(t, s.Path, "", nil, "--help-query-gpu")
	var fields []string
	for _, m := range fieldLine.FindAllStringSubmatch(out, -1) {
		fields = append(fields, m[1])
	}
	if err != nil || len(fields) < 100 {
		t.Fatalf("nvidia-smi %s --help-query-gpu lists %d fields: %v", s.Version, len(fields), err)
	}
	return fields
}

// checkQueryFields asks for every field at once and checks each column of
// each GPU's row.
func checkQueryFields(t *testing.T, s testenv.SMI, snap string, fields, env []string) {
	t.Helper()
	out, code, err := runSMI(t, s.Path, snap, env, "--query-gpu="+strings.Join(fields, ","), "--format=csv,noheader")
	if err != nil || code != 0 {
		t.Errorf("--query-gpu with %d fields: exit %d, %v:\n%s", len(fields), code, err, tail(out))
		return
	}
	r := csv.NewReader(strings.NewReader(out))
	r.TrimLeadingSpace = true
	rows, err := r.ReadAll()
	if err != nil || len(rows) == 0 {
		t.Errorf("--query-gpu: not CSV (%v):\n%s", err, tail(out))
		return
	}
	for _, row := range rows {
		if len(row) != len(fields) {
			t.Errorf("--query-gpu: a row of %d values for %d fields: %v", len(row), len(fields), row)
			continue
		}
		for i, v := range row {
			if broken.MatchString(v) {
				t.Errorf("--query-gpu=%s: %q", fields[i], v)
			}
		}
	}
}

var topoRow = regexp.MustCompile(`(?m)^GPU\d+\t.*$`)

// topoMatrix is the GPU rows of topo -m: the links, CPU and NUMA affinity
// (releases from 535 on add a GPU NUMA ID column, left out).
func topoMatrix(out string) string {
	lines := topoRow.FindAllString(out, -1)
	var rows []string
	for _, l := range lines {
		cells := strings.Split(l, "\t")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if n := len(lines) + 3; len(cells) > n {
			cells = cells[:n]
		}
		rows = append(rows, strings.Join(cells, " "))
	}
	return strings.Join(rows, "\n")
}

func tail(s string) string {
	if lines := strings.Split(s, "\n"); len(lines) > 12 {
		return "...\n" + strings.Join(lines[len(lines)-12:], "\n")
	}
	return s
}

func around(s, m string) string {
	i := strings.Index(s, m)
	lo, hi := max(0, i-300), min(len(s), i+len(m)+100)
	return s[lo:hi]
}

// Every release picks a GPU by its bus id (-i takes what -q prints) through
// the export table, and an idle node lists no compute processes: a header
// and no rows, not a row of N/A per GPU.
func TestEveryNvidiaSMIFindsAGPUByBusIDAndListsNoIdleProcesses(t *testing.T) {
	snap, p := testenv.Snapshot(t, "a100", 0)
	for _, s := range testenv.NvidiaSMIs(t) {
		t.Run(s.Version, func(t *testing.T) {
			for _, id := range []string{snapshot.BusID(p, 5), snapshot.BusID(p, 5)[9:]} {
				out, code, err := runSMI(t, s.Path, snap, nil, "-i", id, "--query-gpu=index,pci.bus_id", "--format=csv,noheader")
				if want := "5, " + snapshot.BusID(p, 5) + "\n"; err != nil || code != 0 || out != want {
					t.Errorf("-i %s: exit %d (%v):\n%s\nwant %q", id, code, err, out, want)
				}
			}
			out, code, err := runSMI(t, s.Path, snap, nil, "--query-compute-apps=pid,used_memory", "--format=csv")
			if want := "pid, used_gpu_memory [MiB]\n"; err != nil || code != 0 || out != want {
				t.Errorf("--query-compute-apps: exit %d (%v):\n%s\nwant %q", code, err, out, want)
			}
		})
	}
}
