package nri

import (
	"slices"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/nvmock/nvmock/plugin/inject"
)

// cdiAnnotationPrefix marks CRI's CDI device annotations (cdi.k8s.io/<key>:
// a comma list of fully qualified device names).
const cdiAnnotationPrefix = "cdi.k8s.io/"

// toPod is the decision's view of an NRI pod.
func toPod(pod *api.PodSandbox) inject.Pod {
	return inject.Pod{
		Namespace:      pod.GetNamespace(),
		Name:           pod.GetName(),
		Annotations:    pod.GetAnnotations(),
		RuntimeHandler: pod.GetRuntimeHandler(),
	}
}

// toContainer is the decision's view of an NRI container: its env, the
// device nodes and mount destinations already in its spec (those of
// /dev/null apart too), the CDI devices
// it asked for (from the CRI request or cdi.k8s.io annotations on it) and
// whether it is privileged.
func toContainer(ctr *api.Container) inject.Container {
	c := inject.Container{Name: ctr.GetName(), Env: ctr.GetEnv(), Args: ctr.GetArgs()}
	if ms := ctr.GetMounts(); len(ms) > 0 {
		c.Mounts = make([]string, len(ms))
		for i, m := range ms {
			c.Mounts[i] = m.GetDestination()
			if m.GetSource() == "/dev/null" {
				c.NullMounts = append(c.NullMounts, m.GetDestination())
			}
		}
	}
	if devs := ctr.GetLinux().GetDevices(); len(devs) > 0 {
		c.Devices = make([]inject.DeviceNode, 0, len(devs))
		for _, d := range devs {
			n := inject.DeviceNode{Path: d.GetPath(), Type: d.GetType(), Major: d.GetMajor(), Minor: d.GetMinor()}
			if m := d.GetFileMode(); m != nil {
				n.FileMode = m.GetValue()
			}
			c.Devices = append(c.Devices, n)
		}
	}
	for _, d := range ctr.GetCDIDevices() {
		if n := d.GetName(); n != "" {
			c.CDIDevices = append(c.CDIDevices, n)
		}
	}
	// Not the pod's: containerd applies only the container's (WithCDI).
	c.CDIDevices = appendCDIAnnotations(c.CDIDevices, ctr.GetAnnotations())
	for _, ns := range ctr.GetLinux().GetNamespaces() {
		if ns.GetType() == "user" {
			c.UserNS = true
		}
	}
	for _, r := range ctr.GetLinux().GetResources().GetDevices() {
		if r.GetAllow() && (r.GetType() == "" || r.GetType() == "a") && r.GetMajor() == nil && r.GetMinor() == nil {
			c.Privileged = true
		}
	}
	return c
}

func appendCDIAnnotations(out []string, ann map[string]string) []string {
	for k, v := range ann {
		if !strings.HasPrefix(k, cdiAnnotationPrefix) {
			continue
		}
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// adjustmentArena holds the fixed parts of one NRI adjustment, allocated
// together: a create costs a handful of allocations, not one per field.
type adjustmentArena struct {
	adj   api.ContainerAdjustment
	linux api.LinuxContainerAdjustment
	res   api.LinuxResources
}

// toNRI converts a decision into NRI's adjustment: read-only bind mounts,
// device nodes with their numbers and file mode, device cgroup rules and
// environment variables. It fills the fields the api helpers (AddMount,
// AddDevice, AddEnv) append to, with the same values, but in one slice per
// kind.
func toNRI(a *inject.Adjustment) *api.ContainerAdjustment {
	ar := &adjustmentArena{}
	out := &ar.adj

	if len(a.Mounts) > 0 {
		ms := make([]api.Mount, len(a.Mounts))
		ps := make([]*api.Mount, len(a.Mounts))
		for i := range a.Mounts {
			m := &a.Mounts[i]
			ms[i].Destination, ms[i].Source, ms[i].Type, ms[i].Options = m.Destination, m.Source, m.Type, m.Options
			ps[i] = &ms[i]
		}
		out.Mounts = ps
	}

	if len(a.Devices) > 0 || len(a.DeviceRules) > 0 {
		out.Linux = &ar.linux
	}
	if len(a.Devices) > 0 {
		ds := make([]api.LinuxDevice, len(a.Devices))
		fm := make([]api.OptionalFileMode, len(a.Devices))
		ps := make([]*api.LinuxDevice, len(a.Devices))
		for i := range a.Devices {
			d := &a.Devices[i]
			fm[i].Value = d.FileMode
			ds[i].Path, ds[i].Type, ds[i].Major, ds[i].Minor, ds[i].FileMode = d.Path, d.Type, d.Major, d.Minor, &fm[i]
			ps[i] = &ds[i]
		}
		ar.linux.Devices = ps
	}
	if len(a.DeviceRules) > 0 {
		rs := make([]api.LinuxDeviceCgroup, len(a.DeviceRules))
		nums := make([]api.OptionalInt64, 2*len(a.DeviceRules))
		ps := make([]*api.LinuxDeviceCgroup, len(a.DeviceRules))
		for i := range a.DeviceRules {
			r := &a.DeviceRules[i]
			nums[2*i].Value, nums[2*i+1].Value = r.Major, r.Minor
			rs[i].Allow, rs[i].Type, rs[i].Major, rs[i].Minor, rs[i].Access = r.Allow, r.Type, &nums[2*i], &nums[2*i+1], r.Access
			ps[i] = &rs[i]
		}
		ar.res.Devices = ps
		ar.linux.Resources = &ar.res
	}

	if len(a.Env) > 0 {
		kv := make([]api.KeyValue, len(a.Env))
		ps := make([]*api.KeyValue, len(a.Env))
		for i := range a.Env {
			kv[i].Key, kv[i].Value = a.Env[i].Key, a.Env[i].Value
			ps[i] = &kv[i]
		}
		out.Env = ps
	}
	if len(a.Hooks) > 0 {
		hs := make([]*api.Hook, len(a.Hooks))
		for i, h := range a.Hooks {
			hs[i] = &api.Hook{Path: h.Path, Args: h.Args}
		}
		out.Hooks = &api.Hooks{CreateContainer: hs}
	}
	return out
}
