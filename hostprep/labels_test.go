package hostprep_test

import (
	"os"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/hostprep"
)

func TestOutsideAClusterThereIsNoClient(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, ok, err := hostprep.InClusterClient(); ok || err != nil {
		t.Errorf("ok %v, err %v outside a cluster", ok, err)
	}
}

// In a pod without its service account token (automountServiceAccountToken:
// false), the client is an error naming the file.
func TestInAPodWithoutATokenTheErrorNamesTheFile(t *testing.T) {
	const token = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	if _, err := os.Stat(token); err == nil {
		t.Skipf("%s exists: this runs in a pod", token)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "192.0.2.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	_, ok, err := hostprep.InClusterClient()
	if !ok || err == nil || !strings.Contains(err.Error(), "in-cluster credentials") || !strings.Contains(err.Error(), token) {
		t.Errorf("ok %v, err %v; want ok and an error naming %s", ok, err, token)
	}
}
