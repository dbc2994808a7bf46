package nri

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/plugin/inject"
)

// apiServer answers namespace lists with ml opted in once up is set, 503
// before; watches stay open until the client leaves.
func apiServer(t *testing.T, up *atomic.Bool) *hostprep.KubeClient {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != "/api/v1/namespaces":
			http.NotFound(w, r)
		case !up.Load():
			http.Error(w, "starting", http.StatusServiceUnavailable)
		case r.URL.Query().Get("watch") != "":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"kind":"NamespaceList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"ml","labels":{"nvmock.io/inject":"enabled"}}}]}`))
		}
	}))
	t.Cleanup(srv.Close)
	c, err := hostprep.NewKubeClient(&rest.Config{Host: srv.URL})
	must(t, err)
	return c
}

// A plugin registered before the namespaces are listed would leave the
// pods of opted-in namespaces untouched, silently.
func TestRegistrationWaitsForTheFirstNamespaceList(t *testing.T) {
	root := installOverlay(t)
	sock := socketPath(t)
	r := startRuntime(t, sock)
	defer r.Stop()
	var up atomic.Bool
	p := startPlugin(t, Options{Socket: sock, OverlayRoot: root, Kube: apiServer(t, &up), FirstListWait: time.Hour})

	select {
	case <-p.syncedC:
		t.Fatal("registered before the namespaces were listed")
	case <-time.After(1500 * time.Millisecond): // the first list and a retry fail
	}
	if err := p.Ready(); err == nil {
		t.Error("ready before registration")
	}
	up.Store(true)
	registered(t, p, r)
	if err := p.Ready(); err != nil {
		t.Errorf("not ready after the list: %v", err)
	}
	pd := pod("ml", "p", nil)
	if a := create(t, r, pd, ctr(pd, "c1")); untouched(a) {
		t.Error("the first container of an opted-in namespace was left untouched")
	}
}

func TestRegistrationGoesAheadWithoutAnAPIServerButIsNotReady(t *testing.T) {
	root := installOverlay(t)
	sock := socketPath(t)
	r := startRuntime(t, sock)
	defer r.Stop()
	var up atomic.Bool
	p := startPlugin(t, Options{Socket: sock, OverlayRoot: root, Kube: apiServer(t, &up),
		FirstListWait: 100 * time.Millisecond, NamespaceRefresh: 100 * time.Millisecond,
		Inject: inject.Config{Namespaces: []string{"static"}}})
	registered(t, p, r)
	if err := p.Ready(); err == nil || !strings.Contains(err.Error(), "namespaces are not listed") {
		t.Errorf("Ready = %v, want the namespaces not listed", err)
	}
	pd := pod("static", "p", nil)
	if a := create(t, r, pd, ctr(pd, "c1")); untouched(a) {
		t.Error("a configured namespace was left untouched")
	}
	up.Store(true)
	deadline := time.Now().Add(wait)
	for p.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready %v after the API server came: %v", wait, p.Ready())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
