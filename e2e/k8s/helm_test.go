//go:build k8s

package k8s

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// Helm through its SDK, as the suite installs charts: install, rollout,
// uninstall.

// helmConfig is the Helm SDK's configuration for namespace ns, as helm -n ns
// with the cluster's kubeconfig; Helm's debug log goes to helm.log.
func (c *cluster) helmConfig(ns string) (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	kubeconfig, cacheDir := c.env["KUBECONFIG"], filepath.Join(c.dir, "helm-cache")
	flags.KubeConfig, flags.Namespace, flags.CacheDir = &kubeconfig, &ns, &cacheDir
	f, err := os.OpenFile(filepath.Join(c.out, "helm.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cfg := new(action.Configuration)
	logf := func(format string, v ...any) {
		fmt.Fprintf(f, time.Now().Format("15:04:05.000 ")+format+"\n", v...)
	}
	if err := cfg.Init(flags, ns, "secret", logf); err != nil {
		return nil, fmt.Errorf("helm in namespace %s: %w", ns, err)
	}
	return cfg, nil
}

// helmInstall is helm upgrade --install --wait: the release at vals,
// its workloads ready.
func (c *cluster) helmInstall(ctx context.Context, release, ns, chartDir string, vals map[string]any, createNS bool) error {
	cfg, err := c.helmConfig(ns)
	if err != nil {
		return err
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		return fmt.Errorf("load chart %s: %w", chartDir, err)
	}
	hist := action.NewHistory(cfg)
	hist.Max = 1
	if _, err := hist.Run(release); errors.Is(err, driver.ErrReleaseNotFound) {
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace, in.CreateNamespace = release, ns, createNS
		in.Wait, in.Timeout = true, 3*time.Minute
		if _, err := in.RunWithContext(ctx, ch, vals); err != nil {
			return fmt.Errorf("helm install %s %s -n %s: %w%s", release, chartDir, ns, err, c.podLogs(ns, ""))
		}
		return nil
	} else if err != nil {
		return fmt.Errorf("helm history %s -n %s: %w", release, ns, err)
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Wait, up.Timeout = ns, true, 3*time.Minute
	if _, err := up.RunWithContext(ctx, release, ch, vals); err != nil {
		return fmt.Errorf("helm upgrade %s %s -n %s: %w%s", release, chartDir, ns, err, c.podLogs(ns, ""))
	}
	return nil
}

// waitRollout waits until every DaemonSet of a release has rolled out on
// the node: its pods are of the current template, Ready, and no old pod is
// left (its preStop hook has run). Helm's --wait does not: it counts a
// DaemonSet ready with maxUnavailable (1) pods not ready, which on one node
// is before the pod has even started.
func (c *cluster) waitRollout(ctx context.Context, ns, release string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	sel := "app.kubernetes.io/instance=" + release
	var last string
	for {
		done, state, err := c.rolledOut(ctx, ns, sel)
		if done {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = state
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("DaemonSets of %s in %s not rolled out: %s%s", release, ns, last, c.podLogs(ns, sel))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *cluster) rolledOut(ctx context.Context, ns, sel string) (bool, string, error) {
	dss, err := c.cs.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return false, "", err
	}
	pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return false, "", err
	}
	for _, ds := range dss.Items {
		st := ds.Status
		if st.ObservedGeneration < ds.Generation || st.UpdatedNumberScheduled != st.DesiredNumberScheduled || st.NumberAvailable != st.DesiredNumberScheduled {
			return false, fmt.Sprintf("DaemonSet %s: generation %d observed %d, %d desired, %d updated, %d available",
				ds.Name, ds.Generation, st.ObservedGeneration, st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberAvailable), nil
		}
		n := 0
		for _, p := range pods.Items {
			if !metav1.IsControlledBy(&p, &ds) {
				continue
			}
			ready, _ := podReady(&p)
			if p.DeletionTimestamp != nil || p.Labels["pod-template-generation"] != fmt.Sprint(ds.Generation) || !ready {
				return false, fmt.Sprintf("DaemonSet %s: pod %s: %s", ds.Name, p.Name, podState(&p)), nil
			}
			n++
		}
		if n != int(st.DesiredNumberScheduled) {
			return false, fmt.Sprintf("DaemonSet %s: %d pods, want %d", ds.Name, n, st.DesiredNumberScheduled), nil
		}
	}
	return len(dss.Items) > 0, "no DaemonSets", nil
}

// helmUninstall is helm uninstall --wait: the release's objects are gone,
// its pods too (their preStop hooks have run).
func (c *cluster) helmUninstall(ctx context.Context, release, ns string) error {
	cfg, err := c.helmConfig(ns)
	if err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.Wait, un.Timeout = true, 2*time.Minute
	if _, err := un.Run(release); err != nil {
		return fmt.Errorf("helm uninstall %s -n %s: %w", release, ns, err)
	}
	if release == nvidiaRelease {
		c.mu.Lock()
		c.nvidia = false
		c.mu.Unlock()
	}
	// Helm waits for the DaemonSets, not for their pods and hooks.
	return c.waitNoPods(ctx, ns, "app.kubernetes.io/instance="+release)
}

// waitNoPods waits until no pod matches selector in ns.
func (c *cluster) waitNoPods(ctx context.Context, ns, selector string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil && len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pods %s in %s still there: %v", selector, ns, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// podLogs is, for a failure message, the state and logs of ns's pods that
// match selector (all: ""), every container's.
func (c *cluster) podLogs(ns, selector string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return "\n(pods of " + ns + ": " + err.Error() + ")"
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "\n--- pod %s/%s: %s", ns, p.Name, podState(&p))
		for _, ctr := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
			data, err := c.cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: ctr.Name}).DoRaw(ctx)
			if err != nil {
				continue
			}
			fmt.Fprintf(&b, "\n--- logs of %s:\n%s", ctr.Name, tail(string(data), 20))
		}
	}
	return b.String()
}
