//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkRuncHook splits what the plugin's runtime hook costs a
// container: `runc run` of busybox's true with no hook, with a static
// no-op one (busybox's true again: what runc pays for any hook), and with
// the hook the plugin gave an injected container (its mounts: the PCI
// tree, procfs, live ports). Each round runs the three in a random order,
// and the costs are medians of each round's differences: this machine's
// speed drifts by more than the hook costs between rounds.
func BenchmarkRuncHook(b *testing.B) {
	n := theNode
	id := n.create(b, n.runPod(b, optedIn, nil), ctr{image: "busybox", cmd: []string{"true"}})
	var spec struct {
		Hooks struct {
			CreateContainer []json.RawMessage `json:"createContainer"`
		} `json:"hooks"`
	}
	if err := json.Unmarshal(n.spec(b, id), &spec); err != nil || len(spec.Hooks.CreateContainer) != 1 {
		b.Fatalf("the injected container's spec has no single createContainer hook (%v)", err)
	}
	dir := b.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "dev", "proc", "sys"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", "/bin/busybox", filepath.Join(rootfs, "bin")).CombinedOutput(); err != nil {
		b.Fatalf("busybox: %v: %s", err, out)
	}
	if out, err := exec.Command("runc", "spec", "--bundle", dir).CombinedOutput(); err != nil {
		b.Fatalf("runc spec: %v: %s", err, out)
	}
	base := readJSON(b, filepath.Join(dir, "config.json"))
	proc := base["process"].(map[string]any)
	proc["terminal"], proc["args"] = false, []string{"/bin/busybox", "true"}
	noop := json.RawMessage(`{"path": "/bin/busybox", "args": ["busybox", "true"]}`)
	kinds := []struct {
		name string
		hook json.RawMessage
	}{{"none", nil}, {"no-op", noop}, {"nvmock", spec.Hooks.CreateContainer[0]}}
	for _, k := range kinds {
		if k.hook != nil {
			base["hooks"] = map[string]any{"createContainer": []json.RawMessage{k.hook}}
		} else {
			delete(base, "hooks")
		}
		writeJSON(b, filepath.Join(dir, "config-"+k.name+".json"), base)
	}
	ts := make([][]time.Duration, len(kinds))
	run := 0
	// Five rounds an iteration: make bench's -benchtime=20x gives 100,
	// which the differences' medians need here.
	const rounds = 5
	b.ResetTimer()
	for i := 0; i < b.N*rounds; i++ {
		for _, k := range rand.Perm(len(kinds)) {
			run++
			data, err := os.ReadFile(filepath.Join(dir, "config-"+kinds[k].name+".json"))
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
			}
			if err != nil {
				b.Fatal(err)
			}
			cmd := exec.Command("runc", "--root", filepath.Join(dir, "state"), "run", "--bundle", dir, fmt.Sprintf("bench-%d", run))
			t0 := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("runc run with %s hook: %v: %s", kinds[k].name, err, out)
			}
			ts[k] = append(ts[k], time.Since(t0))
		}
	}
	b.StopTimer()
	over := func(k, than int) float64 {
		d := make([]time.Duration, len(ts[k]))
		for i := range d {
			d[i] = ts[k][i] - ts[than][i]
		}
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	b.ReportMetric(float64(median(ts[0]).Microseconds())/1000, "ms-runc-run")
	b.ReportMetric(over(1, 0), "ms-any-hook")
	b.ReportMetric(over(2, 1), "ms-nvmock-hook-work")
	b.ReportMetric(0, "ns/op")
}

func readJSON(b *testing.B, path string) map[string]any {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		b.Fatalf("%s: %v", path, err)
	}
	return v
}

func writeJSON(b *testing.B, path string, v any) {
	data, err := json.Marshal(v)
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		b.Fatal(err)
	}
}
