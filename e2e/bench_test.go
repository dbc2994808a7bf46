//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
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
	return createStartWith(b, p, ctr{image: "glibc", cmd: []string{"true"}})
}

func createStartWith(b *testing.B, p *pod, c ctr) time.Duration {
	n := theNode
	t0 := time.Now()
	id := n.start(b, p, c)
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
// of one given GPUs without InfiniBand (on an InfiniBand node), of the
// first with the plugin not running, and, with no plugin, of containers
// asked through CRI for the GPUs' device nodes and 4 of the plugin's mounts,
// for each half alone: what the runtime itself charges for them. One
// iteration is a round: the plugin up, a warm-up container (not measured: a
// plugin probes the node at its first container, once in its life), then
// five of each kind with it, in a random order; the plugin down, then five
// of each kind without it, in a random order. Run with -benchtime=Nx.
func BenchmarkCreateStart(b *testing.B) {
	const perRound = 5
	n := theNode
	n.pluginRunning(b)
	in := n.runPod(b, optedIn, nil)
	out := n.runPod(b, plain, nil)
	// GPUs without the node's InfiniBand: what the HCAs add.
	noIB := n.runPod(b, optedIn, map[string]string{"nvmock.io/infiniband": "false"})
	// Part of the injection's edits asked of CRI directly, with no plugin:
	// the 8 GPUs' and 4 control devices, and the library, snapshot and
	// nvidia-smi mounts (the plugin makes 11 on this node, and the hook).
	byCRI := ctr{image: "glibc", cmd: []string{"true"}, mounts: gpuMounts(n), devices: gpuDevices(n)}
	// Each half alone: what the runtime charges for device nodes, and for mounts.
	devicesOnly := ctr{image: "glibc", cmd: []string{"true"}, devices: gpuDevices(n)}
	mountsOnly := ctr{image: "glibc", cmd: []string{"true"}, mounts: gpuMounts(n)}
	var injected, skipped, none, direct, gpusOnly, devs, mounts []time.Duration
	var decided, decisions float64 // the plugin's own time, from its metrics
	var nriSum, nriCount float64   // containerd's time for the NRI call, from its metrics
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		createStart(b, in)
		sum0, count0 := histogram(b, n.env["PLUGIN_URL"]+"/metrics", "decision_seconds", "")
		nsum0, ncount0 := histogram(b, n.env["CONTAINERD_METRICS_URL"], "containerd_nri_plugin_latency_seconds", `operation="CreateContainer"`)
		for k := 0; k < perRound; k++ {
			// A random order: in a fixed one (injected, skipped, without
			// InfiniBand) injected took 3.2 and 6.4 ms more than without
			// InfiniBand in two runs, randomized 0.1 ms.
			for _, kind := range rand.Perm(3) {
				switch kind {
				case 0:
					injected = append(injected, createStart(b, in))
				case 1:
					skipped = append(skipped, createStart(b, out))
				case 2:
					gpusOnly = append(gpusOnly, createStart(b, noIB))
				}
			}
		}
		sum1, count1 := histogram(b, n.env["PLUGIN_URL"]+"/metrics", "decision_seconds", "")
		nsum1, ncount1 := histogram(b, n.env["CONTAINERD_METRICS_URL"], "containerd_nri_plugin_latency_seconds", `operation="CreateContainer"`)
		decided, decisions = decided+sum1-sum0, decisions+count1-count0
		nriSum, nriCount = nriSum+nsum1-nsum0, nriCount+ncount1-ncount0
		n.script(b, "plugin", "stop")
		for k := 0; k < perRound; k++ {
			for _, kind := range rand.Perm(4) {
				switch kind {
				case 0:
					none = append(none, createStart(b, in))
				case 1:
					direct = append(direct, createStartWith(b, in, byCRI))
				case 2:
					devs = append(devs, createStartWith(b, in, devicesOnly))
				case 3:
					mounts = append(mounts, createStartWith(b, in, mountsOnly))
				}
			}
		}
		n.script(b, "plugin", "start")
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(median(injected)), "ms-injected")
	b.ReportMetric(ms(median(skipped)), "ms-skipped")
	b.ReportMetric(ms(median(gpusOnly)), "ms-injected-without-infiniband")
	b.ReportMetric(ms(median(none)), "ms-no-plugin")
	b.ReportMetric(ms(median(direct)), "ms-gpu-edits-by-CRI")
	b.ReportMetric(ms(median(devs)), "ms-devices-by-CRI")
	b.ReportMetric(ms(median(mounts)), "ms-mounts-by-CRI")
	b.ReportMetric(float64(median(injected))/float64(median(none)), "injected/no-plugin")
	if decisions > 0 && nriCount > 0 {
		b.ReportMetric(decided/decisions*1e6, "µs-plugin-mean")
		b.ReportMetric(nriSum/nriCount*1e6, "µs-nri-call-mean")
	}
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
	return int(theNode.pid(b, st.Containers["nri"]))
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

// gpuMounts are the mounts the plugin gives a container.
func gpuMounts(n *node) []cri.Mount {
	driver := filepath.Join(n.env["OVERLAY_ROOT"], "driver")
	lib := filepath.Join(driver, "usr/lib64/libnvidia-ml.so.1")
	ms := []cri.Mount{
		{HostPath: lib, ContainerPath: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", Readonly: true},
		{HostPath: lib, ContainerPath: "/usr/lib64/libnvidia-ml.so.1", Readonly: true},
		{HostPath: filepath.Join(driver, "etc/nvmock/snapshot"), ContainerPath: "/etc/nvmock/snapshot", Readonly: true},
		{HostPath: filepath.Join(driver, "usr/bin/nvidia-smi"), ContainerPath: "/usr/bin/nvidia-smi", Readonly: true},
	}
	return ms
}

// gpuDevices are the device nodes the plugin gives a container with all the
// node's GPUs.
func gpuDevices(n *node) [][2]string {
	dev := filepath.Join(n.env["OVERLAY_ROOT"], "driver", "dev")
	var ds [][2]string
	for i := range n.gpus {
		ds = append(ds, [2]string{filepath.Join(dev, "nvidia"+itoa(i)), "/dev/nvidia" + itoa(i)})
	}
	for _, c := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"} {
		ds = append(ds, [2]string{filepath.Join(dev, c), "/dev/" + c})
	}
	return ds
}

// histogram reads a Prometheus histogram's sum and count from url: the
// series named name (suffix match) whose labels contain label.
func histogram(b *testing.B, url, name, label string) (sum, count float64) {
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 || strings.HasPrefix(line, "#") || !strings.Contains(line, label) {
			continue
		}
		series, _, _ := strings.Cut(line[:sp], "{")
		v, _ := strconv.ParseFloat(line[sp+1:], 64)
		switch {
		case strings.HasSuffix(series, name+"_sum"):
			sum = v
		case strings.HasSuffix(series, name+"_count"):
			count = v
		}
	}
	return sum, count
}
