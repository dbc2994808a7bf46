package inject

import (
	"fmt"
	"slices"
	"strings"
)

// NVIDIA's runtime gives a privileged container asking for
// NVIDIA_MIG_CONFIG_DEVICES=all the MIG config capability, /dev/nvidia-caps/
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

// migConfig adds the node's live state, writable, to a container NVIDIA's
// runtime gives the MIG config capability (migCapability); a container
// naming its own state keeps it. A request refused says why in a warning.
func migConfig(node *NodeState, ctr *Container, adj *Adjustment, all bool) {
	ok, why := migCapability(ctr, adj, all, MIGConfigEnv)
	if why != "" {
		adj.Warnings = append(adj.Warnings, why)
	}
	if !ok || node.State == "" {
		return
	}
	if _, ok := lookupEnv(ctr.Env, StateEnv); ok || slices.Contains(ctr.Mounts, migConfigState) {
		return
	}
	adj.Mounts = append(adj.Mounts, Mount{Source: node.State, Destination: migConfigState, Type: "bind", Options: []string{"bind", "rw", "nosuid", "nodev"}})
	adj.Env = append(adj.Env, EnvVar{Key: StateEnv, Value: migConfigState})
}

// migCapability says whether NVIDIA's runtime (its CDI mode) gives the
// container the MIG capability env asks for, and if it asks in vain, why:
// only "all" is a value; the config capability only to a privileged
// container; neither to a container given some MIG devices (not all). A
// container's capabilities do not reach NRI, so the monitor capability,
// which NVIDIA's runtime gives a container with CAP_SYS_ADMIN (DCGM's
// exporter runs so), is not checked for privilege.
func migCapability(ctr *Container, adj *Adjustment, all bool, env string) (ok bool, why string) {
	v, set := lookupEnv(ctr.Env, env)
	v = strings.TrimSpace(v)
	switch {
	case !set || v == "":
		return false, ""
	case !strings.EqualFold(v, "all"):
		return false, fmt.Sprintf("env %s=%s: only all is supported, as with NVIDIA's runtime; no MIG capability given", env, quote(v))
	case env == MIGConfigEnv && !ctr.Privileged:
		return false, fmt.Sprintf("env %s=all in a container that is not privileged: NVIDIA's runtime refuses it; the MIG layout stays read-only", env)
	case len(adj.MIG) > 0 && !all:
		return false, fmt.Sprintf("env %s=all in a container given some MIG devices: NVIDIA's runtime refuses it", env)
	}
	return true, ""
}

// migCapsRefused says why NVIDIA's runtime (CDI mode) fails a container it
// gives GPUs that asks for a MIG capability: a value other than all, or all
// in a container given some MIG devices; "" if it does not. Privilege is
// left to migCapability: the runtime asks for CAP_SYS_ADMIN, which does not
// reach NRI.
func migCapsRefused(ctr *Container, someMIG bool) string {
	for _, env := range []string{MIGConfigEnv, MIGMonitorEnv} {
		v, _ := lookupEnv(ctr.Env, env)
		switch v = strings.TrimSpace(v); {
		case v == "":
		case !strings.EqualFold(v, "all"):
			return fmt.Sprintf("env %s=%s: only all is supported; NVIDIA's runtime fails the container", env, quote(v))
		case someMIG:
			return fmt.Sprintf("env %s=all in a container given some MIG devices: NVIDIA's runtime fails the container", env)
		}
	}
	return ""
}
