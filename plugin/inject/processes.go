package inject

import (
	"fmt"

	"github.com/nvmock/nvmock/profile"
)

// GPUMemoryAnnotation on a pod asks for its GPU containers to show as
// processes on their GPUs (nvidia-smi's process table, NVML's process
// lists), each using this much memory: "20GiB", "512Mi", or bytes.
const GPUMemoryAnnotation = "nvmock.io/gpu-memory"

// ProcessRequest is a process to register when a container starts: on
// each GPU given whole (node indices), or on its MIG device, with this
// much memory.
type ProcessRequest struct {
	GPUs  []int
	MIG   *MIGRef
	Bytes uint64
	Name  string
}

// MIGRef is a MIG device by its GPU's node index and its instance ids,
// which a process on it shows in nvidia-smi.
type MIGRef struct{ GPU, GI, CI int }

// Processes says which process a container given adj on node shows, from
// its pod's annotation; ok is false for none. A bad annotation is an error
// to warn about: the container still starts, with no process shown. Given
// MIG devices, it runs on the first, not on their GPUs: CUDA enumerates
// one MIG device a process (NVIDIA's MIG user guide).
func Processes(pod Pod, ctr Container, adj Adjustment, node *NodeState) (req ProcessRequest, ok bool, err error) {
	v, has := pod.Annotations[GPUMemoryAnnotation]
	if !has || len(adj.GPUs) == 0 {
		return ProcessRequest{}, false, nil
	}
	q, err := profile.ParseQuantity(v)
	if err != nil {
		return ProcessRequest{}, false, fmt.Errorf("annotation %s: %w", GPUMemoryAnnotation, err)
	}
	req = ProcessRequest{Bytes: uint64(q), Name: ctr.Name}
	if len(ctr.Args) > 0 {
		req.Name = ctr.Args[0]
	}
	if len(adj.MIG) > 0 {
		k := adj.MIG[0]
		if k < 0 || k >= len(node.MIG) {
			return ProcessRequest{}, false, fmt.Errorf("MIG device %d: the node has %d", k, len(node.MIG))
		}
		m := node.MIG[k]
		req.MIG = &MIGRef{GPU: m.GPU, GI: m.GI, CI: m.CI}
		return req, true, nil
	}
	req.GPUs = adj.GPUs
	return req, true, nil
}
