package hostprep

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Leaving says whether node leaves DaemonSet namespace/name's pool, so that
// a pod's preStop hook uninstalls only then. A rolling update, a pod delete
// or a drain stops the pod but not the DaemonSet, whose next pod installs
// the same overlay over the kept one; uninstalling there would delete the
// directory NVIDIA's device plugin has bind-mounted.
//
// The node leaves when the DaemonSet is gone or being deleted (helm
// uninstall) or no longer selects the node. On an error leave is true too,
// with err set: the caller uninstalls as before rather than leave a stale
// overlay because the API server was briefly unreachable.
//
// The node leaves this pod's install too when the DaemonSet now installs
// elsewhere (its hostprep init container's --root, --cdi-dir or --nfd-dir
// differ from here's, those of here that are set): a helm upgrade that moved
// them would otherwise leave the old files, and the new install would find
// a CDI spec it did not write.
func (c *KubeClient) Leaving(ctx context.Context, namespace, name, node string, here InstallDirs) (leave bool, reason string, err error) {
	dsName := namespace + "/" + name
	ds, err := c.getDaemonSet(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		return true, fmt.Sprintf("DaemonSet %s is gone", dsName), nil
	}
	if err != nil {
		return true, "", fmt.Errorf("get DaemonSet %s: %w", dsName, err)
	}
	if ds.DeletionTimestamp != nil {
		return true, fmt.Sprintf("DaemonSet %s is being deleted", dsName), nil
	}
	pod := ds.Spec.Template.Spec
	if moved := here.movedIn(pod); moved != "" {
		return true, fmt.Sprintf("DaemonSet %s now installs %s", dsName, moved), nil
	}
	if len(pod.NodeSelector) > 0 {
		if node == "" {
			return true, "", fmt.Errorf("DaemonSet %s has a nodeSelector and the node has no name; pass --node-name or set NODE_NAME", dsName)
		}
		n, err := c.getNode(ctx, node)
		if apierrors.IsNotFound(err) {
			return true, fmt.Sprintf("node %s is gone", node), nil
		}
		if err != nil {
			return true, "", fmt.Errorf("get node %s: %w", node, err)
		}
		keys := make([]string, 0, len(pod.NodeSelector))
		for k := range pod.NodeSelector {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if v, ok := n.Labels[k]; !ok || v != pod.NodeSelector[k] {
				return true, fmt.Sprintf("DaemonSet %s no longer selects node %s: it wants %s=%s", dsName, node, k, pod.NodeSelector[k]), nil
			}
		}
	}
	// The chart places pods by nodeSelector alone. Node affinity someone
	// added by hand is not evaluated here: it counts as selecting, so the
	// overlay is kept (the mistake that costs least: a stale overlay on a
	// node the pool left, rather than a deleted one under a running device
	// plugin).
	if pod.Affinity != nil && pod.Affinity.NodeAffinity != nil {
		return false, fmt.Sprintf("DaemonSet %s selects node %s by nodeSelector; its node affinity is not evaluated", dsName, node), nil
	}
	return false, fmt.Sprintf("DaemonSet %s selects node %s", dsName, node), nil
}

// InstallDirs are where an install writes, as its flags give them.
type InstallDirs struct {
	Root, CDIDir, NFDDir string
}

// movedIn says what the pod's hostprep install writes elsewhere than d
// (its fields that are set), or "".
func (d InstallDirs) movedIn(pod corev1.PodSpec) string {
	for _, c := range pod.InitContainers {
		if len(c.Args) < 2 || c.Args[0] != "hostprep" || c.Args[1] != "install" {
			continue
		}
		for _, f := range []struct{ flag, here string }{{"root", d.Root}, {"cdi-dir", d.CDIDir}, {"nfd-dir", d.NFDDir}} {
			if there := flagValue(c.Args[2:], f.flag); f.here != "" && there != "" && there != f.here {
				return fmt.Sprintf("with --%s=%s, not %s", f.flag, there, f.here)
			}
		}
	}
	return ""
}

// flagValue is --name's value in args (--name=V or --name V), or "".
func flagValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}
