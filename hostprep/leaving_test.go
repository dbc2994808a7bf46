package hostprep_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/hostprep"
)

// TestUninstallAsksWhetherTheNodeLeavesThePool runs Leaving against a
// stand-in API server that holds one DaemonSet and one node.
func TestUninstallAsksWhetherTheNodeLeavesThePool(t *testing.T) {
	const (
		dsPath   = "/apis/apps/v1/namespaces/nvmock/daemonsets/nvmock-a100"
		nodePath = "/api/v1/nodes/node-7"
		node     = `{"metadata":{"name":"node-7","labels":{"nvmock.io/pool":"a100","kubernetes.io/arch":"amd64"}}}`
	)
	for _, c := range []struct {
		name    string
		status  int    // the DaemonSet's answer
		ds      string // its body
		leave   bool
		reason  string // contained in the reason, or in the error with wantErr
		wantErr bool
		paths   []string
	}{
		{"a deleted DaemonSet (404) uninstalls", http.StatusNotFound, `{"kind":"Status","code":404}`,
			true, "DaemonSet nvmock/nvmock-a100 is gone", false, []string{dsPath}},
		{"a DaemonSet being deleted uninstalls", http.StatusOK,
			`{"metadata":{"deletionTimestamp":"2025-01-01T00:00:00Z"},"spec":{"template":{"spec":{"nodeSelector":{"nvmock.io/pool":"a100"}}}}}`,
			true, "is being deleted", false, []string{dsPath}},
		{"a DaemonSet whose nodeSelector matches the node's labels keeps", http.StatusOK,
			`{"metadata":{},"spec":{"template":{"spec":{"nodeSelector":{"nvmock.io/pool":"a100","kubernetes.io/arch":"amd64"}}}}}`,
			false, "DaemonSet nvmock/nvmock-a100 selects node node-7", false, []string{dsPath, nodePath}},
		{"a node that lacks a selector label uninstalls", http.StatusOK,
			`{"metadata":{},"spec":{"template":{"spec":{"nodeSelector":{"nvmock.io/pool":"t4"}}}}}`,
			true, "no longer selects node node-7: it wants nvmock.io/pool=t4", false, []string{dsPath, nodePath}},
		{"a DaemonSet with no nodeSelector keeps without reading the node", http.StatusOK,
			`{"metadata":{},"spec":{"template":{"spec":{}}}}`,
			false, "selects node node-7", false, []string{dsPath}},
		{"node affinity is not evaluated and counts as selecting", http.StatusOK,
			`{"metadata":{},"spec":{"template":{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{}}}}}}}`,
			false, "node affinity is not evaluated", false, []string{dsPath}},
		{"an API error uninstalls and names the error", http.StatusInternalServerError, `{"kind":"Status","message":"etcd is down"}`,
			true, "get DaemonSet nvmock/nvmock-a100: API server answered 500 Internal Server Error: {\"kind\":\"Status\",\"message\":\"etcd is down\"}", true, []string{dsPath}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var paths []string
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				paths = append(paths, r.URL.Path)
				if r.Method != http.MethodGet || r.Header.Get("Authorization") != "Bearer secret" {
					http.Error(w, "unexpected request "+r.Method+" "+r.URL.Path, http.StatusUnauthorized)
					return
				}
				switch r.URL.Path {
				case dsPath:
					w.WriteHeader(c.status)
					w.Write([]byte(c.ds))
				case nodePath:
					w.Write([]byte(node))
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			k := &hostprep.KubeClient{Server: srv.URL, Token: "secret", HTTP: srv.Client()}

			leave, reason, err := k.Leaving(context.Background(), "nvmock", "nvmock-a100", "node-7")
			if leave != c.leave {
				t.Errorf("leave %v, want %v (reason %q, err %v)", leave, c.leave, reason, err)
			}
			got := reason
			if c.wantErr {
				if err == nil {
					t.Fatalf("no error; reason %q", reason)
				}
				got = err.Error()
			} else if err != nil {
				t.Fatalf("error %v", err)
			}
			if !strings.Contains(got, c.reason) || strings.Contains(got, "\n") {
				t.Errorf("got %q, want one line containing %q", got, c.reason)
			}
			if !reflect.DeepEqual(paths, c.paths) {
				t.Errorf("requests %q, want %q", paths, c.paths)
			}
		})
	}
}

// A token the API server refuses is an error, so uninstall goes ahead.
func TestARefusedTokenIsAnError(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret" {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		w.Write([]byte(`{"metadata":{},"spec":{"template":{"spec":{}}}}`))
	}))
	defer srv.Close()
	k := &hostprep.KubeClient{Server: srv.URL, Token: "wrong", HTTP: srv.Client()}
	if leave, _, err := k.Leaving(context.Background(), "nvmock", "nvmock-a100", "node-7"); !leave || err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("leave %v, err %v; want leave with a 401 error", leave, err)
	}
}
