//go:build integration

package ibshim_test

// The umad shim and the verbs provider built with AddressSanitizer and
// UBSan, under Debian's tools, our verbs programs and a hostile one in
// nvmock exec: no memory error, no undefined behaviour, no leak of theirs.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/ibshim"
	"github.com/nvmock/nvmock/internal/testenv"
)

var sanitizerFlags = "-fsanitize=address,undefined -fno-omit-frame-pointer"

// sanitizedAssets is a driver tree like the built one, with the shim and
// the provider built by their scripts with flags (sanitizers) added.
func sanitizedAssets(t *testing.T, flags string) string {
	t.Helper()
	built := filepath.Join(testenv.BuildDir(), "driver")
	if _, err := os.Stat(filepath.Join(built, "usr", "bin", "nvidia-smi")); err != nil {
		testenv.Missing(t, "%s (run make driver)", built)
	}
	if _, err := os.Stat(filepath.Join(testenv.CacheDir(), "rdma-core", "include", "infiniband", "driver.h")); err != nil {
		testenv.Missing(t, "rdma-core's headers in %s (run make infiniband)", testenv.CacheDir())
	}
	dir := t.TempDir()
	for _, rel := range []string{"usr/bin/nvidia-smi", "usr/lib64/libnvidia-ml.so.1"} {
		copyFile(t, filepath.Join(built, rel), filepath.Join(dir, rel))
	}
	// hostprep looks for the library by its versioned name.
	libs, _ := filepath.Glob(filepath.Join(built, "usr", "lib64", "libnvidia-ml.so.*.*"))
	for _, l := range libs {
		copyFile(t, l, filepath.Join(dir, "usr", "lib64", filepath.Base(l)))
	}
	root := testenv.Root()
	for _, b := range [][]string{
		{filepath.Join(root, "ibshim", "umad", "build.sh"), filepath.Join(dir, filepath.Dir(ibshim.UmadShim)), testenv.CacheDir()},
		{filepath.Join(root, "ibshim", "verbs", "build.sh"), testenv.CacheDir(), filepath.Join(dir, filepath.Dir(ibshim.VerbsProvider))},
	} {
		cmd := exec.Command(b[0], b[1:]...)
		cmd.Env = append(os.Environ(), "EXTRA_CFLAGS="+flags)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s with %s: %v\n%s", b[0], flags, err, out)
		}
	}
	return dir
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		testenv.Missing(t, "%v (run make driver)", err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
}

// sanitizerRuntime is gcc's lib (libasan.so, libtsan.so), which must come
// before the shim in LD_PRELOAD: the tools are not built with it. pkg is
// the Debian package that has it.
func sanitizerRuntime(t *testing.T, lib, pkg string) string {
	t.Helper()
	out, err := exec.Command(testenv.Tool(t, "gcc"), "-print-file-name="+lib).Output()
	so := strings.TrimSpace(string(out))
	if err != nil || !filepath.IsAbs(so) {
		testenv.Missing(t, "gcc's %s (%s): gcc -print-file-name=%s said %q", lib, pkg, lib, so)
	}
	return so
}

func buildC(t *testing.T, src string, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), ".c"))
	args := append([]string{"-std=gnu11", "-O1", "-g", "-Wall", "-Werror", "-o", bin, src}, flags...)
	if out, err := exec.Command(testenv.Tool(t, "gcc"), append(args, "-libverbs")...).CombinedOutput(); err != nil {
		testenv.Missing(t, "building %s (libibverbs-dev): %v\n%s", src, err, out)
	}
	return bin
}

// asanScript runs each step (the pingpongs on ports of their own) with the ASan runtime first and prints its
// exit status. The shell nvmock exec starts has the shim first (ibshim.Env
// puts it ahead of any preload): verify_asan_link_order=0 lets it run.
// rcpair exits without destroying its verbs objects, by design: it runs
// without leak checks.
const asanScript = `export LD_PRELOAD="$ASAN:${LD_PRELOAD%%:$ASAN}"
step() { echo "== $*"; "$@"; echo "exit $?"; }
nolsan() { ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" "$@"; }
pair() { $1 -d mlx5_0 -g 0 -c -n 50 -p $2 $3 > /tmp/server.out 2>&1 & srv=$!
	waitlisten $2; step $1 -d mlx5_0 -g 0 -c -n 50 -p $2 $3 localhost; wait $srv; echo "server exit $?"; cat /tmp/server.out; }
step ibstat
step ibv_devinfo -v
step smpquery nodeinfo 1
step saquery
step perfquery
step ibnetdiscover
ibping -C mlx5_0 -S & srv=$!; sleep 0.5
step ibping -C mlx5_0 -c 2 $(cat /sys/class/infiniband/mlx5_0/ports/1/lid)
kill $srv
step %[1]s fork
pair ibv_rc_pingpong 18725 -e
pair ibv_ud_pingpong 18726
step %[2]s mlx5_0
step nolsan %[3]s mlx5_0 %[4]d
step %[5]s mlx5_0
`

