package charts

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"

	"github.com/nvmock/nvmock/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const (
	chartDir    = "nvmock"
	releaseName = "nvmock"
	releaseNS   = "nvmock"
)

// render renders the chart as `helm install nvmock charts/nvmock -n nvmock`
// would with these values (YAML), schema validation included.
func render(t *testing.T, values string) (map[string]string, error) {
	t.Helper()
	return renderWith(t, values, false)
}

func renderWith(t *testing.T, values string, skipSchema bool) (map[string]string, error) {
	t.Helper()
	return renderRelease(t, releaseName, values, skipSchema)
}

// renderRelease is renderWith for a release of another name.
func renderRelease(t *testing.T, release, values string, skipSchema bool) (map[string]string, error) {
	t.Helper()
	return renderIn(t, release, releaseNS, values, skipSchema)
}

func renderIn(t *testing.T, release, namespace, values string, skipSchema bool) (map[string]string, error) {
	t.Helper()
	c := loadChart(t)
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatalf("test values are not YAML: %v", err)
	}
	opts := chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}
	rv, err := chartutil.ToRenderValuesWithSchemaValidation(c, vals, opts, chartutil.DefaultCapabilities, skipSchema)
	if err != nil {
		return nil, err
	}
	return engine.Render(c, rv)
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return c
}

// manifest joins the rendered files in name order, as the golden files hold them.
func manifest(files map[string]string) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		body := strings.TrimSpace(files[n])
		if body == "" {
			continue
		}
		fmt.Fprintf(&b, "# Source: %s\n%s\n", n, body)
	}
	return b.String()
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// objects are the rendered objects, decoded strictly.
type objects struct {
	daemonSets   []appsv1.DaemonSet
	configMaps   []corev1.ConfigMap
	accounts     []corev1.ServiceAccount
	roles        []rbacv1.ClusterRole
	roleBindings []rbacv1.ClusterRoleBinding
	nsRoles      []rbacv1.Role
	nsBindings   []rbacv1.RoleBinding
	jobs         []batchv1.Job
	services     []corev1.Service
	policies     []networkingv1.NetworkPolicy
	// hooks are the pre-delete hook's objects (templates/predelete.yaml).
	hooks *objects
}

// decode decodes every object of every rendered manifest into its k8s.io/api
// type; an unknown field, a duplicate key or an unexpected kind is an error.
func decode(t *testing.T, files map[string]string) objects {
	t.Helper()
	o := objects{hooks: &objects{}}
	for name, body := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		dst := &o
		if strings.HasSuffix(name, "/predelete.yaml") {
			dst = o.hooks
		}
		for i, doc := range docSep.Split(body, -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var meta struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s doc %d: %v", name, i, err)
			}
			var into any
			switch meta.APIVersion + " " + meta.Kind {
			case "apps/v1 DaemonSet":
				into = addNew(&dst.daemonSets)
			case "v1 ConfigMap":
				into = addNew(&dst.configMaps)
			case "v1 ServiceAccount":
				into = addNew(&dst.accounts)
			case "rbac.authorization.k8s.io/v1 ClusterRole":
				into = addNew(&dst.roles)
			case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
				into = addNew(&dst.roleBindings)
			case "rbac.authorization.k8s.io/v1 Role":
				into = addNew(&dst.nsRoles)
			case "rbac.authorization.k8s.io/v1 RoleBinding":
				into = addNew(&dst.nsBindings)
			case "batch/v1 Job":
				into = addNew(&dst.jobs)
			case "v1 Service":
				into = addNew(&dst.services)
			case "networking.k8s.io/v1 NetworkPolicy":
				into = addNew(&dst.policies)
			default:
				t.Fatalf("%s doc %d: unexpected object %s %s", name, i, meta.APIVersion, meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
				t.Fatalf("%s doc %d (%s): strict decode: %v", name, i, meta.Kind, err)
			}
		}
	}
	sort.Slice(o.daemonSets, func(i, j int) bool { return o.daemonSets[i].Name < o.daemonSets[j].Name })
	sort.Slice(o.configMaps, func(i, j int) bool { return o.configMaps[i].Name < o.configMaps[j].Name })
	return o
}

func stripComments(doc string) string {
	var keep []string
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// golden compares got with testdata/NAME.golden byte for byte, or rewrites
// it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./charts -update to create it)", err)
	}
	if !bytes.Equal(want, []byte(got)) {
		t.Errorf("rendered chart differs from %s (go test ./charts -update rewrites it after a deliberate change):\n%s", path, testenv.FirstDiff(string(want), got))
	}
}

// addNew appends a zero object to a list and returns it to decode into.
func addNew[T any](list *[]T) *T {
	*list = append(*list, *new(T))
	return &(*list)[len(*list)-1]
}
