//go:build integration

package gonvml

import (
	"fmt"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

// list spells an NVML CPU or node set as the kernel's cpulist files do.
func list(words []uint) string {
	var s profile.CPUSet
	for i, w := range words {
		if i < len(s) {
			s[i] = uint64(w)
		}
	}
	return s.List()
}

// A DGX A100's EPYCs run in NPS4: a GPU's NUMA node is a quarter of its
// socket. NVML's node scope is the node (the NUMA and CPU affinity of real
// DGX A100 topo -m captures); its socket scope is the socket, as nvml.h
// defines it (no capture of a socket-scope answer was found).
func TestAffinityScopesOfAnNPS4Node(t *testing.T) {
	lib, _ := startSnapshot(t, 0) // a100
	for _, c := range []struct {
		gpu                  int
		nodeCPUs, socketCPUs string
		nodeNUMA, socketNUMA string
	}{
		{0, "48-63,176-191", "0-63,128-191", "3", "0-3"},
		{3, "16-31,144-159", "0-63,128-191", "1", "0-3"},
		{6, "80-95,208-223", "64-127,192-255", "5", "4-7"},
	} {
		t.Run(fmt.Sprintf("GPU%d", c.gpu), func(t *testing.T) {
			d, ret := lib.DeviceGetHandleByIndex(c.gpu)
			if ret != nvml.SUCCESS {
				t.Fatalf("DeviceGetHandleByIndex: %v", ret)
			}
			cpus, ret := d.GetCpuAffinity(profile.MaxCPUs)
			check(t, "GetCpuAffinity", list(cpus), ret, c.nodeCPUs)
			cpus, ret = d.GetCpuAffinityWithinScope(profile.MaxCPUs, nvml.AFFINITY_SCOPE_NODE)
			check(t, "GetCpuAffinityWithinScope(NODE)", list(cpus), ret, c.nodeCPUs)
			cpus, ret = d.GetCpuAffinityWithinScope(profile.MaxCPUs, nvml.AFFINITY_SCOPE_SOCKET)
			check(t, "GetCpuAffinityWithinScope(SOCKET)", list(cpus), ret, c.socketCPUs)
			nodes, ret := d.GetMemoryAffinity(64, nvml.AFFINITY_SCOPE_NODE)
			check(t, "GetMemoryAffinity(NODE)", list(nodes), ret, c.nodeNUMA)
			nodes, ret = d.GetMemoryAffinity(64, nvml.AFFINITY_SCOPE_SOCKET)
			check(t, "GetMemoryAffinity(SOCKET)", list(nodes), ret, c.socketNUMA)
		})
	}
}

// A GB200's GPU memory is a NUMA node of its own, which NVML reports, and
// its NUMA affinity is its Grace's node with the empty nodes held for the
// Grace's GPUs (real topo -m captures). An x86 GPU has no node of its own.
func TestGraceGPUsHaveANUMANodeOfTheirOwn(t *testing.T) {
	path, _ := testenv.Snapshot(t, "gb200", 0)
	cleanEnv(t, path)
	lib := newLib(t)
	start(t, lib)
	for i, c := range []struct {
		node int
		near string
	}{{2, "0,3-9,11-17"}, {10, "0,3-9,11-17"}, {18, "1,19-25,27-33"}, {26, "1,19-25,27-33"}} {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Fatalf("DeviceGetHandleByIndex(%d): %v", i, ret)
		}
		n, ret := d.GetNumaNodeId()
		check(t, fmt.Sprintf("GPU %d GetNumaNodeId", i), n, ret, c.node)
		nodes, ret := d.GetMemoryAffinity(64, nvml.AFFINITY_SCOPE_NODE)
		check(t, fmt.Sprintf("GPU %d GetMemoryAffinity(NODE)", i), list(nodes), ret, c.near)
	}
}

func TestX86GPUsHaveNoNUMANodeOfTheirOwn(t *testing.T) {
	lib, _ := startSnapshot(t, 0) // a100
	d, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetHandleByIndex: %v", ret)
	}
	_, ret = d.GetNumaNodeId()
	checkRet(t, "GetNumaNodeId", ret, nvml.ERROR_NOT_SUPPORTED)
}
