package hostprep_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/libnvml/profile"
)

// TestLabelsReachTheNodeThroughTheAPIServer runs the client against a stand-in
// API server and checks the PATCH Kubernetes expects.
func TestLabelsReachTheNodeThroughTheAPIServer(t *testing.T) {
	p, err := profile.Builtin("h100")
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]*string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPatch || r.URL.Path != "/api/v1/nodes/node-7" ||
			r.Header.Get("Content-Type") != "application/strategic-merge-patch+json" ||
			r.Header.Get("Authorization") != "Bearer secret" {
			http.Error(w, "unexpected request "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var patch struct {
			Metadata struct {
				Labels map[string]*string `json:"labels"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(body, &patch); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got = append(got, patch.Metadata.Labels)
		w.Write([]byte("{}"))
	}))
	defer srv.Close()
	c := &hostprep.KubeClient{Server: srv.URL, Token: "secret", HTTP: srv.Client()}

	if err := c.ApplyLabels(context.Background(), "node-7", p, false); err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyLabels(context.Background(), "node-7", p, true); err != nil {
		t.Fatal(err)
	}
	want := hostprep.Labels(p)
	if len(got) != 2 || len(got[0]) != len(want) {
		t.Fatalf("patches: %v", got)
	}
	for k, v := range want {
		if got[0][k] == nil || *got[0][k] != v {
			t.Errorf("set %s = %v, want %q", k, got[0][k], v)
		}
		if v, ok := got[1][k]; !ok || v != nil {
			t.Errorf("remove %s: sent %v, want null", k, v)
		}
	}
	if want["nvidia.com/gpu.product"] != "NVIDIA-H100-80GB-HBM3" || want["nvidia.com/gpu.count"] != "8" {
		t.Errorf("labels: %v", want)
	}

	// A refusal comes back as one line naming the node and the answer.
	c.Token = "wrong"
	if err := c.ApplyLabels(context.Background(), "node-7", p, false); err == nil {
		t.Error("a refused PATCH was not reported")
	}
}

func TestOutsideAClusterThereIsNoClient(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, ok, err := hostprep.InClusterClient(); ok || err != nil {
		t.Errorf("ok %v, err %v outside a cluster", ok, err)
	}
}
