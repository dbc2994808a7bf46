package hostprep_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/validate/content"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

func checkLabel(t *testing.T, k, v string) {
	t.Helper()
	if errs := content.IsLabelKey(k); len(errs) > 0 {
		t.Errorf("label key %q: %v", k, errs)
	}
	if errs := content.IsLabelValue(v); len(errs) > 0 {
		t.Errorf("label %s=%q: %v", k, v, errs)
	}
}

// Every built-in board's labels are ones the API server accepts, and its
// product label is the one gpu-feature-discovery gives the real board
// (tools_test.go compares with GFD itself).
func TestBuiltinBoardsGiveValidLabelsAsGFDDoes(t *testing.T) {
	for _, name := range profile.Builtins() {
		p := testenv.Profile(t, name, 0)
		l := hostprep.Labels(p)
		for k, v := range l {
			checkLabel(t, k, v)
		}
		if got, want := l["nvidia.com/gpu.product"], strings.ReplaceAll(p.Board.ProductName, " ", "-"); got != want {
			t.Errorf("%s: product label %q, GFD gives %q", name, got, want)
		}
	}
}

// A name with characters a label cannot hold gets GFD's label, in the node
// labels and the NFD feature file alike; before, "(hot)" went into both and
// the API server refused the patch.
func TestAProductNameIsSanitisedAsGFDDoes(t *testing.T) {
	p, err := profile.Parse("hot.yaml", []byte("base: a100\nname: hot\nboard:\n  productName: \"NVIDIA A100 (hot) #2\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := hostprep.Labels(p)["nvidia.com/gpu.product"]; got != "NVIDIA-A100-hot-2" {
		t.Errorf("product label %q, want NVIDIA-A100-hot-2", got)
	}
	nfd := hostprep.NFDFeatures(p)
	if !strings.Contains(nfd, "\nnvidia.com/gpu.product=NVIDIA-A100-hot-2\n") {
		t.Errorf("NFD file lacks the sanitised product:\n%s", nfd)
	}
}

// NFD's local source reads the feature file as key=value lines (a line
// starting with # is a comment or directive); each must be one valid label.
func TestTheNFDFeatureFileIsOneValidLabelALine(t *testing.T) {
	for _, name := range profile.Builtins() {
		p := testenv.Profile(t, name, 0)
		nfd := hostprep.NFDFeatures(p)
		if !strings.HasSuffix(nfd, "\n") {
			t.Errorf("%s: NFD file does not end in a newline", name)
		}
		lines := strings.Split(strings.TrimSuffix(nfd, "\n"), "\n")
		if len(lines) != len(hostprep.Labels(p)) {
			t.Errorf("%s: %d lines for %d labels:\n%s", name, len(lines), len(hostprep.Labels(p)), nfd)
		}
		for _, l := range lines {
			k, v, ok := strings.Cut(l, "=")
			if !ok || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "-") {
				t.Errorf("%s: line %q is not key=value", name, l)
				continue
			}
			checkLabel(t, k, v)
		}
	}
}

// A product name Kubernetes cannot take as a label is refused by profile
// validation, before install writes anything; before, the init container
// failed on the label PATCH in a loop with the overlay already in place.
func TestAProductNameKubernetesCannotLabelStopsInstallBeforeAnything(t *testing.T) {
	bad := "NVIDIA A100 -" // its label would end in a dash
	p := testenv.Profile(t, "a100", 2)
	p.Board.ProductName = bad
	d := t.TempDir()
	_, err := hostprep.Install(hostprep.InstallOptions{
		Render: hostprep.Options{Profile: p, NodeName: "n", Assets: testenv.FakeDriverAssets(t)},
		Root:   filepath.Join(d, "root"), CDIDir: filepath.Join(d, "cdi"), NFDDir: filepath.Join(d, "nfd"), ProcRoot: filepath.Join(d, "proc"),
	})
	want := `profile a100: board.productName: "` + bad + `" makes the node label nvidia.com/gpu.product="NVIDIA-A100--", which Kubernetes refuses (it must start and end with a letter or digit); begin and end the name with one`
	if err == nil || err.Error() != want {
		t.Fatalf("install: %v\nwant: %s", err, want)
	}
	if ents, _ := os.ReadDir(d); len(ents) != 0 {
		t.Errorf("install left %d entries in %s", len(ents), d)
	}
}
