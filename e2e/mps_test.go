//go:build e2e

package e2e

import (
	"os/exec"
	"strings"
	"testing"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// NVIDIA's MPS control daemon on the node, as NVIDIA's device plugin runs
// it: a privileged container sets its GPUs to EXCLUSIVE_PROCESS and starts
// nvidia-cuda-mps-control -d with its pipe directory on the host; a GPU
// container given that directory reaches the daemon. Neither image has the
// binaries: the plugin mounts the driver's, as NVIDIA's runtime does.
func TestTheMPSControlDaemonRunsInAContainerAndOthersReachIt(t *testing.T) {
	n := theNode
	t.Cleanup(func() { _ = exec.Command(n.env["NVIDIA_SMI"], "-i", "1", "-c", "DEFAULT").Run() })
	pipe := cri.Mount{HostPath: t.TempDir(), ContainerPath: "/mps/pipe"}
	env := map[string]string{"NVIDIA_VISIBLE_DEVICES": n.uuid(1), "CUDA_MPS_PIPE_DIRECTORY": "/mps/pipe", "CUDA_MPS_LOG_DIRECTORY": "/tmp"}
	daemon := n.start(t, n.runPrivilegedPod(t, optedIn), ctr{image: "glibc", privileged: true, env: env, mounts: []cri.Mount{pipe},
		cmd: []string{"sh", "-c", "nvidia-smi -i $NVIDIA_VISIBLE_DEVICES -c EXCLUSIVE_PROCESS && nvidia-cuda-mps-control -d && echo set_default_active_thread_percentage 25 | nvidia-cuda-mps-control && echo started; exec sleep 600"}})
	n.waitOutput(t, daemon, "started\n")
	if m := n.smi(t, "-i", "1", "--query-gpu=compute_mode", "--format=csv,noheader"); m != "Exclusive_Process\n" {
		t.Errorf("GPU 1's compute mode after the daemon's container set it: %q", m)
	}
	r := n.run(t, n.runPod(t, optedIn, nil), ctr{image: "glibc", env: env, mounts: []cri.Mount{pipe},
		cmd: []string{"sh", "-c", "nvidia-smi -L; echo get_default_active_thread_percentage | nvidia-cuda-mps-control"}})
	if r.code != 0 || !strings.Contains(r.out, n.uuid(1)) || !strings.HasSuffix(r.out, "25.0\n") {
		t.Errorf("a GPU container given the daemon's pipe directory: exit %d\n%s\nwant GPU 1, then the daemon's 25.0", r.code, r.out)
	}
}
