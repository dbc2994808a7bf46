package gen

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func nvmlHeader(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", "github.com/NVIDIA/go-nvml").Output()
	if err != nil {
		t.Fatalf("download go-nvml: %v", err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go-nvml module dir: %v %s", err, out)
	}
	return filepath.Join(m.Dir, "pkg", "nvml", "nvml.h")
}

// TestGeneratedFilesAreUpToDate regenerates everything and diffs it against
// the checked-in files: run `make generate` when this fails.
func TestGeneratedFilesAreUpToDate(t *testing.T) {
	files, err := Generate(nvmlHeader(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join("..", name))
		if err != nil {
			t.Fatalf("read checked-in %s: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("libnvml/%s is stale; run make generate", name)
		}
	}
}

func TestHeaderDeclaresEveryFunctionOfGoNVML(t *testing.T) {
	src, err := os.ReadFile(nvmlHeader(t))
	if err != nil {
		t.Fatal(err)
	}
	funcs, err := ParseHeader(string(src))
	if err != nil {
		t.Fatal(err)
	}
	// go-nvml v0.13.4-1's nvml.h declares 428 functions.
	if len(funcs) != 428 {
		t.Errorf("parsed %d functions, want 428", len(funcs))
	}
	byName := map[string]Func{}
	for _, f := range funcs {
		byName[f.Name] = f
	}
	for _, name := range []string{"nvmlInit", "nvmlInit_v2", "nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v3", "nvmlErrorString"} {
		if _, ok := byName[name]; !ok {
			t.Errorf("%s missing: both versioned and unversioned names must be exported", name)
		}
	}
	if got := byName["nvmlErrorString"].Return; got != "const char*" {
		t.Errorf("nvmlErrorString returns %q", got)
	}
	if p := byName["nvmlDeviceGetMemoryInfo_v2"].Params; len(p) != 2 || p[0].Type != "nvmlDevice_t" || p[1].Type != "nvmlMemory_v2_t *" {
		t.Errorf("nvmlDeviceGetMemoryInfo_v2 params parsed as %+v", p)
	}
}

func TestParseHeaderReadsMultiLineAndDeprecatedDeclarations(t *testing.T) {
	src := `
/** doc */
DEPRECATED(13.0) nvmlReturn_t DECLDIR nvmlOld(nvmlDevice_t device,
        unsigned int *count);
#define X 1
nvmlReturn_t DECLDIR nvmlNone(void);
const DECLDIR char* nvmlErrorString(nvmlReturn_t result);
`
	funcs, err := ParseHeader(src)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Func{}
	for _, f := range funcs {
		got[f.Name] = f
	}
	if f := got["nvmlOld"]; len(f.Params) != 2 || f.Params[1].Type != "unsigned int *" || f.Params[1].Name != "count" {
		t.Errorf("nvmlOld parsed as %+v", f)
	}
	if f := got["nvmlNone"]; f.Return != "nvmlReturn_t" || len(f.Params) != 0 {
		t.Errorf("nvmlNone parsed as %+v", f)
	}
	if f := got["nvmlErrorString"]; f.Return != "const char*" {
		t.Errorf("nvmlErrorString parsed as %+v", f)
	}
}

func TestSchemaNeedsNoImplicitPadding(t *testing.T) {
	for _, r := range Schema {
		if _, _, err := Layout(r); err != nil {
			t.Error(err)
		}
	}
	bad := Record{Name: "bad", Fields: []Field{{"a", U32, 0, ""}, {"b", U64, 0, ""}}}
	if _, _, err := Layout(bad); err == nil || !strings.Contains(err.Error(), "bad.b") {
		t.Errorf("misaligned field not reported: %v", err)
	}
}
