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
// each GPU given whole (node indices) and each MIG device given, with this
// much memory.
type ProcessRequest struct {
	GPUs  []int
	MIG   []MIGRef
	Bytes uint64
	Name  string
}

// MIGRef is a MIG device by its GPU's node index and its instance ids,
// which a process on it shows in nvidia-smi.
type MIGRef struct{ GPU, GI, CI int }

// Processes says which process a container given adj on node shows, from
// its pod's annotation; ok is false for none. A bad annotation is an error
// to warn about: the container still starts, with no process shown. A
// process runs on the MIG devices given, not on their GPUs, as CUDA runs
// on a GPU in MIG mode.
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
	parent := map[int]bool{}
	for _, k := range adj.MIG {
		m := node.MIG[k]
		req.MIG = append(req.MIG, MIGRef{GPU: m.GPU, GI: m.GI, CI: m.CI})
		parent[m.GPU] = true
	}
	for _, g := range adj.GPUs {
		if !parent[g] {
			req.GPUs = append(req.GPUs, g)
		}
	}
	return req, true, nil
}
