//go:build e2e

package e2e

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// ctl runs the nvmock binary's ctl on the e2e node's live state, as an
// operator on the node would.
func (n *node) ctl(t *testing.T, args ...string) string {
	t.Helper()
	bin := filepath.Join(testenv.BuildDir(), "bin", "nvmock")
	out, err := exec.Command(bin, append([]string{"ctl", "--state", n.statePath()}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nvmock ctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (n *node) statePath() string { return filepath.Join(n.env["OVERLAY_ROOT"], "live", "state") }

// A pod that asks for it shows as a process on its GPU in nvidia-smi while
// it runs, with the memory it asked for; stopped, it is gone.
func TestAPodAskingForGPUMemoryShowsItsProcessWhileItRuns(t *testing.T) {
	n := theNode
	p := n.runPod(t, optedIn, map[string]string{"nvmock.io/gpus": "1", "nvmock.io/gpu-memory": "4GiB"})
	id := n.start(t, p, ctr{image: "glibc", cmd: []string{"/bin/sh", "-c",
		"while true; do nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits; sleep 0.2; done"}})
	out := n.waitOutput(t, id, ", /bin/sh, 4096")
	f, err := live.Open(n.statePath())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	procs := f.Read().Processes()
	if len(procs) != 1 || procs[0].Owner != "container:"+id || procs[0].UsedBytes != 4<<30 {
		t.Fatalf("registered processes %+v, want the container's", procs)
	}
	// The pid the runtime hook reported is the one containerd knows.
	if pid := n.pid(t, id); procs[0].PID != pid {
		t.Errorf("registered pid %d, containerd's %d", procs[0].PID, pid)
	}
	// nvidia-smi in the container names the process by its pid on the node.
	if pid := strconv.Itoa(int(procs[0].PID)); !strings.Contains(out, pid+", /bin/sh, 4096") {
		t.Errorf("the container's nvidia-smi printed:\n%s\nwant pid %s", out, pid)
	}
	if _, err := n.rt.StopContainer(ctx(t), &cri.StopContainerRequest{ContainerId: id, Timeout: 1}); err != nil {
		t.Fatal(err)
	}
	if procs := f.Read().Processes(); len(procs) != 0 {
		t.Errorf("after the container stopped: %+v", procs)
	}
}

// Faults injected on the node with nvmock ctl reach containers that are
// already running, and new ones.
func TestFaultsInjectedOnTheNodeReachContainers(t *testing.T) {
	n := theNode
	t.Cleanup(func() { n.ctl(t, "clear", "all", "--load") })
	p := n.runPod(t, optedIn, nil)
	// A monitor started before the fault.
	id := n.start(t, p, ctr{image: "glibc", cmd: []string{"/bin/sh", "-c",
		"while true; do nvidia-smi -i 0 --query-gpu=clocks_throttle_reasons.hw_thermal_slowdown,utilization.gpu --format=csv,noheader; sleep 0.2; done"}})
	n.waitOutput(t, id, "Not Active, 0 %")
	start := time.Now()
	n.ctl(t, "fault", "0", "thermal")
	n.ctl(t, "load", "0", "75")
	n.waitOutput(t, id, "Active, 75 %")
	t.Logf("a running container saw the fault and load %v after nvmock ctl", time.Since(start).Round(time.Millisecond))

	n.ctl(t, "xid", "1", "79")
	r := n.run(t, p, ctr{image: "glibc", cmd: []string{"nvidia-smi", "-L"}})
	if !strings.Contains(r.out, "Unable to determine the device handle for gpu ") || !strings.Contains(r.out, ": GPU is lost") {
		t.Errorf("nvidia-smi -L after XID 79 on GPU 1 (exit %d):\n%s", r.code, r.out)
	}
	status := n.ctl(t, "status")
	if !strings.Contains(status, "lost (XID 79)") || !strings.Contains(status, "thermal") {
		t.Errorf("nvmock ctl status:\n%s", status)
	}
}
