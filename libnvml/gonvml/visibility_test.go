//go:build integration

package gonvml

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/profile"
)

type visibleGPU struct {
	UUID, Serial, BusID string
	Minor               int
}

func (g visibleGPU) String() string {
	return fmt.Sprintf("{minor %d %s serial %s bus %s}", g.Minor, g.UUID, g.Serial, g.BusID)
}

// nodeGPU is what node GPU i of p must report wherever it is visible.
func nodeGPU(p *profile.Profile, seed string, i int) visibleGPU {
	return visibleGPU{
		UUID:   snapshot.UUID(p.Name, seed, i),
		Serial: snapshot.Serial(p.Board.SerialPrefix, p.Name, seed, i),
		BusID:  snapshot.BusID(p, i),
		Minor:  i,
	}
}

// visible lists what an initialised library shows, in index order.
func visible(t *testing.T, lib nvml.Interface) []visibleGPU {
	t.Helper()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetCount: %v", ret)
	}
	gpus := make([]visibleGPU, n)
	for i := range gpus {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Fatalf("DeviceGetHandleByIndex(%d): %v", i, ret)
		}
		idx, ret := d.GetIndex()
		check(t, fmt.Sprintf("GPU %d GetIndex", i), idx, ret, i)
		var r [4]nvml.Return
		g := &gpus[i]
		g.UUID, r[0] = d.GetUUID()
		g.Serial, r[1] = d.GetSerial()
		g.Minor, r[2] = d.GetMinorNumber()
		var pci nvml.PciInfo
		pci, r[3] = d.GetPciInfo()
		g.BusID = cstr(pci.BusId[:])
		for _, ret := range r {
			if ret != nvml.SUCCESS {
				t.Fatalf("GPU %d identity: %v", i, ret)
			}
		}
	}
	return gpus
}