func TestToolsUnderASan(t *testing.T) {
	for _, tool := range []string{"ibstat", "ibv_devinfo", "smpquery", "saquery", "perfquery", "ibnetdiscover", "ibping", "ibv_rc_pingpong", "ibv_ud_pingpong"} {
		testenv.Tool(t, tool)
	}
	asan := sanitizerRuntime(t, "libasan.so", "libasan8")
	assets := sanitizedAssets(t, sanitizerFlags)
	madclient := buildC(t, filepath.Join("umad", "testdata", "madclient.c"))
	hostile := buildC(t, filepath.Join("testdata", "hostile.c"), strings.Fields(sanitizerFlags)...)
	rcpair := buildC(t, filepath.Join("testdata", "rcpair.c"))
	lifecycle := buildC(t, filepath.Join("testdata", "lifecycle.c"))
	script := testenv.WaitListen + fmt.Sprintf(asanScript, madclient, lifecycle, rcpair, modelledLID(t, model(t)), hostile)

	run := func(leaks int) string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, builtNvmock(t), "exec", "--profile", "h100", "--assets", assets, "--", "sh", "-c", script)
		cmd.Env = append(os.Environ(), "ASAN="+asan, "LD_PRELOAD="+asan,
			fmt.Sprintf("ASAN_OPTIONS=verify_asan_link_order=0:halt_on_error=1:fast_unwind_on_malloc=0:detect_leaks=%d", leaks),
			"LSAN_OPTIONS=exitcode=0", // a leak is judged below, not by the tool's status
			"UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nvmock exec: %v\n%s", err, out)
		}
		return string(out)
	}
	out := run(1)
	if strings.Contains(out, "LeakSanitizer has encountered a fatal error") {
		// LeakSanitizer needs ptrace; some sandboxes forbid it.
		t.Log("LeakSanitizer cannot run here (no ptrace); running again with detect_leaks=0")
		out = run(0)
	}
	for _, bad := range []string{"ERROR: AddressSanitizer", "runtime error:"} {
		if strings.Contains(out, bad) {
			t.Fatalf("sanitizer report (%q); output:\n%s", bad, out)
		}
	}
	if ours, theirs := leaks(out); len(ours) > 0 {
		t.Errorf("leaks in the shim or the provider:\n%s", strings.Join(ours, "\n"))
	} else if theirs > 0 {
		t.Logf("%d leaks of the tools themselves (libibumad's umad_get_ca in ibstat, libibnetdisc), not ours", theirs)
	}
	steps := regexp.MustCompile(`(?m)^== (.*)$`).FindAllStringSubmatch(out, -1)
	if len(steps) != 13 {
		t.Errorf("%d steps ran, want 13; output:\n%s", len(steps), out)
	}
	if regexp.MustCompile(`(?m)^(server )?exit [1-9]\d*$`).MatchString(out) {
		t.Errorf("a step failed; output:\n%s", out)
	}
	for _, check := range []string{"umad-lengths", "umad-ioctls", "umad-poll", "umad-bad-fds", "umad-paths",
		"verbs-queries", "verbs-regions", "verbs-cqs", "verbs-qps", "verbs-sizes", "verbs-in-use", "fork-close", "retry-exceeded"} {
		if !strings.Contains(out, "ok "+check+"\n") {
			t.Errorf("no %q; output:\n%s", "ok "+check, out)
			break
		}
	}
}

// leaks splits LeakSanitizer's reports into those whose allocation went
// through the shim or the provider, and a count of the others.
func leaks(out string) (ours []string, theirs int) {
	for _, b := range regexp.MustCompile(`(?m)^(Direct|Indirect) leak of (?s:.*?)\n\n`).FindAllString(out, -1) {
		if strings.Contains(b, "libnvmock-umad.so") || strings.Contains(b, "libnvmock-rdmav34.so") {
			ours = append(ours, b)
		} else {
			theirs++
		}
	}
	return ours, theirs
}
