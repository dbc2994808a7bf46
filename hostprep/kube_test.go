//go:build integration

package hostprep_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	"k8s.io/client-go/rest"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/kubetest"
	"github.com/nvmock/nvmock/profile"
)

// The chart's release and namespace: the client runs as the chart's
// ServiceAccount, with the chart's RBAC.
const releaseNS = "nvmock"

// TestWithARealAPIServer runs hostprep's client against a real
// kube-apiserver (internal/kubetest), as the pod of `helm install nvmock
// charts/nvmock -n nvmock` would: in-cluster credentials (a token file),
// the chart's RBAC.
func TestWithARealAPIServer(t *testing.T) {
	s := kubetest.Start(t)
	sa := s.ChartRBAC(t, "nvmock", releaseNS)
	t.Run("a rotated token is picked up", func(t *testing.T) { t.Parallel(); rotatedToken(t, s, sa) })
	t.Run("install's labels reach the node, idempotently, and uninstall removes them", func(t *testing.T) {
		t.Parallel()
		labels(t, s, client(t, s.PodConfig(t, releaseNS, sa)))
	})
	t.Run("a refused token is an error naming the node", func(t *testing.T) {
		t.Parallel()
		cfg := rest.CopyConfig(s.PodConfig(t, releaseNS, sa))
		cfg.BearerToken, cfg.BearerTokenFile = "wrong", ""
		err := client(t, cfg).RemoveLabels(ctx(t), "node-7")
		if !apierrors.IsUnauthorized(err) || !strings.HasPrefix(err.Error(), "label node node-7: ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("got %v, want one line: label node node-7: Unauthorized", err)
		}
	})
	t.Run("uninstall asks whether the node leaves the pool", func(t *testing.T) {
		t.Parallel()
		leaving(t, s, client(t, s.PodConfig(t, releaseNS, sa)))
	})
	t.Run("the pre-delete hook waits until a DaemonSet is gone", func(t *testing.T) {
		t.Parallel()
		preDelete(t, s)
	})
}

