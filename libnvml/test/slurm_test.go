//go:build integration

package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
)

// slurmd runs Debian bookworm's slurmd -G (print the GRES it detects) with
// gres.conf's AutoDetect=nvml on a node nvmock exec makes of profile, with
// extra exec flags; the node line comes from slurmd -C with gres appended.
// It returns the detected GRES lines, and stdout (script prints there).
func slurmd(t *testing.T, profile, gres, script string, flags ...string) (lines []string, stdout string) {
	t.Helper()
	dir := filepath.Join(testenv.CacheDir(), "slurm")
	if _, err := os.Stat(filepath.Join(dir, "plugins", "gpu_nvml.so")); err != nil {
		testenv.Missing(t, "%s (make deps fetches it: hack/fetch-slurm.sh)", dir)
	}
	nvmock := filepath.Join(testenv.BuildDir(), "bin", "nvmock")
	etc := t.TempDir()
	conf := fmt.Sprintf(`ClusterName=nvmock
SlurmctldHost=localhost
GresTypes=gpu
PluginDir=%[1]s/plugins
SlurmdSpoolDir=%[2]s
SlurmdPidFile=%[2]s/slurmd.pid
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
DebugFlags=GRES
`, dir, etc)
	files := map[string]string{
		"slurm.conf": conf, "gres.conf": "AutoDetect=nvml\n",
		// cgroup/v2 refuses a hybrid hierarchy; v1 without automount touches nothing.
		"cgroup.conf": "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n",
		"run.sh": fmt.Sprintf(`set -e
export LD_LIBRARY_PATH=%[1]s/lib SLURM_CONF=%[2]s/slurm.conf
echo "$(%[1]s/sbin/slurmd -C | head -n 1) Gres=%[3]s" >> %[2]s/slurm.conf
%[4]s
exec %[1]s/sbin/slurmd -G
`, dir, etc, gres, script),
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"exec", "--profile", profile, "--assets", filepath.Join(testenv.BuildDir(), "driver")}, flags...)
	cmd := exec.Command(nvmock, append(args, "--", "sh", filepath.Join(etc, "run.sh"))...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("slurmd -G: %v\n%s%s", err, out.String(), errb.String())
	}
	for _, l := range strings.Split(errb.String(), "\n") {
		if _, g, ok := strings.Cut(l, ": Gres Name=gpu "); ok {
			lines = append(lines, g)
		}
	}
	if len(lines) == 0 {
		t.Errorf("slurmd -G detected no GPU:\n%s", errb.String())
	}
	return lines, out.String()
}

// Slurm's NVML autodetection (slurmd 22.05 with its gpu/nvml plugin) finds
// the eight H100s, by the device files their minor numbers name, in order.
// --host-cpus: Slurm drops a GPU whose CPUs the host lacks, as the modelled
// node's are on a smaller machine (docs/profiles.md).
func TestSlurmDetectsTheGPUs(t *testing.T) {
	lines, _ := slurmd(t, "h100", "gpu:h100:8", "", "--host-cpus")
	if len(lines) != 8 {
		t.Fatalf("slurmd -G detected %d GPUs, want 8:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, "Type=h100 Count=1 Index="+fmt.Sprint(i)+" ") || !regexp.MustCompile(` File=/dev/nvidia`+fmt.Sprint(i)+` Cores=\d`).MatchString(l) {
			t.Errorf("GPU %d: %q, want Type=h100, Index=%d, File=/dev/nvidia%d and its cores", i, l, i, i)
		}
	}
}

// On an all-1g.5gb a100 it finds the 56 MIG devices, each with its GPU's
// node and its GPU and compute instances' capability nodes, whose minors
// are those /proc/driver/nvidia-caps/mig-minors gives.
func TestSlurmDetectsTheMIGDevices(t *testing.T) {
	lines, minors := slurmd(t, "a100", "gpu:1g.5gb:56", "cat /proc/driver/nvidia-caps/mig-minors", "--host-cpus", "--mig", "all-1g.5gb")
	if len(lines) != 56 {
		t.Fatalf("slurmd -G detected %d MIG devices, want 56:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	minor := map[string]string{} // gpu0/gi7/access -> 66
	for _, l := range strings.Split(minors, "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			minor[f[0]] = f[1]
		}
	}
	file := regexp.MustCompile(` File=/dev/nvidia(\d),/dev/nvidia-caps/nvidia-cap(\d+),/dev/nvidia-caps/nvidia-cap(\d+) `)
	seen := map[string]bool{}
	for _, l := range lines {
		m := file.FindStringSubmatch(l)
		if !strings.HasPrefix(l, "Type=1g.5gb ") || m == nil {
			t.Errorf("%q: want Type=1g.5gb and File= the GPU's node and two capability nodes", l)
			continue
		}
		// 1g.5gb instances are GPU instances 7-13 with compute instance 0.
		found := false
		for gi := 7; gi <= 13; gi++ {
			g := fmt.Sprintf("gpu%s/gi%d/", m[1], gi)
			if minor[g+"access"] == m[2] && minor[g+"ci0/access"] == m[3] {
				found, seen[g] = true, true
			}
		}
		if !found {
			t.Errorf("%q: capability minors %s and %s are no GPU instance's and compute instance's of GPU %s in mig-minors", l, m[2], m[3], m[1])
		}
	}
	if len(seen) != 56 {
		t.Errorf("the 56 MIG devices name %d distinct GPU instances", len(seen))
	}
}
