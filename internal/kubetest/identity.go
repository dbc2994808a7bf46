package kubetest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	rbacv1client "k8s.io/client-go/kubernetes/typed/rbac/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/nvmock/nvmock/internal/testenv"
)

// Core is the admin's core/v1 client.
func (s *Server) Core(t testing.TB) corev1client.CoreV1Interface {
	t.Helper()
	c, err := corev1client.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// InClusterConfig is what rest.InClusterConfig returns in a pod whose
// service account token is tokenFile: the server, the CA file, the token
// read now, and the file, which the client re-reads (at most a minute old)
// as the kubelet rotates it.
func (s *Server) InClusterConfig(t testing.TB, tokenFile string) *rest.Config {
	t.Helper()
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	return &rest.Config{
		Host:            s.URL,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile},
		BearerToken:     string(tok),
		BearerTokenFile: tokenFile,
	}
}

// PodConfig is the in-cluster config of a pod running as ServiceAccount
// namespace/name: a fresh token in a file of its own.
func (s *Server) PodConfig(t testing.TB, namespace, name string) *rest.Config {
	t.Helper()
	tok, _ := s.Token(t, namespace, name)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	return s.InClusterConfig(t, file)
}

// Token returns a token of ServiceAccount namespace/name (both made if
// missing), bound to a Secret of its own: revoke deletes the Secret, and the
// API server refuses the token from then on (after its 10 s cache of good
// tokens).
func (s *Server) Token(t testing.TB, namespace, name string) (token string, revoke func()) {
	t.Helper()
	core := s.Core(t)
	s.ensureNamespace(t, namespace)
	_, err := core.ServiceAccounts(namespace).Create(ctx(t), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sec, err := core.Secrets(namespace).Create(ctx(t), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-token-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hour := int64(3600)
	tr, err := core.ServiceAccounts(namespace).CreateToken(ctx(t), name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		ExpirationSeconds: &hour,
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: sec.Name, UID: sec.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token, func() {
		t.Helper()
		if err := core.Secrets(namespace).Delete(ctx(t), sec.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func (s *Server) ensureNamespace(t testing.TB, name string) {
	t.Helper()
	_, err := s.Core(t).Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// ChartRBAC creates what `helm install RELEASE charts/nvmock -n NAMESPACE`
// creates for the pods' identity (templates/serviceaccount.yaml and
// rbac.yaml, rendered with the Helm SDK and the chart's default values) and
// returns the ServiceAccount's name: tests that run as it check that the
// chart grants what the code asks for, and no more than the chart says.
func (s *Server) ChartRBAC(t testing.TB, release, namespace string) (serviceAccount string) {
	t.Helper()
	ch, err := loader.Load(filepath.Join(testenv.Root(), "charts", "nvmock"))
	if err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, map[string]any{},
		chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatal(err)
	}
	s.ensureNamespace(t, namespace)
	rbac, err := rbacv1client.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	core := s.Core(t)
	for _, name := range []string{"serviceaccount.yaml", "rbac.yaml"} {
		src, ok := files["nvmock/templates/"+name]
		if !ok {
			t.Fatalf("the chart has no templates/%s", name)
		}
		for _, doc := range bytes.Split([]byte(src), []byte("\n---")) {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var err error
			switch meta.Kind {
			case "":
				continue // comments only
			case "ServiceAccount":
				var o corev1.ServiceAccount
				decode(t, doc, &o)
				_, err = core.ServiceAccounts(namespace).Create(ctx(t), &o, metav1.CreateOptions{})
				serviceAccount = o.Name
			case "ClusterRole":
				var o rbacv1.ClusterRole
				decode(t, doc, &o)
				_, err = rbac.ClusterRoles().Create(ctx(t), &o, metav1.CreateOptions{})
			case "ClusterRoleBinding":
				var o rbacv1.ClusterRoleBinding
				decode(t, doc, &o)
				_, err = rbac.ClusterRoleBindings().Create(ctx(t), &o, metav1.CreateOptions{})
			case "Role":
				var o rbacv1.Role
				decode(t, doc, &o)
				_, err = rbac.Roles(namespace).Create(ctx(t), &o, metav1.CreateOptions{})
			case "RoleBinding":
				var o rbacv1.RoleBinding
				decode(t, doc, &o)
				_, err = rbac.RoleBindings(namespace).Create(ctx(t), &o, metav1.CreateOptions{})
			default:
				t.Fatalf("%s: a %s; teach kubetest.ChartRBAC to create it", name, meta.Kind)
			}
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("%s: create %s: %v", name, meta.Kind, err)
			}
		}
	}
	if serviceAccount == "" {
		t.Fatal("the chart made no ServiceAccount")
	}
	return serviceAccount
}

func decode(t testing.TB, doc []byte, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		t.Fatalf("%v in:\n%s", err, strings.TrimSpace(string(doc)))
	}
}
