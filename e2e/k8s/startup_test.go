//go:build k8s

package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
)

// TestPodStartupWithAndWithoutInjection measures what a user waits for:
// from the create call to the pod Running (the watch event), for pods of
// the glibc image in a namespace that is opted in (each container gets all
// GPUs) and in one that is not, one pod at a time, alternating. It writes
// the figures to $NVMOCK_BUILD/k8s-e2e/pod-startup.txt; it fails only if a
// pod does not start. NVMOCK_K8S_BENCH_PODS sets the pods per side (10).
func TestPodStartupWithAndWithoutInjection(t *testing.T) {
	c := theCluster
	n := 10
	if v, err := strconv.Atoi(os.Getenv("NVMOCK_K8S_BENCH_PODS")); err == nil && v > 0 {
		n = v
	}
	sides := []struct {
		name string
		ns   string
	}{{"without injection", c.namespace(t, false)}, {"with injection", c.namespace(t, true)}}
	times := make([][]time.Duration, len(sides))
	for i := range n {
		for s, side := range sides {
			name := fmt.Sprintf("p%d", i)
			start := time.Now()
			c.create(t, side.ns, c.pod(name, "exec sleep 3600", 0))
			c.waitPod(t, side.ns, name, time.Minute, "Running", podRunning)
			times[s] = append(times[s], time.Since(start))
			c.deletePod(side.ns, name)
			if err := c.waitNoPods(context.Background(), side.ns, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The injected side really was injected.
	c.create(t, sides[1].ns, c.pod("check", "exec sleep 3600", 0))
	c.waitPod(t, sides[1].ns, "check", time.Minute, "Running", podRunning)
	if out, err := c.exec(t, sides[1].ns, "check", "main", "nvidia-smi", "-L"); err != nil || !slices.Equal(testenv.Lines(out), c.gpuLines()) {
		t.Errorf("a pod of the injected side: %v:\n%s", err, out)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "pod creation to Running, %d pods each, one at a time (%s, Kubernetes %s):\n", n, time.Now().Format(time.RFC3339), c.env["KUBERNETES_VERSION"])
	for s, side := range sides {
		d := slices.Clone(times[s])
		slices.Sort(d)
		fmt.Fprintf(&b, "  %-18s median %4d ms  min %4d ms  max %4d ms\n", side.name, ms(median(d)), ms(d[0]), ms(d[len(d)-1]))
	}
	t.Log("\n" + b.String())
	if err := os.WriteFile(filepath.Join(c.out, "pod-startup.txt"), []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
}

// median of sorted durations.
func median(d []time.Duration) time.Duration {
	if len(d)%2 == 1 {
		return d[len(d)/2]
	}
	return (d[len(d)/2-1] + d[len(d)/2]) / 2
}

func ms(d time.Duration) int64 { return d.Milliseconds() }
