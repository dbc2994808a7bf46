package pki

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

func TestWriteMakesCertificatesTheClusterAccepts(t *testing.T) {
	c := Config{Dir: t.TempDir(), Node: "n1", NodeIP: net.ParseIP("192.0.2.2"), ServiceIP: net.ParseIP("10.96.0.1"), Server: "https://127.0.0.1:6443"}
	if err := Write(c, time.Now()); err != nil {
		t.Fatal(err)
	}
	ca := x509.NewCertPool()
	ca.AddCert(readCert(t, mustRead(t, c.Dir, "ca.crt")))

	servers := []struct {
		file  string
		names []string
	}{
		{"apiserver.crt", []string{"127.0.0.1", "192.0.2.2", "10.96.0.1", "localhost", "kubernetes.default.svc.cluster.local"}},
		{"kubelet-serving.crt", []string{"192.0.2.2", "n1"}},
	}
	for _, s := range servers {
		cert := readCert(t, mustRead(t, c.Dir, s.file))
		for _, name := range s.names {
			if _, err := cert.Verify(x509.VerifyOptions{Roots: ca, DNSName: name}); err != nil {
				t.Errorf("%s for %s: %v", s.file, name, err)
			}
		}
	}

	field := func(doc []byte, key string) []byte {
		m := regexp.MustCompile(key + `: (\S+)`).FindSubmatch(doc)
		if m == nil {
			t.Fatalf("no %s in %s", key, doc)
		}
		b, err := base64.StdEncoding.DecodeString(string(m[1]))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, cl := range Clients(c.Node) {
		var cert *x509.Certificate
		if cl.Kubeconfig {
			doc := mustRead(t, c.Dir, cl.Name+".kubeconfig")
			if string(field(doc, "certificate-authority-data")) != string(mustRead(t, c.Dir, "ca.crt")) {
				t.Errorf("%s: not the CA", cl.Name)
			}
			field(doc, "client-key-data")
			cert = readCert(t, field(doc, "client-certificate-data"))
		} else {
			cert = readCert(t, mustRead(t, c.Dir, cl.Name+".crt"))
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: ca, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: %v", cl.Name, err)
		}
		if cert.Subject.CommonName != cl.CN || len(cert.Subject.Organization) != len(cl.O) {
			t.Errorf("%s: subject %v, want CN=%s O=%v", cl.Name, cert.Subject, cl.CN, cl.O)
		}
	}

	key, _ := pem.Decode(mustRead(t, c.Dir, "sa.key"))
	pub, _ := pem.Decode(mustRead(t, c.Dir, "sa.pub"))
	if key == nil || pub == nil {
		t.Fatal("sa.key or sa.pub is not PEM")
	}
	if _, err := x509.ParseECPrivateKey(key.Bytes); err != nil {
		t.Error(err)
	}
	if _, err := x509.ParsePKIXPublicKey(pub.Bytes); err != nil {
		t.Error(err)
	}
}

func mustRead(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
