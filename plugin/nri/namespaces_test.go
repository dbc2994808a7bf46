package nri

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/plugin/inject"
)

// TestNamespacesAreWatchedNotPolled lists the opted-in namespaces, then
// follows a namespace being labelled and another losing its label as the
// watch reports them, without waiting for a refresh.
func TestNamespacesAreWatchedNotPolled(t *testing.T) {
	events := make(chan string)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("labelSelector") != "nvmock.io/inject=enabled" {
			http.Error(w, "bad selector", http.StatusBadRequest)
			return
		}
		if q.Get("watch") != "1" {
			fmt.Fprint(w, `{"kind":"NamespaceList","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"ml"}}]}`)
			return
		}
		if q.Get("resourceVersion") != "5" {
			http.Error(w, "watch not from the list's version", http.StatusBadRequest)
			return
		}
		w.(http.Flusher).Flush()
		for {
			select {
			case ev := <-events:
				fmt.Fprintln(w, ev)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	}))
	defer srv.Close()

	p := fakePlugin(t, 2, inject.Config{})
	p.opt.Kube = &hostprep.KubeClient{Server: srv.URL, Token: "tok", HTTP: srv.Client()}
	p.opt.NamespaceRefresh = time.Hour // only the watch can make changes in time
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.watchNamespaces(ctx)

	waitFor := func(want map[string]bool) {
		t.Helper()
		deadline := time.Now().Add(wait)
		for time.Now().Before(deadline) {
			if cur := p.optedIn.Load(); cur != nil && reflect.DeepEqual(*cur, want) {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("opted-in namespaces %v, want %v", p.optedIn.Load(), want)
	}
	waitFor(map[string]bool{"ml": true})
	events <- `{"type":"ADDED","object":{"metadata":{"name":"ci"}}}`
	waitFor(map[string]bool{"ml": true, "ci": true})
	events <- `{"type":"DELETED","object":{"metadata":{"name":"ml"}}}`
	waitFor(map[string]bool{"ci": true})
}
