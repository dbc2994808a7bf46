//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// createStart times CreateContainer + StartContainer of a container that
// exits at once, then removes it (not timed).
func createStart(b *testing.B, p *pod) time.Duration {
	n := theNode
	t0 := time.Now()
	id := n.start(b, p, ctr{image: "glibc", cmd: []string{"true"}})
	d := time.Since(t0)
	n.wait(b, id)
	if _, err := n.rt.RemoveContainer(ctx(b), &cri.RemoveContainerRequest{ContainerId: id}); err != nil {
		b.Fatal(err)
	}
	return d
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkCreateStart measures, interleaved in one run, create+start of a
// container the plugin injects, of one it skips (namespace not opted in),
// and of the first with the plugin not running. One iteration is one
// sample of each; run with -benchtime=Nx.
func BenchmarkCreateStart(b *testing.B) {
	n := theNode
	n.pluginRunning(b)
	in := n.runPod(b, optedIn, nil)
	out := n.runPod(b, plain, nil)
	createStart(b, in) // warm the image's snapshot and the shim
	createStart(b, out)
	var injected, skipped, none []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		injected = append(injected, createStart(b, in))
		skipped = append(skipped, createStart(b, out))
		n.script(b, "plugin", "stop")
		none = append(none, createStart(b, in))
		n.script(b, "plugin", "start")
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(median(injected)), "ms-injected")
	b.ReportMetric(ms(median(skipped)), "ms-skipped")
	b.ReportMetric(ms(median(none)), "ms-no-plugin")
	b.ReportMetric(float64(median(injected))/float64(median(none)), "injected/no-plugin")
	b.ReportMetric(0, "ns/op") // an iteration includes plugin restarts; its time means nothing
}

// BenchmarkFiftyConcurrentCreates creates 50 containers at once in an
// opted-in pod (each a CreateContainer the plugin decides) and reports the
// plugin's resident memory before, and its peak after. Creating, not
// starting: 50 concurrent starts in one pod time out in this machine's
// shim and runc, which would measure them, not the plugin.
func BenchmarkFiftyConcurrentCreates(b *testing.B) {
	n := theNode
	pid := pluginPID(b)
	before := procStatusKB(b, pid, "VmRSS")
	var wall []time.Duration
	for i := 0; i < b.N; i++ {
		p := n.runPod(b, optedIn, map[string]string{"nvmock.io/gpus": "1"})
		var wg sync.WaitGroup
		ids := make([]string, 50)
		t0 := time.Now()
		for k := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids[k] = n.create(b, p, ctr{image: "busybox", cmd: []string{"true"}})
			}()
		}
		wg.Wait()
		wall = append(wall, time.Since(t0))
		for _, id := range ids {
			_, _ = n.rt.RemoveContainer(ctx(b), &cri.RemoveContainerRequest{ContainerId: id})
		}
	}
	b.ReportMetric(float64(before)/1024, "MiB-rss-idle")
	b.ReportMetric(float64(procStatusKB(b, pid, "VmHWM"))/1024, "MiB-rss-peak")
	b.ReportMetric(float64(median(wall).Milliseconds()), "ms-50-creates")
	b.ReportMetric(0, "ns/op")
}

// pluginPID is the PID of the plugin container (the chart's pod, run by
// hack/chartpod), from CRI's verbose status.
func pluginPID(b *testing.B) int {
	data, err := os.ReadFile(filepath.Join(theNode.env["NVMOCK_E2E_DIR"], "chartpod", "chartpod.json"))
	if err != nil {
		b.Fatal(err)
	}
	var st struct{ Containers map[string]string }
	if err := json.Unmarshal(data, &st); err != nil || st.Containers["nri"] == "" {
		b.Fatalf("no plugin container in %s (%v)", data, err)
	}
	s, err := theNode.rt.ContainerStatus(ctx(b), &cri.ContainerStatusRequest{ContainerId: st.Containers["nri"], Verbose: true})
	if err != nil {
		b.Fatal(err)
	}
	var info struct{ Pid int }
	if err := json.Unmarshal([]byte(s.Info["info"]), &info); err != nil || info.Pid == 0 {
		b.Fatalf("no pid in the plugin container's status: %v", err)
	}
	return info.Pid
}

// procStatusKB reads a kB field of /proc/PID/status.
func procStatusKB(b *testing.B, pid int, field string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
