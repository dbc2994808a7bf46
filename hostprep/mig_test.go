package hostprep_test

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
)

// A layout given at install is the node's MIG state: the real nvidia-smi
// lists its MIG devices, the same install again leaves the state alone,
// another layout starts over from it, and a process that sees the state
// read-only (a container) may not change it.
func TestTheMIGLayoutOfAnInstallIsWhatNvidiaSMISees(t *testing.T) {
	needRoot(t)
	assets := realAssets(t)
	s := newSite(t)
	o := s.options(testenv.Profile(t, "a100", 2), assets)
	o.Render.MIG = "0=all-balanced;1=7g.40gb"
	res := install(t, o)
	smi := filepath.Join(res.Driver, "usr", "bin", "nvidia-smi")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(smi, args...)
		cmd.Env = cleanEnv("NVMOCK_DEV_ROOT=" + filepath.Join(res.Driver, "dev"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("-L")
	migs := regexp.MustCompile(`(?m)^  MIG (\S+)\s+Device\s+(\d+):`).FindAllStringSubmatch(out, -1)
	var got []string
	for _, m := range migs {
		got = append(got, m[1])
	}
	want := "3g.20gb 2g.10gb 1g.5gb 1g.5gb 7g.40gb"
	if err != nil || strings.Join(got, " ") != want {
		t.Fatalf("nvidia-smi -L (%v): MIG devices %v, want %s:\n%s", err, got, want, out)
	}

	if out, err := run("mig", "-i", "1", "-dci"); err != nil {
		t.Fatalf("-dci: %v\n%s", err, out)
	}
	if out, _ := run("-L"); strings.Contains(out, "7g.40gb") {
		t.Fatalf("the 7g's compute instance survived -dci:\n%s", out)
	}
	if r := install(t, o); !r.Unchanged {
		t.Error("the same install again changed the node")
	}
	if out, _ := run("-L"); strings.Contains(out, "7g.40gb") {
		t.Errorf("the same install again reset the MIG state:\n%s", out)
	}
	o.Render.MIG = "all-3g.20gb"
	res = install(t, o)
	if out, _ := run("-L"); strings.Count(out, "MIG 3g.20gb") != 4 {
		t.Errorf("a new layout is not what the node has:\n%s", out)
	}

	// The overlay's view of the state read-only, as a container has it.
	readOnly(t, filepath.Join(res.Overlay, "driver", "etc", "nvmock"))
	out, err = run("mig", "-dci")
	if err == nil || !strings.Contains(out, "Insufficient Permissions") {
		t.Errorf("-dci on a read-only state: %v, want Insufficient Permissions:\n%s", err, out)
	}
}
