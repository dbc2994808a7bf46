//go:build e2e

package e2e

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nvmock/nvmock/internal/testenv"
)

// nvidiaCTKSpec runs NVIDIA's nvidia-ctk cdi generate against the node's
// overlay, into containerd's CDI directory; the spec goes at cleanup.
func nvidiaCTKSpec(t *testing.T) {
	t.Helper()
	n := theNode
	testenv.NvidiaCTKSpec(t, filepath.Join(n.env["OVERLAY_ROOT"], "driver"), filepath.Join(n.env["CDI_DIR"], "nvidia.yaml"))
}

// NVIDIA's container toolkit at runtime level: a spec from nvidia-ctk,
// applied by containerd's own CDI injection (nothing asks nvmock), gives the
// container exactly the GPU asked for; the plugin recognises the CDI device
// and adds only what the spec lacks: the snapshot that names the GPU as the
// node does.
func TestNvidiaCTKSpecInjectedByContainerdShowsExactlyTheRequestedGPU(t *testing.T) {
	n := theNode
	nvidiaCTKSpec(t)
	c := ctr{image: "glibc", cmd: []string{"nvidia-smi", "-L"}, cdi: []string{"nvidia.com/gpu=1"}}
	p := n.runPod(t, optedIn, nil)

	waitForCDI(t, p, c)
	r := n.run(t, p, c)
	if want := n.smiLine(1, 0); strings.TrimSpace(r.out) != want || r.code != 0 {
		t.Errorf("CDI nvidia.com/gpu=1: nvidia-smi -L exited %d and printed:\n%s\nwant only:\n%s", r.code, r.out, want)
	}

	spec := testenv.ParseSpec(t, specOf(t, p, c))
	count := testenv.Edits(spec)
	for _, want := range []string{"/usr/bin/nvidia-smi", "/usr/lib64/" + n.versionedLib(t), "/etc/nvmock/snapshot", "/dev/nvidia1", "/dev/nvidiactl"} {
		if count[want] != 1 {
			t.Errorf("%s is in the spec %d times, want once", want, count[want])
		}
	}
	for _, unwanted := range []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1", "/dev/nvidia0"} {
		if count[unwanted] != 0 {
			t.Errorf("%s is in the spec; the CDI spec's hooks make the library links and GPU 1 alone was asked for", unwanted)
		}
	}
	if !slices.Contains(spec.Process.Env, "NVIDIA_VISIBLE_DEVICES="+n.uuid(1)) {
		t.Errorf("env %v: want NVIDIA_VISIBLE_DEVICES=%s", spec.Process.Env, n.uuid(1))
	}
}

// Without the plugin (a namespace that did not opt in) the same request
// still gets one GPU, but the library cannot find the node's snapshot and
// reports a built-in board: what the plugin adds above is needed.
func TestNvidiaCTKSpecWithoutThePluginLacksTheNodesIdentity(t *testing.T) {
	n := theNode
	nvidiaCTKSpec(t)
	p := n.runPod(t, plain, nil)
	c := ctr{image: "glibc", cmd: []string{"nvidia-smi", "-L"}, cdi: []string{"nvidia.com/gpu=1"}}
	waitForCDI(t, p, c)
	r := n.run(t, p, c)
	got := uuidsListed(r.out)
	if r.code != 0 || len(got) != 1 {
		t.Fatalf("CDI nvidia.com/gpu=1 without the plugin: nvidia-smi -L exited %d:\n%s\nwant one GPU", r.code, r.out)
	}
	if got[0] == n.uuid(1) {
		t.Errorf("without the plugin the container still sees the node's UUID %s; the test above proves nothing", got[0])
	}
}

// waitForCDI waits until containerd resolves c's CDI devices: it reads new
// spec files on an inotify event, so a create right after nvidia-ctk wrote
// one can fail with "unresolvable CDI devices".
func waitForCDI(t *testing.T, p *pod, c ctr) {
	t.Helper()
	n := theNode
	deadline := time.Now().Add(10 * time.Second)
	for {
		id, err := n.tryCreate(t, p, c)
		if err == nil {
			_, _ = n.rt.RemoveContainer(ctx(t), &cri.RemoveContainerRequest{ContainerId: id})
			return
		}
		if !strings.Contains(err.Error(), "CDI") || time.Now().After(deadline) {
			t.Fatalf("create a container asking for CDI devices %v: %v", c.cdi, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