func TestVisibility(t *testing.T) {
	path, p := testenv.Snapshot(t, "a100", 0)
	all := make([]int, p.GPUs)
	node := make([]visibleGPU, p.GPUs)
	for i := range all {
		all[i] = i
		node[i] = nodeGPU(p, testenv.Seed, i)
	}
	uuid := func(i int) string { return node[i].UUID }

	// The shortest prefix of GPU 4's UUID, from 8 hex digits on, that no other GPU shares.
	unique := ""
	for n := len("GPU-") + 8; n <= len(uuid(4)) && unique == ""; n++ {
		unique = uuid(4)[:n]
		for i := range node {
			if i != 4 && strings.HasPrefix(uuid(i), unique) {
				unique = ""
				break
			}
		}
	}
	if unique == "" {
		t.Fatalf("no prefix of %s is unique among %d GPUs", uuid(4), p.GPUs)
	}
	// The longest prefix two GPUs share, if any is longer than "GPU-".
	shared := ""
	for i := range node {
		for j := i + 1; j < len(node); j++ {
			k := len("GPU-")
			for k < len(uuid(i)) && uuid(i)[k] == uuid(j)[k] {
				k++
			}
			if k > len(shared) && k > len("GPU-") {
				shared = uuid(i)[:k]
			}
		}
	}
	const unknownUUID = "GPU-ffffffff-dead"
	for i := range node {
		if strings.HasPrefix(strings.ToLower(uuid(i)), strings.ToLower(unknownUUID)) {
			t.Fatalf("GPU %d's UUID %s starts with the entry meant to name no GPU", i, uuid(i))
		}
	}
	unset := "<unset>"

	type visCase struct {
		name     string
		ctl      bool   // $NVMOCK_DEV_ROOT/nvidiactl exists
		nodes    []int  // $NVMOCK_DEV_ROOT/nvidia<minor> that exist
		nvidia   string // NVIDIA_VISIBLE_DEVICES, which the library ignores
		visible  string // NVMOCK_VISIBLE_DEVICES
		want     []int  // node GPUs seen, in index order
		wantInit nvml.Return
	}
	cases := []visCase{
		{name: "a process without any device nodes sees every GPU", nvidia: unset, visible: unset, want: all},
		{name: "a dev root with nvidiactl, nvidia1 and nvidia3 sees exactly GPUs 1 and 3", ctl: true, nodes: []int{1, 3}, nvidia: unset, visible: unset, want: []int{1, 3}},
		{name: "a dev root with only nvidiactl sees no GPU", ctl: true, nvidia: unset, visible: unset, want: []int{}},
		{name: "a dev root with every node sees every GPU", ctl: true, nodes: all, nvidia: unset, visible: unset, want: all},
		{name: "device nodes without nvidiactl do not filter", nodes: []int{1, 3}, nvidia: unset, visible: unset, want: all},
		// The real libnvidia-ml ignores NVIDIA_VISIBLE_DEVICES: the runtime acts on it.
		{name: "NVIDIA_VISIBLE_DEVICES=3 on a host still sees every GPU", nvidia: "3", visible: unset, want: all},
		{name: "NVIDIA_VISIBLE_DEVICES naming a MIG device still initializes", nvidia: "MIG-4f6d2a3e-1c2b-5d7e-9f00-123456789abc", visible: unset, want: all},
		{name: "NVIDIA_VISIBLE_DEVICES naming no GPU still initializes", nvidia: "17", visible: unset, want: all},
		{name: "dev nodes 1 and 3 with NVIDIA_VISIBLE_DEVICES=3 see GPUs 1 and 3", ctl: true, nodes: []int{1, 3}, nvidia: "3", visible: unset, want: []int{1, 3}},
		{name: "NVMOCK_VISIBLE_DEVICES=2,5 sees GPUs 2 and 5", nvidia: unset, visible: "2,5", want: []int{2, 5}},
		{name: "NVMOCK_VISIBLE_DEVICES in another order keeps the node's order", nvidia: unset, visible: "5,2", want: []int{2, 5}},
		{name: "a full UUID selects its GPU", nvidia: unset, visible: uuid(6), want: []int{6}},
		{name: "a unique UUID prefix selects its GPU", nvidia: unset, visible: unique, want: []int{4}},
		{name: "an index and a UUID mix in one list", nvidia: unset, visible: "0," + uuid(7), want: []int{0, 7}},
		{name: "device nodes decide where the control node exists, not NVMOCK_VISIBLE_DEVICES", ctl: true, nodes: []int{1, 3}, nvidia: unset, visible: "3", want: []int{1, 3}},
		{name: "NVMOCK_VISIBLE_DEVICES=all does not filter", nvidia: unset, visible: "all", want: all},
		{name: "NVMOCK_VISIBLE_DEVICES=none hides every GPU", nvidia: unset, visible: "none", want: []int{}},
		{name: "an empty NVMOCK_VISIBLE_DEVICES does not filter", nvidia: unset, visible: "", want: all},
		{name: "an index past the node's GPUs fails Init", nvidia: unset, visible: "17", wantInit: nvml.ERROR_UNKNOWN},
		{name: "a UUID of no GPU on the node fails Init", nvidia: unset, visible: unknownUUID, wantInit: nvml.ERROR_UNKNOWN},
		{name: "one bad entry among good ones fails Init", nvidia: unset, visible: "2,17", wantInit: nvml.ERROR_UNKNOWN},
		{name: "the bare prefix GPU- fails Init", nvidia: unset, visible: "GPU-", wantInit: nvml.ERROR_UNKNOWN},
	}
	if shared != "" {
		cases = append(cases, visCase{name: "a prefix two GPUs share (" + shared + ") fails Init", nvidia: unset, visible: shared, wantInit: nvml.ERROR_UNKNOWN})
	} else {
		t.Logf("no two of the %d UUIDs share a hex digit after GPU-; only the bare prefix tests ambiguity", p.GPUs)
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := cleanEnv(t, path)
			if c.ctl {
				touch(t, filepath.Join(root, "nvidiactl"))
			}
			for _, m := range c.nodes {
				touch(t, filepath.Join(root, fmt.Sprintf("nvidia%d", m)))
			}
			if c.nvidia != unset {
				t.Setenv("NVIDIA_VISIBLE_DEVICES", c.nvidia)
			}
			if c.visible != unset {
				t.Setenv("NVMOCK_VISIBLE_DEVICES", c.visible)
			}
			lib := newLib(t)
			if c.wantInit != nvml.SUCCESS {
				// A failed Init leaves go-nvml's instance loaded; that is go-nvml's count, not the library's.
				checkRet(t, "Init", lib.Init(), c.wantInit)
				return
			}
			start(t, lib)
			got := visible(t, lib)
			want := make([]visibleGPU, len(c.want))
			for k, i := range c.want {
				want[k] = node[i]
			}
			if len(got) != len(want) {
				t.Errorf("visible GPUs:\n got %v\nwant %v", got, want)
			} else {
				for i := range got {
					if got[i] != want[i] {
						t.Errorf("visible GPU %d = %v, want %v", i, got[i], want[i])
					}
				}
			}
			seen := map[int]bool{}
			for _, i := range c.want {
				seen[i] = true
			}
			for i := range node {
				if seen[i] {
					continue
				}
				if _, ret := lib.DeviceGetHandleByUUID(uuid(i)); ret != nvml.ERROR_NOT_FOUND {
					t.Errorf("DeviceGetHandleByUUID of hidden GPU %d: %v, want ERROR_NOT_FOUND", i, ret)
				}
				if _, ret := lib.DeviceGetHandleByPciBusId(node[i].BusID); ret != nvml.ERROR_NOT_FOUND {
					t.Errorf("DeviceGetHandleByPciBusId of hidden GPU %d: %v, want ERROR_NOT_FOUND", i, ret)
				}
			}
		})
	}
}

// TestVisibilityErrorsNameTheEntry runs failing NVMOCK_VISIBLE_DEVICES
// settings in a process of their own to read the library's one stderr line.
func TestVisibilityErrorsNameTheEntry(t *testing.T) {
	path, _ := testenv.Snapshot(t, "a100", 0)
	for _, c := range []struct {
		name, visible, entry, problem string
	}{
		{"an index past the node's GPUs is named as no GPU", "2,17", `"17"`, "names no gpu"},
		{"an unknown UUID is named as no GPU", "GPU-ffffffff-dead", `"GPU-ffffffff-dead"`, "names no gpu"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runHelper(t, path, "NVMOCK_VISIBLE_DEVICES="+c.visible)
			checkRet(t, "Init", r.init, nvml.ERROR_UNKNOWN)
			line, rest, _ := strings.Cut(r.stderr, "\n")
			if rest != "" || !strings.HasSuffix(r.stderr, "\n") {
				t.Errorf("stderr is not exactly one line:\n%s", r.stderr)
			}
			if !strings.Contains(line, "NVMOCK_VISIBLE_DEVICES") || !strings.Contains(line, c.entry) ||
				!strings.Contains(strings.ToLower(line), c.problem) {
				t.Errorf("stderr line %q does not name NVMOCK_VISIBLE_DEVICES, the entry %s and the problem (%q)", line, c.entry, c.problem)
			}
		})
	}
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// helperEnv marks the re-executed test binary that runs helperInit.
