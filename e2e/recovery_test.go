//go:build e2e

package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
)

// startWithGPUs starts a long-running container in a pod asking for count
// GPUs and returns the UUIDs it lists.
func startWithGPUs(t *testing.T, count string) []string {
	t.Helper()
	n := theNode
	p := n.runPod(t, optedIn, map[string]string{"nvmock.io/gpus": count})
	id := n.start(t, p, ctr{image: "glibc", cmd: []string{"sh", "-c", "nvidia-smi -L; echo done; exec sleep 600"}})
	return uuidsListed(n.waitOutput(t, id, "done\n"))
}

// untouchedRun runs a container in the opted-in namespace and says whether
// it started normally and saw no mock.
func untouchedRun(t *testing.T) {
	t.Helper()
	n := theNode
	p := n.runPod(t, optedIn, nil)
	r := n.run(t, p, ctr{image: "glibc", cmd: []string{"sh", "-c", "echo started; command -v nvidia-smi || echo no-nvidia-smi"}})
	if r.code != 0 || r.out != "started\nno-nvidia-smi\n" {
		t.Errorf("with the plugin down, a container exited %d and printed:\n%s\nwant it started and untouched", r.code, r.out)
	}
}

// Fail-open, then recovery: with the plugin killed containers still start
// (untouched); once it is back it injects again and, having rebuilt its
// bookkeeping from the runtime, gives new containers other GPUs than the
// ones running containers already have.
func TestPluginKilledContainersStartAndRestartedPluginRespectsAssignments(t *testing.T) {
	n := theNode
	n.pluginRunning(t)
	half := len(n.gpus) / 2
	first := startWithGPUs(t, itoa(half))

	n.script(t, "plugin", "kill")
	untouchedRun(t)

	n.script(t, "plugin", "start")
	second := startWithGPUs(t, itoa(half))
	if len(first) != half || len(second) != half {
		t.Fatalf("containers asking for %d GPUs got %v and %v", half, first, second)
	}
	for _, u := range second {
		if slices.Contains(first, u) {
			t.Errorf("after the plugin restarted, a new container got GPU %s, which a running one has: %v vs %v", u, first, second)
		}
	}
}

// After containerd restarts, the plugin reconnects by itself, and running
// containers keep running.
func TestPluginReconnectsAfterContainerdRestarts(t *testing.T) {
	n := theNode
	n.pluginRunning(t)
	p := n.runPod(t, optedIn, nil)
	running := n.start(t, p, ctr{image: "glibc", cmd: []string{"sh", "-c", "echo up; exec sleep 600"}})
	n.waitOutput(t, running, "up\n")

	n.script(t, "containerd", "restart")
	restarted := time.Now()
	// The plugin notices the closed connection and re-registers with
	// backoff; until then a container is created untouched (fail-open).
	var r result
	for {
		r = n.run(t, p, ctr{image: "glibc", cmd: []string{"sh", "-c", "nvidia-smi -L"}})
		if r.code == 0 || time.Since(restarted) > 30*time.Second {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := testenv.Lines(r.out); !slices.Equal(got, n.smiL) {
		t.Fatalf("30 s after containerd restarted, a new container is still not injected:\n%s", r.out)
	}
	t.Logf("injecting again %v after containerd restarted", time.Since(restarted).Round(time.Millisecond))
	if out := n.logs(t, running); !strings.HasPrefix(out, "up\n") || n.exited(t, running) {
		t.Errorf("the container started before the restart is gone: %q", out)
	}
}

// A pod that names the plugin as required (containerd's default validator,
// 2.2+) is refused while the plugin is down, rather than started without
// its GPUs, and created once the plugin is back, as the kubelet's retry
// would. Pods that do not name it still start untouched.
func TestAPodRequiringThePluginIsRefusedUntilItRuns(t *testing.T) {
	n := theNode
	n.pluginRunning(t)
	n.script(t, "plugin", "kill")
	p := n.runPod(t, optedIn, map[string]string{
		"nvmock.io/gpus":                        "1",
		"required-plugins.noderesource.dev/pod": `["nvmock"]`,
	})
	c := ctr{image: "glibc", cmd: []string{"nvidia-smi", "-L"}}
	_, err := n.tryCreate(t, p, c)
	if err == nil || !strings.Contains(err.Error(), `required plugin "nvmock" not present`) {
		t.Fatalf("with the plugin down, a pod requiring it: %v; want containerd to refuse the container", err)
	}
	untouchedRun(t)

	n.script(t, "plugin", "start")
	r := n.run(t, p, c)
	if got := testenv.Lines(r.out); r.code != 0 || len(got) != 1 || !strings.HasPrefix(got[0], "GPU 0: ") {
		t.Errorf("with the plugin back, the pod's container exited %d and listed:\n%s\nwant one GPU", r.code, r.out)
	}
}