// preDelete deletes DaemonSets in the foreground. This API server runs no
// garbage collector, so the foregroundDeletion finalizer stays until the
// test removes it, as the collector does once the pods are gone.
func preDelete(t *testing.T, s *kubetest.Server) {
	c := client(t, s.Config)
	admin, err := appsv1client.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "default"
	create := func(name string) {
		sel := map[string]string{"app": name}
		_, err := admin.DaemonSets(ns).Create(ctx(t), &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := c.DeleteDaemonSetAndWait(ctx(t), ns, "never-was", 10*time.Millisecond); err != nil {
		t.Errorf("a DaemonSet already gone: %v, want no error", err)
	}

	create("held")
	short, cancel := context.WithTimeout(ctx(t), time.Second)
	defer cancel()
	err = c.DeleteDaemonSetAndWait(short, ns, "held", 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "DaemonSet default/held is still being deleted") {
		t.Errorf("a DaemonSet whose pods never go: %v, want still being deleted", err)
	}

	create("released")
	done := make(chan error, 1)
	go func() { done <- c.DeleteDaemonSetAndWait(ctx(t), ns, "released", 20*time.Millisecond) }()
	for {
		ds, err := admin.DaemonSets(ns).Get(ctx(t), "released", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ds.DeletionTimestamp != nil {
			if len(ds.Finalizers) != 1 || ds.Finalizers[0] != metav1.FinalizerDeleteDependents {
				t.Errorf("finalizers %v, want the foreground deletion's %s", ds.Finalizers, metav1.FinalizerDeleteDependents)
			}
			ds.Finalizers = nil
			if _, err := admin.DaemonSets(ns).Update(ctx(t), ds, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after the DaemonSet went: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("DeleteDaemonSetAndWait did not return within 10 s of the DaemonSet going")
	}
}

func client(t *testing.T, cfg *rest.Config) *hostprep.KubeClient {
	t.Helper()
	c, err := hostprep.NewKubeClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func createNode(t *testing.T, s *kubetest.Server, name string, labels map[string]string) {
	t.Helper()
	if _, err := s.Core(t).Nodes().Create(ctx(t), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func labels(t *testing.T, s *kubetest.Server, c *hostprep.KubeClient) {
	p, err := profile.Builtin("h100")
	if err != nil {
		t.Fatal(err)
	}
	const node = "node-labels"
	others := map[string]string{"kubernetes.io/arch": "amd64", "nvidia.com/gpu.product": "left-by-someone"}
	createNode(t, s, node, others)
	get := func() *corev1.Node {
		t.Helper()
		n, err := s.Core(t).Nodes().Get(ctx(t), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	if err := c.ApplyLabels(ctx(t), node, p, false); err != nil {
		t.Fatal(err)
	}
	n := get()
	want := map[string]string{"kubernetes.io/arch": "amd64"}
	maps.Copy(want, hostprep.Labels(p))
	if !maps.Equal(n.Labels, want) {
		t.Errorf("labels %v, want %v", n.Labels, want)
	}
	if want["nvidia.com/gpu.product"] != "NVIDIA-H100-80GB-HBM3" || want["nvidia.com/gpu.count"] != "8" {
		t.Errorf("labels: %v", want)
	}
	// The same PATCH again changes nothing: the API server writes no new version.
	if err := c.ApplyLabels(ctx(t), node, p, false); err != nil {
		t.Fatal(err)
	}
	if again := get(); again.ResourceVersion != n.ResourceVersion {
		t.Errorf("a second install changed the node: resourceVersion %s, then %s", n.ResourceVersion, again.ResourceVersion)
	}

	for range 2 { // removing twice is no error
		if err := c.RemoveLabels(ctx(t), node); err != nil {
			t.Fatal(err)
		}
	}
	if got := get().Labels; !maps.Equal(got, map[string]string{"kubernetes.io/arch": "amd64"}) {
		t.Errorf("after uninstall: labels %v, want only kubernetes.io/arch", got)
	}
}

// rotatedToken: the client reads its token from the file, as
// rest.InClusterConfig sets it up, and uses a new token the kubelet writes
// there. client-go re-reads the file once its copy is 50 s old (a minute,
// less 10 s leeway; the kubelet renews a token at 80% of its life, an hour by
// default), so this waits about a minute.
func rotatedToken(t *testing.T, s *kubetest.Server, sa string) {
	const node = "node-rotation"
	createNode(t, s, node, nil)
	file := filepath.Join(t.TempDir(), "token")
	old, revoke := s.Token(t, releaseNS, sa)
	if err := os.WriteFile(file, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	c := client(t, s.InClusterConfig(t, file))
	if err := c.RemoveLabels(ctx(t), node); err != nil {
		t.Fatal(err)
	}
	start := time.Now()

	// The kubelet rotates: the file gets a new token; then the old one is
	// revoked, so that only the new one can succeed.
	renewed, _ := s.Token(t, releaseNS, sa)
	if err := os.WriteFile(file+".new", []byte(renewed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".new", file); err != nil {
		t.Fatal(err)
	}
	revoke()
	oldOnly := s.InClusterConfig(t, file)
	oldOnly.BearerToken, oldOnly.BearerTokenFile = old, ""
	deadline := time.Now().Add(30 * time.Second)
	for err := error(nil); !apierrors.IsUnauthorized(err); err = client(t, oldOnly).RemoveLabels(ctx(t), node) {
		if time.Now().After(deadline) {
			t.Fatalf("the old token is still accepted 30 s after its Secret was deleted: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}

	deadline = start.Add(75 * time.Second)
	var err error
	for {
		if err = c.RemoveLabels(ctx(t), node); err == nil {
			break
		}
		if !apierrors.IsUnauthorized(err) || time.Now().After(deadline) {
			t.Fatalf("%v after the token was rotated: %v", time.Since(start).Round(time.Second), err)
		}
		time.Sleep(time.Second)
	}
	t.Logf("the client used the rotated token %v after the rotation", time.Since(start).Round(time.Second))
}

func leaving(t *testing.T, s *kubetest.Server, c *hostprep.KubeClient) {
	const node = "node-7"
	createNode(t, s, node, map[string]string{"nvmock.io/pool": "a100", "kubernetes.io/arch": "amd64"})
	admin, err := appsv1client.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	daemonSet := func(name string, spec corev1.PodSpec) *appsv1.DaemonSet {
		spec.Containers = []corev1.Container{{Name: "nri", Image: "ghcr.io/nvmock/nvmock:0.1.0"}}
		sel := map[string]string{"app.kubernetes.io/name": name}
		return &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: sel},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: spec},
			},
		}
	}
	// installer is a pool's DaemonSet as the chart makes it: hostprep
	// install in an init container, at root if given.
	installer := func(name, pool, root string) *appsv1.DaemonSet {
		args := []string{"hostprep", "install", "--profile=" + pool}
		if root != "" {
			args = append(args, "--root="+root)
		}
		return daemonSet(name, corev1.PodSpec{NodeSelector: map[string]string{"nvmock.io/pool": pool},
			InitContainers: []corev1.Container{{Name: "hostprep", Image: "ghcr.io/nvmock/nvmock:0.1.0", Args: args}}})
	}
	// A node the chart's pools keep off unless they tolerate its taint.
	tainted := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-tainted", Labels: map[string]string{"nvmock.io/pool": "a100"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
			{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule}}}}
	if _, err := s.Core(t).Nodes().Create(ctx(t), tainted, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	with := func(ds *appsv1.DaemonSet, f func(*corev1.PodSpec)) *appsv1.DaemonSet {
		f(&ds.Spec.Template.Spec)
		return ds
	}
	tolerating := func(p *corev1.PodSpec) {
		p.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	}
	affinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nvmock.io/pool", Operator: corev1.NodeSelectorOpExists}}}}}}}
	unreachable := client(t, &rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile}, BearerToken: "x"})

	for _, tc := range []struct {
		name     string
		ds       *appsv1.DaemonSet // created in namespace, unless nil
		deleting bool              // then deleted while a finalizer holds it
		ns, node string            // default: the chart's namespace, node-7
		client   *hostprep.KubeClient
		leave    bool
		reason   string // in the reason, or in the error with isErr
		isErr    func(error) bool
		next     *appsv1.DaemonSet // another DaemonSet, made for this case only
		here     hostprep.InstallDirs
	}{
		{name: "a DaemonSet whose nodeSelector matches the node's labels keeps the overlay",
			ds:     daemonSet("selects", corev1.PodSpec{NodeSelector: map[string]string{"nvmock.io/pool": "a100", "kubernetes.io/arch": "amd64"}}),
			reason: "DaemonSet nvmock/selects selects node node-7"},
		{name: "a DaemonSet with no nodeSelector keeps it",
			ds:     daemonSet("everywhere", corev1.PodSpec{}),
			reason: "DaemonSet nvmock/everywhere selects node node-7"},
		{name: "node affinity is not evaluated and counts as selecting",
			ds:     daemonSet("affinity", corev1.PodSpec{Affinity: affinity}),
			reason: "its node affinity is not evaluated"},
		{name: "a DaemonSet being deleted uninstalls",
			ds: daemonSet("deleting", corev1.PodSpec{NodeSelector: map[string]string{"nvmock.io/pool": "a100"}}), deleting: true,
			leave: true, reason: "DaemonSet nvmock/deleting is being deleted"},
		{name: "a DaemonSet that no longer selects the node uninstalls",
			ds:    daemonSet("moved", corev1.PodSpec{NodeSelector: map[string]string{"nvmock.io/pool": "t4"}}),
			leave: true, reason: "DaemonSet nvmock/moved no longer selects node node-7: it wants nvmock.io/pool=t4"},
		{name: "a node that lacks a label the DaemonSet selects on uninstalls",
			ds:    daemonSet("zone", corev1.PodSpec{NodeSelector: map[string]string{"nvmock.io/pool": "a100", "topology.kubernetes.io/zone": "b"}}),
			leave: true, reason: "it wants topology.kubernetes.io/zone=b"},
		{name: "a DaemonSet that is gone uninstalls",
			leave: true, reason: "DaemonSet nvmock/gone is gone"},
		{name: "a node that is gone uninstalls",
			ds:   daemonSet("node-gone", corev1.PodSpec{NodeSelector: map[string]string{"nvmock.io/pool": "a100"}}),
			node: "node-99", leave: true, reason: "node node-99 is gone"},
		{name: "a DaemonSet the chart's Role does not cover is an error, and uninstalls",
			ds: daemonSet("elsewhere", corev1.PodSpec{}), ns: "default",
			leave: true, reason: "get DaemonSet default/elsewhere: ", isErr: apierrors.IsForbidden},
		{name: "an unreachable API server is an error, and uninstalls",
			client: unreachable, leave: true, reason: "get DaemonSet nvmock/unreachable: ",
			isErr: func(err error) bool { return strings.Contains(err.Error(), "connection refused") }},
		{name: "a renamed pool: another DaemonSet that installs here selects the node, and its pod installs over the kept install",
			next:   installer("pool-b", "a100", "/var/lib/nvmock"),
			reason: "DaemonSet nvmock/gone is gone, but DaemonSet nvmock/pool-b, which installs here too, selects node node-7"},
		{name: "a node moved to another pool of the namespace keeps the install for it",
			ds:     daemonSet("pool-c", corev1.PodSpec{NodeSelector: map[string]string{"nvmock.io/pool": "t4"}}),
			next:   installer("pool-d", "a100", ""),
			reason: "it wants nvmock.io/pool=t4, but DaemonSet nvmock/pool-d, which installs here too, selects node node-7"},
		{name: "another pool's DaemonSet that does not select the node does not keep it",
			next:  installer("pool-e", "t4", "/var/lib/nvmock"),
			leave: true, reason: "DaemonSet nvmock/gone is gone"},
		{name: "another pool's DaemonSet that does not tolerate the node's taint does not keep it (review)",
			node: "node-tainted", next: installer("pool-g", "a100", ""),
			leave: true, reason: "DaemonSet nvmock/gone is gone"},
		{name: "another pool's DaemonSet that tolerates the node's taint keeps it",
			node: "node-tainted", next: with(installer("pool-h", "a100", ""), tolerating),
			reason: "DaemonSet nvmock/pool-h, which installs here too, selects node node-tainted"},
		{name: "another pool's DaemonSet with required node affinity is not evaluated and does not keep it (review)",
			next:  with(installer("pool-i", "a100", ""), func(p *corev1.PodSpec) { p.Affinity = affinity }),
			leave: true, reason: "DaemonSet nvmock/gone is gone"},
		{name: "another pool's DaemonSet that installs elsewhere does not keep it",
			next: installer("pool-f", "a100", "/opt/nvmock"), here: hostprep.InstallDirs{Root: "/var/lib/nvmock"},
			leave: true, reason: "DaemonSet nvmock/gone is gone"},
		{name: "the same root written with a trailing slash is the same root (review: it uninstalled the new install)",
			next: installer("pool-j", "a100", "/var/lib/nvmock/"), here: hostprep.InstallDirs{Root: "/var/lib/nvmock"},
			reason: "DaemonSet nvmock/gone is gone, but DaemonSet nvmock/pool-j, which installs here too, selects node node-7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, name, nodeName, cl := releaseNS, "gone", node, c
			if tc.ns != "" {
				ns = tc.ns
			}
			if tc.node != "" {
				nodeName = tc.node
			}
			if tc.client != nil {
				cl, name = tc.client, "unreachable"
			}
			if tc.ds != nil {
				name = tc.ds.Name
				if tc.deleting {
					tc.ds.Finalizers = []string{"nvmock.io/test-hold"}
				}
				if _, err := admin.DaemonSets(ns).Create(ctx(t), tc.ds, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				if tc.deleting {
					if err := admin.DaemonSets(ns).Delete(ctx(t), name, metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.next != nil {
				if _, err := admin.DaemonSets(ns).Create(ctx(t), tc.next, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				defer admin.DaemonSets(ns).Delete(ctx(t), tc.next.Name, metav1.DeleteOptions{})
			}
			leave, reason, next, err := cl.Leaving(ctx(t), ns, name, nodeName, tc.here)
			if (tc.next != nil && !tc.leave) != (next != "") || next != "" && next != ns+"/"+tc.next.Name {
				t.Errorf("next %q, want the successor %v", next, tc.next != nil && !tc.leave)
			}
			if leave != tc.leave {
				t.Errorf("leave %v, want %v (reason %q, err %v)", leave, tc.leave, reason, err)
			}
			got := reason
			if tc.isErr != nil {
				if err == nil || !tc.isErr(err) {
					t.Fatalf("error %v, reason %q; want the error", err, reason)
				}
				got = err.Error()
			} else if err != nil {
				t.Fatalf("error %v", err)
			}
			if !strings.Contains(got, tc.reason) || strings.Contains(got, "\n") {
				t.Errorf("got %q, want one line containing %q", got, tc.reason)
			}
		})
	}
}
