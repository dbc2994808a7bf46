package hostprep

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
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
// at another root (its hostprep init container's --root): a helm upgrade
// that moved it would otherwise leave the old root's files. The new root's
// install takes over the CDI spec and NFD file (ownerLine), and this
// uninstall leaves them and the node's labels to it.
//
// A node that leaves keeps the install when another DaemonSet of the
// namespace, which installs in the same place, selects it: its pod installs
// over this one. So a renamed pool (helm makes the new DaemonSet before it
// deletes the old) or a node moved to another pool is never left without
// GPUs in between, and NVIDIA's device plugin and GFD stay.
// next names that DaemonSet (NAMESPACE/NAME), "" if none: the caller hands
// the install over to it (HandOver), so that its own pod's leaving removes
// it.
func (c *KubeClient) Leaving(ctx context.Context, namespace, name, node string, here InstallDirs) (leave bool, reason, next string, err error) {
	leave, moved, reason, err := c.leavingPool(ctx, namespace, name, node, here)
	if !leave || moved || err != nil {
		return leave, reason, "", err
	}
	succ, err := c.successor(ctx, namespace, name, node, here)
	if err != nil {
		return true, "", "", err
	}
	if succ != "" {
		return false, fmt.Sprintf("%s, but DaemonSet %s/%s, which installs here too, selects node %s", reason, namespace, succ, node), namespace + "/" + succ, nil
	}
	return true, reason, "", nil
}

// leavingPool is Leaving but for the successor; moved: the DaemonSet now
// installs elsewhere.
func (c *KubeClient) leavingPool(ctx context.Context, namespace, name, node string, here InstallDirs) (leave, moved bool, reason string, err error) {
	dsName := namespace + "/" + name
	ds, err := c.getDaemonSet(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		return true, false, fmt.Sprintf("DaemonSet %s is gone", dsName), nil
	}
	if err != nil {
		return true, false, "", fmt.Errorf("get DaemonSet %s: %w", dsName, err)
	}
	if ds.DeletionTimestamp != nil {
		return true, false, fmt.Sprintf("DaemonSet %s is being deleted", dsName), nil
	}
	pod := ds.Spec.Template.Spec
	if m := here.movedIn(pod); m != "" {
		return true, true, fmt.Sprintf("DaemonSet %s now installs %s", dsName, m), nil
	}
	if len(pod.NodeSelector) > 0 {
		n, err := c.nodeNamed(ctx, dsName, node)
		if err != nil {
			return true, false, "", err
		}
		if n == nil {
			return true, false, fmt.Sprintf("node %s is gone", node), nil
		}
		if k := unmatched(pod, n); k != "" {
			return true, false, fmt.Sprintf("DaemonSet %s no longer selects node %s: it wants %s=%s", dsName, node, k, pod.NodeSelector[k]), nil
		}
	}
	// The chart places pods by nodeSelector alone. Node affinity someone
	// added by hand is not evaluated here: it counts as selecting, so the
	// overlay is kept (the mistake that costs least: a stale overlay on a
	// node the pool left, rather than a deleted one under a running device
	// plugin).
	if pod.Affinity != nil && pod.Affinity.NodeAffinity != nil {
		return false, false, fmt.Sprintf("DaemonSet %s selects node %s by nodeSelector; its node affinity is not evaluated", dsName, node), nil
	}
	return false, false, fmt.Sprintf("DaemonSet %s selects node %s", dsName, node), nil
}

// successor is another DaemonSet of namespace, not being deleted, whose
// pods run hostprep install in the same place as here and which places a
// pod on node: its nodeSelector matches and its tolerations take the
// node's taints; "" if none. One with required node affinity is not
// evaluated and not taken: the node then leaves, as before there were
// successors (review: a pod that never comes would have kept the install
// for good).
func (c *KubeClient) successor(ctx context.Context, namespace, name, node string, here InstallDirs) (string, error) {
	var list appsv1.DaemonSetList
	if err := c.apps.Get().Namespace(namespace).Resource("daemonsets").Do(ctx).Into(&list); err != nil {
		return "", fmt.Errorf("list DaemonSets in %s: %w", namespace, err)
	}
	var n *corev1.Node
	for _, ds := range list.Items {
		pod := ds.Spec.Template.Spec
		if ds.Name == name || ds.DeletionTimestamp != nil || !installs(pod) || here.movedIn(pod) != "" {
			continue
		}
		if a := pod.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			continue
		}
		if n == nil {
			var err error
			if n, err = c.nodeNamed(ctx, namespace+"/"+ds.Name, node); err != nil || n == nil {
				return "", err
			}
		}
		if unmatched(pod, n) == "" && tolerates(pod, n) {
			return ds.Name, nil
		}
	}
	return "", nil
}

// tolerates says whether pod tolerates every taint of node that keeps pods
// off it. The DaemonSet controller adds tolerations of the node.kubernetes.io
// conditions to every DaemonSet pod.
func tolerates(pod corev1.PodSpec, n *corev1.Node) bool {
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule || strings.HasPrefix(t.Key, "node.kubernetes.io/") {
			continue
		}
		if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), t, true) }) {
			return false
		}
	}
	return true
}

// nodeNamed gets node, which a DaemonSet's placement is to be checked
// against; nil, nil if the node is gone.
func (c *KubeClient) nodeNamed(ctx context.Context, dsName, node string) (*corev1.Node, error) {
	if node == "" {
		return nil, fmt.Errorf("DaemonSet %s has a nodeSelector and the node has no name; pass --node-name or set NODE_NAME", dsName)
	}
	n, err := c.getNode(ctx, node)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", node, err)
	}
	return n, nil
}

// unmatched is the first key of pod's nodeSelector that node's labels do
// not match, or "".
func unmatched(pod corev1.PodSpec, n *corev1.Node) string {
	keys := make([]string, 0, len(pod.NodeSelector))
	for k := range pod.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v, ok := n.Labels[k]; !ok || v != pod.NodeSelector[k] {
			return k
		}
	}
	return ""
}

// installs says whether pod runs hostprep install (in an init container,
// as the chart's pods do).
func installs(pod corev1.PodSpec) bool {
	for _, c := range pod.InitContainers {
		if len(c.Args) >= 2 && c.Args[0] == "hostprep" && c.Args[1] == "install" {
			return true
		}
	}
	return false
}

// InstallDirs are where an install writes, as its flags give them.
type InstallDirs struct {
	Root, CDIDir, NFDDir string
}

// movedIn says where the pod's hostprep install puts its root, if not in
// d's (when set), or "". Only the root counts: an install at the same root
// with other CDI or NFD directories replaces this one there and removes
// its old files itself, before or after this pod goes (the DaemonSet
// surges, so the new pod may have installed already: uninstalling the
// root then would remove the new install).
func (d InstallDirs) movedIn(pod corev1.PodSpec) string {
	for _, c := range pod.InitContainers {
		if len(c.Args) < 2 || c.Args[0] != "hostprep" || c.Args[1] != "install" {
			continue
		}
		// The same directory however written (/var/lib/nvmock/ and
		// /var/lib/nvmock): uninstalling it would remove the new install.
		if there := flagValue(c.Args[2:], "root"); d.Root != "" && there != "" && filepath.Clean(there) != filepath.Clean(d.Root) {
			return fmt.Sprintf("with --root=%s, not %s", there, d.Root)
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
