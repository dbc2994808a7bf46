//go:build integration

package kubetest

import (
	"net/url"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// TestAServerStartsRestartsAndIsGoneAfterwards: the API server answers the
// admin, a ServiceAccount's in-cluster config and, after a restart, both
// again; when the test ends both processes are gone within seconds.
func TestAServerStartsRestartsAndIsGoneAfterwards(t *testing.T) {
	var s *Server
	t.Run("serve", func(t *testing.T) {
		var stopping time.Time // cleanups run last first: this logs after the teardown
		t.Cleanup(func() { t.Logf("stopped and removed in %v", time.Since(stopping).Round(time.Millisecond)) })
		start := time.Now()
		s = Start(t)
		t.Logf("ready in %v", time.Since(start).Round(time.Millisecond))
		u, err := url.Parse(s.URL)
		if err != nil || slices.Contains([]string{"6443", "2379", "2380"}, u.Port()) {
			t.Errorf("URL %s: want a free port, not one of hack/k8s-node.sh's", s.URL)
		}
		if _, err := s.Core(t).Namespaces().Get(ctx(t), "default", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		sa := s.ChartRBAC(t, "nvmock", "nvmock")
		pod := s.PodConfig(t, "nvmock", sa)
		start = time.Now()
		s.Restart(t)
		t.Logf("restarted in %v", time.Since(start).Round(time.Millisecond))
		// The chart's identity may list namespaces; its token outlives the restart.
		core, err := corev1client.NewForConfig(pod)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := core.Namespaces().List(ctx(t), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stopping = time.Now() })
	})
	if s == nil {
		return // skipped, or failed to start
	}
	for _, p := range []*proc{s.etcd, s.api} {
		if ours(p.cmd.Process.Pid, p.exe) {
			t.Errorf("%s (pid %d) still runs after the test", p.name, p.cmd.Process.Pid)
		}
	}
}
