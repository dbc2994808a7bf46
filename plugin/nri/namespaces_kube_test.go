//go:build integration

package nri

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/kubetest"
	"github.com/nvmock/nvmock/plugin/inject"
)

// TestNamespaceWatchWithARealAPIServer runs the plugin's namespace watch
// against a real kube-apiserver (internal/kubetest), as the chart's pod:
// in-cluster credentials, the chart's RBAC (list and watch namespaces).
func TestNamespaceWatchWithARealAPIServer(t *testing.T) {
	s := kubetest.Start(t)
	sa := s.ChartRBAC(t, "nvmock", "nvmock")
	admin := s.Core(t)
	kube := func(t *testing.T, namespace, serviceAccount string) *hostprep.KubeClient {
		c, err := hostprep.NewKubeClient(s.PodConfig(t, namespace, serviceAccount))
		must(t, err)
		return c
	}

	for _, label := range []string{"", "team.example.com/gpu=yes"} {
		t.Run("a namespace labelled is injected, and no longer once the label goes; label "+label, func(t *testing.T) {
			key, value := inject.InjectLabel, inject.InjectEnabled
			if label != "" {
				key, value, _ = strings.Cut(label, "=")
			}
			prefix := fmt.Sprintf("l%d-", len(label))
			ml := createNamespace(t, admin, prefix+"ml", map[string]string{key: value})
			createNamespace(t, admin, prefix+"other-value", map[string]string{key: value + "-not"})
			ci := createNamespace(t, admin, prefix+"ci", nil)

			// Only the watch can bring a change in time: a failure would
			// wait an hour.
			p, _ := watching(t, kube(t, "nvmock", sa), label, time.Hour)
			injected := func(ns string, want bool) {
				t.Helper()
				deadline := time.Now().Add(wait)
				for {
					got := p.adjust(&api.PodSandbox{Name: "p", Namespace: ns}, &api.Container{Id: ns, Name: "c"}) != nil
					p.release(ns)
					if got == want {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("namespace %s: injected %v after %v, want %v (opted in: %v)", ns, got, wait, want, *p.optedIn.Load())
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			injected(ml, true) // from the list
			injected(ci, false)
			injected(prefix+"other-value", false)
			labelNamespace(t, admin, ci, key, &value)
			injected(ci, true) // from the watch
			labelNamespace(t, admin, ml, key, nil)
			injected(ml, false)
			injected(ci, true)
		})
	}

	t.Run("a watch that expired (410 Gone) lists again at once", func(t *testing.T) {
		createNamespace(t, admin, "before", map[string]string{inject.InjectLabel: inject.InjectEnabled})
		// While the API server restarts, watch requests fail (refused
		// connections, then 403 until its RBAC cache fills): retried every
		// second or two here.
		p, hook := watching(t, kube(t, "nvmock", sa), "", 2*time.Second)
		waitOptedIn(t, p, "before")

		// The restarted API server's watch cache starts at etcd's revision
		// then, later than the plugin's last resourceVersion (the write here
		// makes sure of it): the RetryWatcher's next watch is answered 410,
		// an ERROR event in the watch's stream.
		_, err := admin.ConfigMaps("default").Create(context.Background(),
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "rv-"}}, metav1.CreateOptions{})
		must(t, err)
		s.Restart(t)
		createNamespace(t, admin, "after", map[string]string{inject.InjectLabel: inject.InjectEnabled})
		waitOptedIn(t, p, "after")

		var expired, relisted time.Time
		for _, e := range hook.AllEntries() {
			switch {
			case e.Message == "listing the opted-in namespaces again" && strings.Contains(fmt.Sprint(e.Data[logrus.ErrorKey]), "too old resource version"):
				expired = e.Time
			case e.Message == "listed the opted-in namespaces" && !expired.IsZero() && relisted.IsZero():
				relisted = e.Time
			}
		}
		if expired.IsZero() || relisted.IsZero() {
			t.Fatalf("no 410 followed by a list in the log:\n%s", entries(hook))
		}
		if d := relisted.Sub(expired); d > 500*time.Millisecond {
			t.Errorf("listed %v after the 410, want at once", d)
		}
		t.Logf("listed again %v after the 410", relisted.Sub(expired).Round(time.Millisecond))
	})

	t.Run("refused credentials are counted and logged, and nothing is opted in", func(t *testing.T) {
		createNamespace(t, admin, "refused", map[string]string{inject.InjectLabel: inject.InjectEnabled})
		p, hook := watching(t, kube(t, "elsewhere", "no-rights"), "", time.Hour)
		deadline := time.Now().Add(wait)
		for !strings.Contains(scrape(t, p), `nvmock_nri_errors_total{reason="namespaces"} 1`) {
			if time.Now().After(deadline) {
				t.Fatalf("errors_total:\n%s", grep(scrape(t, p), "errors_total"))
			}
			time.Sleep(20 * time.Millisecond)
		}
		var warned bool
		for _, e := range hook.AllEntries() {
			// The first retry after a second; then 2, 4, ... up to NamespaceRefresh.
			warned = warned || e.Level == logrus.WarnLevel && e.Message == "keeping the last list of opted-in namespaces" &&
				strings.Contains(fmt.Sprint(e.Data[logrus.ErrorKey]), "forbidden") && e.Data["retry_in"] == time.Second
		}
		if !warned {
			t.Errorf("no warning naming the refusal:\n%s", entries(hook))
		}
		if p.adjust(&api.PodSandbox{Name: "p", Namespace: "refused"}, &api.Container{Id: "x", Name: "c"}) != nil {
			t.Error("a namespace was injected without a list")
		}
	})
}

// watching runs the namespace watch of a plugin (with label, "" for the
// default, and NamespaceRefresh refresh) until the test ends; the log goes
// to the test and to the hook.
func watching(t *testing.T, kube *hostprep.KubeClient, label string, refresh time.Duration) (*Plugin, *logtest.Hook) {
	t.Helper()
	p := fakePlugin(t, 2, inject.Config{})
	l := logrus.New()
	l.SetOutput(tWriter{t})
	l.SetLevel(logrus.DebugLevel)
	hook := logtest.NewLocal(l)
	p.log = logrus.NewEntry(l)
	p.opt.Kube, p.opt.NamespaceRefresh = kube, refresh
	if label != "" {
		p.opt.NamespaceLabel = label
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.watchNamespaces(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(wait):
			t.Errorf("the namespace watch did not stop within %v", wait)
		}
	})
	return p, hook
}

func waitOptedIn(t *testing.T, p *Plugin, ns string) {
	t.Helper()
	deadline := time.Now().Add(2 * wait) // the API server may still be starting
	for {
		if set := p.optedIn.Load(); set != nil && (*set)[ns] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespace %s not opted in after %v", ns, 2*wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func createNamespace(t *testing.T, c corev1client.CoreV1Interface, name string, labels map[string]string) string {
	t.Helper()
	_, err := c.Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	must(t, err)
	return name
}

// labelNamespace sets key to value, or removes it (nil), as kubectl label does.
func labelNamespace(t *testing.T, c corev1client.CoreV1Interface, name, key string, value *string) {
	t.Helper()
	v := "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, v)
	_, err := c.Namespaces().Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err)
}

func entries(h *logtest.Hook) string {
	var b strings.Builder
	for _, e := range h.AllEntries() {
		fmt.Fprintf(&b, "%s %s %s %v\n", e.Time.Format("15:04:05.000"), e.Level, e.Message, e.Data)
	}
	return b.String()
}
