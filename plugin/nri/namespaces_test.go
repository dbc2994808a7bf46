package nri

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/plugin/inject"
)

// TestNamespacesAreWatchedNotPolled lists the opted-in namespaces, then
// follows a namespace being labelled and another losing its label as the
// watch reports them, without waiting for a refresh.
func TestNamespacesAreWatchedNotPolled(t *testing.T) {
	for _, label := range []string{"", "team.example.com/gpu=yes"} {
		t.Run("label "+label, func(t *testing.T) { watchedNotPolled(t, label) })
	}
}

func watchedNotPolled(t *testing.T, label string) {
	want := label
	if want == "" {
		want = "nvmock.io/inject=enabled"
	}
	events := make(chan string)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("labelSelector") != want {
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
	if label != "" {
		p.opt.NamespaceLabel = label
	}
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

func TestNamespaceLabelMustBeKeyEqualsValue(t *testing.T) {
	for _, tc := range []struct{ label, err string }{
		{"nvmock.io/inject=enabled", ""},
		{"gpu=", ""},
		{"example.com/team-a.gpu=on_1", ""},
		{"nvmock.io/inject", "want KEY=VALUE"},
		{"=enabled", "is not a label name"},
		{"Bad_Prefix!/x=y", "not a DNS subdomain"},
		{"a=b c", "is not a label value"},
		{"-a=b", "is not a label name"},
	} {
		err := ValidateNamespaceLabel(tc.label)
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: error %v, want one saying %q", tc.label, err, tc.err)
		}
	}
	if _, err := New(Options{NamespaceLabel: "no-equals", OverlayRoot: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "want KEY=VALUE") {
		t.Errorf("New with a bad label: %v", err)
	}
}
