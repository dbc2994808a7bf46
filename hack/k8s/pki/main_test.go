package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlagsWriteTheClusterPKI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	var stderr bytes.Buffer
	if rc := run([]string{"-dir", dir, "-node", "n1", "-node-ip", "192.0.2.2"}, &stderr); rc != 0 {
		t.Fatalf("exit %d: %s", rc, stderr.String())
	}
	for _, f := range []string{"ca.crt", "apiserver.key", "kubelet-serving.crt", "admin.kubeconfig", "apiserver-kubelet-client.crt", "sa.pub"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	kc, _ := os.ReadFile(filepath.Join(dir, "admin.kubeconfig"))
	if !bytes.Contains(kc, []byte("server: https://127.0.0.1:6443\n")) {
		t.Errorf("admin.kubeconfig does not point at the default server:\n%s", kc)
	}
}

func TestBadFlagsAreAllReportedAtOnce(t *testing.T) {
	var stderr bytes.Buffer
	if rc := run([]string{"-node-ip", "nope", "-service-ip", "10.96.0"}, &stderr); rc != 2 {
		t.Errorf("exit %d, want 2", rc)
	}
	for _, want := range []string{"-dir and -node are required", `-node-ip "nope"`, `-service-ip "10.96.0"`} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}
