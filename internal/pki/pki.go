package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Config is what the certificates name. ECDSA P-256 throughout: instant to
// generate, and every component takes it. Test-cluster grade: the CA key
// stays beside the certificates.
type Config struct {
	Dir       string
	Node      string // the node's name: the kubelet's identity and serving name
	NodeIP    net.IP // where the API server is advertised and the kubelet serves
	ServiceIP net.IP // the kubernetes Service's ClusterIP
	Server    string // the API server URL the kubeconfigs point at
}

// Client is one component's identity: its kubeconfig is <Name>.kubeconfig,
// or, without Kubeconfig, <Name>.crt and <Name>.key.
type Client struct {
	Name       string
	CN         string
	O          []string
	Kubeconfig bool
}

// Clients are the identities Write makes for a cluster whose node is node.
func Clients(node string) []Client {
	return []Client{
		{"admin", "kubernetes-admin", []string{"system:masters"}, true},
		{"controller-manager", "system:kube-controller-manager", nil, true},
		{"scheduler", "system:kube-scheduler", nil, true},
		{"kube-proxy", "system:kube-proxy", nil, true},
		{"kubelet", "system:node:" + node, []string{"system:nodes"}, true},
		// The API server's identity towards the kubelet (logs, exec).
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, false},
	}
}

// Write creates everything in c.Dir: ca.crt and ca.key, apiserver.crt and
// .key (for 127.0.0.1, the node IP, the service IP and the kubernetes
// Service's names), kubelet-serving.crt and .key, a kubeconfig or a pair per
// client of Clients, and sa.key and sa.pub.
func Write(c Config, now time.Time) error {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return err
	}
	caKey, err := newKey()
	if err != nil {
		return err
	}
	caTmpl := template(pkix.Name{CommonName: "nvmock-k8s-ca"}, now, 10)
	caTmpl.IsCA, caTmpl.BasicConstraintsValid = true, true
	caTmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("create the CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writePair(c.Dir, "ca", caDER, caKey); err != nil {
		return err
	}
	sign := func(tmpl *x509.Certificate) ([]byte, *ecdsa.PrivateKey, error) {
		key, err := newKey()
		if err != nil {
			return nil, nil, err
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, fmt.Errorf("sign %s: %w", tmpl.Subject.CommonName, err)
		}
		return der, key, nil
	}

	servers := []struct {
		name string
		tmpl *x509.Certificate
	}{
		{"apiserver", serving("kube-apiserver", now,
			[]net.IP{net.IPv4(127, 0, 0, 1), c.NodeIP, c.ServiceIP},
			[]string{"localhost", c.Node, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})},
		{"kubelet-serving", serving(c.Node, now, []net.IP{net.IPv4(127, 0, 0, 1), c.NodeIP}, []string{"localhost", c.Node})},
	}
	for _, s := range servers {
		der, key, err := sign(s.tmpl)
		if err != nil {
			return err
		}
		if err := writePair(c.Dir, s.name, der, key); err != nil {
			return err
		}
	}

	for _, cl := range Clients(c.Node) {
		tmpl := template(pkix.Name{CommonName: cl.CN, Organization: cl.O}, now, 1)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		der, key, err := sign(tmpl)
		if err != nil {
			return err
		}
		if !cl.Kubeconfig {
			if err := writePair(c.Dir, cl.Name, der, key); err != nil {
				return err
			}
			continue
		}
		if err := writeKubeconfig(c, cl.Name, caDER, der, key); err != nil {
			return err
		}
	}

	saKey, err := newKey()
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(c.Dir, "sa.key"), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// template starts a certificate valid from an hour ago (clock skew) for years.
func template(subject pkix.Name, now time.Time, years int) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(years, 0, 0),
	}
}

func serving(cn string, now time.Time, ips []net.IP, names []string) *x509.Certificate {
	t := template(pkix.Name{CommonName: cn}, now, 1)
	t.KeyUsage = x509.KeyUsageDigitalSignature
	t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	t.IPAddresses, t.DNSNames = ips, names
	return t
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	b, err := keyPEM(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// writePair writes NAME.crt and NAME.key.
func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), certPEM(der), 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), key)
}

// writeKubeconfig writes NAME.kubeconfig with the CA and the client's
// certificate and key embedded, so that it can be copied elsewhere.
func writeKubeconfig(c Config, name string, caDER, der []byte, key *ecdsa.PrivateKey) error {
	k, err := keyPEM(key)
	if err != nil {
		return err
	}
	b64 := base64.StdEncoding.EncodeToString
	doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: nvmock-k8s
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: nvmock-k8s
  context:
    cluster: nvmock-k8s
    user: %s
current-context: nvmock-k8s
`, c.Server, b64(certPEM(caDER)), name, b64(certPEM(der)), b64(k), name)
	return os.WriteFile(filepath.Join(c.Dir, name+".kubeconfig"), []byte(doc), 0o600)
}
