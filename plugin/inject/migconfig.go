package inject

import (
	"slices"
	"strings"
)

// NVIDIA's runtime gives a container asking for NVIDIA_MIG_CONFIG_DEVICES=all
// (privileged ones only) the MIG config capability, /dev/nvidia-caps/
// nvidia-cap1, with which it may make and destroy GPU and compute
// instances: mig-manager, and NVIDIA's DRA driver's kubelet plugin, which
// asks for it and, with its DynamicMIG gate, partitions GPUs as claims are
// prepared. On a mock node the layout is the node's live state, shown to
// containers read-only; such a container gets it writable instead.
const (
	MIGConfigEnv = "NVIDIA_MIG_CONFIG_DEVICES"
	// MIGMonitorEnv asks for the MIG monitor capability (nvidia-cap2),
	// with which a container sees every MIG device (DCGM's exporter).
	MIGMonitorEnv = "NVIDIA_MIG_MONITOR_DEVICES"
	// StateEnv names the live state file the library maps (libnvml/live.c).
	StateEnv = "NVMOCK_STATE"
	// Under /dev: the runtime makes it a tmpfs before the other mounts, so
	// the mount point can be made in a read-only root file system too.
	migConfigState = "/dev/nvmock/state"
)

// migConfig adds the node's live state, writable, to a container asking
// for the MIG config capability; a container naming its own state keeps it.
func migConfig(node *NodeState, ctr *Container, adj *Adjustment) {
	if node.State == "" {
		return
	}
	if v, ok := lookupEnv(ctr.Env, MIGConfigEnv); !ok || strings.TrimSpace(v) != "all" {
		return
	}
	if _, ok := lookupEnv(ctr.Env, StateEnv); ok || slices.Contains(ctr.Mounts, migConfigState) {
		return
	}
	adj.Mounts = append(adj.Mounts, Mount{Source: node.State, Destination: migConfigState, Type: "bind", Options: []string{"bind", "rw", "nosuid", "nodev"}})
	adj.Env = append(adj.Env, EnvVar{Key: StateEnv, Value: migConfigState})
}
