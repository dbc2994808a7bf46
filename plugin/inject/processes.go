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
// each of its GPUs (node indices), with this much memory.
type ProcessRequest struct {
	GPUs  []int
	Bytes uint64
	Name  string
}

// Processes says which process a container given adj shows, from its pod's
// annotation; ok is false for none. A bad annotation is an error to warn
// about: the container still starts, with no process shown.
func Processes(pod Pod, ctr Container, adj Adjustment) (req ProcessRequest, ok bool, err error) {
	v, has := pod.Annotations[GPUMemoryAnnotation]
	if !has || len(adj.GPUs) == 0 {
		return ProcessRequest{}, false, nil
	}
	q, err := profile.ParseQuantity(v)
	if err != nil {
		return ProcessRequest{}, false, fmt.Errorf("annotation %s: %w", GPUMemoryAnnotation, err)
	}
	name := ctr.Name
	if len(ctr.Args) > 0 {
		name = ctr.Args[0]
	}
	return ProcessRequest{GPUs: adj.GPUs, Bytes: uint64(q), Name: name}, true, nil
}
