package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	cricli "github.com/nvmock/nvmock/internal/cri"
)

// pod turns the DaemonSet's pod template into CRI configs as the kubelet
// would on node: downward-API env, $(VAR) expansion in command and args,
// hostPath and ConfigMap volumes, security contexts, resources. The one
// difference: the pod gets the host's network, as the e2e node has no CNI.
type pod struct {
	r         *rendered
	node, dir string
}

func (p *pod) name() string { return p.r.ds.Name + "-" + p.node }

func (p *pod) sandboxConfig() *cri.PodSandboxConfig {
	t := &p.r.ds.Spec.Template
	privileged := false
	for _, c := range append(append([]corev1.Container{}, t.Spec.InitContainers...), t.Spec.Containers...) {
		if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
			privileged = true
		}
	}
	return &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: p.name(), Namespace: p.r.ds.Namespace, Uid: p.name() + "-uid"},
		LogDirectory: filepath.Join(p.dir, "logs"),
		Labels:       t.Labels,
		Annotations:  t.Annotations,
		Linux: &cri.LinuxPodSandboxConfig{SecurityContext: &cri.LinuxSandboxSecurityContext{
			NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE},
			Privileged:       privileged,
		}},
	}
}

// containerConfig is one container's CRI config.
func (p *pod) containerConfig(c corev1.Container) (*cri.ContainerConfig, error) {
	env := map[string]string{}
	cfg := &cri.ContainerConfig{
		Metadata: &cri.ContainerMetadata{Name: c.Name},
		Image:    &cri.ImageSpec{Image: c.Image},
		LogPath:  c.Name + ".log",
		Linux:    &cri.LinuxContainerConfig{SecurityContext: &cri.LinuxContainerSecurityContext{}},
	}
	for _, e := range c.Env {
		v := e.Value
		if f := e.ValueFrom; f != nil {
			if f.FieldRef == nil {
				return nil, fmt.Errorf("container %s: env %s: only fieldRef is supported here", c.Name, e.Name)
			}
			switch f.FieldRef.FieldPath {
			case "spec.nodeName":
				v = p.node
			case "metadata.namespace":
				v = p.r.ds.Namespace
			case "metadata.name":
				v = p.name()
			default:
				return nil, fmt.Errorf("container %s: env %s: field %s is not supported here", c.Name, e.Name, f.FieldRef.FieldPath)
			}
		}
		env[e.Name] = v
		cfg.Envs = append(cfg.Envs, &cri.KeyValue{Key: e.Name, Value: v})
	}
	cfg.Command = expand(c.Command, env)
	cfg.Args = expand(c.Args, env)

	for _, m := range c.VolumeMounts {
		src, err := p.volumeSource(m.Name)
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", c.Name, err)
		}
		cfg.Mounts = append(cfg.Mounts, &cri.Mount{ContainerPath: m.MountPath, HostPath: src, Readonly: m.ReadOnly})
	}

	if sc := c.SecurityContext; sc != nil {
		l := cfg.Linux.SecurityContext
		l.Privileged = sc.Privileged != nil && *sc.Privileged
		l.ReadonlyRootfs = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
		l.NoNewPrivs = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
		if sc.RunAsUser != nil {
			l.RunAsUser = &cri.Int64Value{Value: *sc.RunAsUser}
		}
		if caps := sc.Capabilities; caps != nil {
			l.Capabilities = &cri.Capability{}
			for _, a := range caps.Add {
				l.Capabilities.AddCapabilities = append(l.Capabilities.AddCapabilities, string(a))
			}
			for _, d := range caps.Drop {
				l.Capabilities.DropCapabilities = append(l.Capabilities.DropCapabilities, string(d))
			}
		}
		if sp := sc.SeccompProfile; sp != nil && sp.Type == corev1.SeccompProfileTypeRuntimeDefault {
			l.Seccomp = &cri.SecurityProfile{ProfileType: cri.SecurityProfile_RuntimeDefault}
		}
	}
	res := &cri.LinuxContainerResources{}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		res.MemoryLimitInBytes = q.Value()
	}
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		res.CpuShares = max(2, q.MilliValue()*1024/1000) // the kubelet's conversion
	}
	cfg.Linux.Resources = res
	return cfg, nil
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(VAR) with the container's env, as the kubelet does.
func expand(in []string, env map[string]string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = varRef.ReplaceAllStringFunc(s, func(m string) string {
			if v, ok := env[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
	}
	return out
}

// volumeSource is the host path behind a volume; a ConfigMap's keys are
// written under dir as the kubelet projects them.
func (p *pod) volumeSource(name string) (string, error) {
	for _, v := range p.r.ds.Spec.Template.Spec.Volumes {
		if v.Name != name {
			continue
		}
		switch {
		case v.HostPath != nil:
			t := v.HostPath.Type
			if t != nil && *t == corev1.HostPathDirectoryOrCreate {
				if err := os.MkdirAll(v.HostPath.Path, 0o755); err != nil {
					return "", err
				}
			}
			return v.HostPath.Path, nil
		case v.ConfigMap != nil:
			cm, ok := p.r.configMaps[v.ConfigMap.Name]
			if !ok {
				return "", fmt.Errorf("volume %s: no ConfigMap %s in the chart", name, v.ConfigMap.Name)
			}
			d := filepath.Join(p.dir, "configmaps", cm.Name)
			if err := os.MkdirAll(d, 0o755); err != nil {
				return "", err
			}
			for k, data := range cm.Data {
				if err := os.WriteFile(filepath.Join(d, k), []byte(data), 0o644); err != nil {
					return "", err
				}
			}
			return d, nil
		}
		return "", fmt.Errorf("volume %s: only hostPath and configMap volumes are supported here", name)
	}
	return "", fmt.Errorf("no volume %s in the pod", name)
}

// runToCompletion creates, starts and waits for an init container; its
// output comes back in the error when it fails.
func runToCompletion(ctx context.Context, rt cri.RuntimeServiceClient, podID string, sb *cri.PodSandboxConfig, cfg *cri.ContainerConfig) error {
	id, err := createStart(ctx, rt, podID, sb, cfg)
	if err != nil {
		return err
	}
	for {
		s, err := rt.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return err
		}
		if s.Status.State == cri.ContainerState_CONTAINER_EXITED {
			log, _ := os.ReadFile(s.Status.LogPath)
			if s.Status.ExitCode != 0 {
				return fmt.Errorf("init container %s exited %d:\n%s", cfg.Metadata.Name, s.Status.ExitCode, cricli.Log(log))
			}
			fmt.Print(cricli.Log(log))
			_, err := rt.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: id})
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("init container %s: %w", cfg.Metadata.Name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func createStart(ctx context.Context, rt cri.RuntimeServiceClient, podID string, sb *cri.PodSandboxConfig, cfg *cri.ContainerConfig) (string, error) {
	r, err := rt.CreateContainer(ctx, &cri.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: sb})
	if err != nil {
		return "", fmt.Errorf("create container %s: %w", cfg.Metadata.Name, err)
	}
	if _, err := rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: r.ContainerId}); err != nil {
		return "", fmt.Errorf("start container %s: %w", cfg.Metadata.Name, err)
	}
	return r.ContainerId, nil
}
