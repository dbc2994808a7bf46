//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nvmock/nvmock/internal/testenv"
)

// nvidiaHandler is the runtime handler hack/e2e-node.sh registers NVIDIA's
// container runtime under, in CDI mode, as the GPU operator does.
const nvidiaHandler = "nvidia"

// runUnderNvidia runs `nvidia-smi -L` in a pod of namespace ns under NVIDIA's
// runtime, with NVIDIA_VISIBLE_DEVICES as a device plugin sets it, and
// returns what it printed and the spec runc ran.
func runUnderNvidia(t *testing.T, ns, visible string) (string, *specs.Spec) {
	t.Helper()
	return runUnderNvidiaWith(t, ns, nil, map[string]string{"NVIDIA_VISIBLE_DEVICES": visible})
}

// runUnderNvidiaWith is runUnderNvidia for a pod with annotations and a
// container with env.
func runUnderNvidiaWith(t *testing.T, ns string, annotations, env map[string]string) (string, *specs.Spec) {
	t.Helper()
	n := theNode
	nvidiaCTKSpec(t)
	p := n.runPodWith(t, ns, annotations, nvidiaHandler)
	c := ctr{image: "glibc", cmd: []string{"sh", "-c", "nvidia-smi -L; echo done; sleep 60"}, env: env}
	waitForSpecs(t, p, c)
	id := n.start(t, p, c)
	t.Cleanup(func() {
		_, _ = n.rt.StopContainer(ctx(t), &cri.StopContainerRequest{ContainerId: id, Timeout: 0})
	})
	out := n.waitOutput(t, id, "done")
	return strings.TrimSuffix(out, "done\n"), testenv.BundleSpec(t, n.env["STATE_DIR"], id)
}

// waitForSpecs creates and removes c until containerd and NVIDIA's runtime
// both read the new CDI spec (each watches the directory on its own).
func waitForSpecs(t *testing.T, p *pod, c ctr) {
	t.Helper()
	n := theNode
	id, err := n.tryCreate(t, p, c)
	if err != nil {
		t.Fatalf("create under %s: %v", nvidiaHandler, err)
	}
	_, _ = n.rt.RemoveContainer(ctx(t), &cri.RemoveContainerRequest{ContainerId: id})
}

// NVIDIA's container runtime, as GPU-operator clusters run pods: a pod under
// its handler with a device plugin's NVIDIA_VISIBLE_DEVICES gets exactly that
// GPU from the runtime (CDI mode, the spec nvidia-ctk made from the overlay);
// the nvmock plugin adds only the snapshot, so every edit is in the spec once
// and the GPU keeps the node's UUID.
func TestNvidiaRuntimeGivesExactlyTheDevicePluginsGPU(t *testing.T) {
	out, spec := runUnderNvidia(t, optedIn, theNode.uuid(2))
	checkGivenByNvidia(t, out, spec, 2)
}

// A pod under NVIDIA's runtime that asks through nvmock's annotation, with
// no device plugin, gets its GPU from the runtime too, each edit once
// (review: the plugin gave everything and named the GPU, and the runtime
// gave it all again).
func TestNvidiaRuntimeGivesTheAnnotationsGPU(t *testing.T) {
	out, spec := runUnderNvidiaWith(t, optedIn, map[string]string{"nvmock.io/gpus": "1,"}, nil)
	checkGivenByNvidia(t, out, spec, 1)
}

// The annotation's none under NVIDIA's runtime: the driver from the plugin,
// no GPU, and nothing the runtime cannot resolve (it knows no none device;
// an image's all would give every GPU).
func TestNvidiaRuntimeGivesTheAnnotationsNone(t *testing.T) {
	out, spec := runUnderNvidiaWith(t, optedIn, map[string]string{"nvmock.io/gpus": "none"}, map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"})
	if strings.TrimSpace(out) != "No devices found." {
		t.Errorf("nvidia-smi -L with the annotation none under NVIDIA's runtime printed:\n%s\nwant No devices found.", out)
	}
	count := testenv.Edits(spec)
	if count["/usr/bin/nvidia-smi"] != 1 || count["/dev/nvidiactl"] != 1 || count["/dev/nvidia0"] != 0 {
		t.Errorf("the spec runc ran: nvidia-smi %d, nvidiactl %d, nvidia0 %d times; want 1, 1, 0", count["/usr/bin/nvidia-smi"], count["/dev/nvidiactl"], count["/dev/nvidia0"])
	}
}

// checkGivenByNvidia checks that a container under NVIDIA's runtime saw GPU
// gpu alone, with each of its edits once in the spec runc ran: the
// runtime's, and the plugin's snapshot.
func checkGivenByNvidia(t *testing.T, out string, spec *specs.Spec, gpu int) {
	t.Helper()
	n := theNode
	if want := n.smiLine(gpu, 0); strings.TrimSpace(out) != want {
		t.Errorf("nvidia-smi -L under NVIDIA's runtime printed:\n%s\nwant only:\n%s", out, want)
	}
	count := testenv.Edits(spec)
	node := fmt.Sprintf("/dev/nvidia%d", gpu)
	for _, want := range []string{"/usr/bin/nvidia-smi", "/usr/lib64/" + n.versionedLib(t), "/etc/nvmock/snapshot", node, "/dev/nvidiactl"} {
		if count[want] != 1 {
			t.Errorf("%s is in the spec runc ran %d times, want once", want, count[want])
		}
	}
	other := fmt.Sprintf("/dev/nvidia%d", (gpu+1)%len(n.gpus))
	for _, unwanted := range []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", other} {
		if count[unwanted] != 0 {
			t.Errorf("%s is in the spec runc ran; the runtime gives GPU %d's edits and the plugin only the snapshot", unwanted, gpu)
		}
	}
}

// Without the plugin the runtime alone still gives one GPU, but its library
// finds no snapshot and reports a built-in board: what the plugin adds above
// is needed, and the test above can fail.
func TestNvidiaRuntimeWithoutThePluginLacksTheNodesIdentity(t *testing.T) {
	n := theNode
	out, _ := runUnderNvidia(t, plain, n.uuid(2))
	got := uuidsListed(out)
	if len(got) != 1 {
		t.Fatalf("NVIDIA's runtime without the plugin: nvidia-smi -L printed:\n%s\nwant one GPU", out)
	}
	if got[0] == n.uuid(2) {
		t.Errorf("without the plugin the container still sees the node's UUID %s", got[0])
	}
	if !strings.Contains(out, "showing the built-in a100 board, not this node's GPUs") {
		t.Errorf("without the plugin the library did not say the board is its built-in one:\n%s", out)
	}
}
