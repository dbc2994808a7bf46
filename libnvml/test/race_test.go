//go:build integration

package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
)

// raceSeconds is how long each run of race.c calls the library.
const raceSeconds = 8

// tsanFlags build with ThreadSanitizer. -Wno-tsan: gcc cannot instrument
// atomic_thread_fence, and says so. The fences left order the seqlock on
// the live state file, whose writers are other processes or a mapping of
// their own (mig.c), which TSan does not see as the same memory anyway.
var tsanFlags = []string{"-fsanitize=thread", "-Wno-tsan", "-fno-omit-frame-pointer"}

// tsanWorks fails (under CI=true) or skips the test when gcc cannot build
// and run a program with -fsanitize=thread, naming why.
func tsanWorks(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "probe.c")
	if err := os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "probe")
	out, err := exec.Command(testenv.Tool(t, "gcc"), "-fsanitize=thread", "-o", bin, src).CombinedOutput()
	if err == nil {
		out, err = exec.Command(bin).CombinedOutput()
	}
	if err != nil {
		testenv.Missing(t, "gcc cannot build and run a program with -fsanitize=thread (is libtsan installed? Debian: libtsan2 and libgcc-12-dev): %v\n%s", err, out)
	}
}

// changeLiveState runs nvmock ctl against a state file until stop closes,
// as an operator or a test harness on the node would: loads, faults of
// most kinds on every GPU, XIDs, processes and MIG layouts. It returns
// how many commands ran, and the first failure of one that cannot fail
// by design (review: with no writer at all the test passed).
func changeLiveState(nvmock, state string, stop <-chan struct{}) (n int, failed error) {
	pid := strconv.Itoa(os.Getpid()) // a live process, for the process table
	for i := 0; ; i++ {
		g := strconv.Itoa(i % gpus)
		for _, c := range []string{
			"load all " + strconv.Itoa(i*7%100) + " --jitter 5",
			"xid all 13",
			"fault all ecc_correctable --count 3",
			"fault all nvlink_down --link 2",
			"fault " + g + " thermal",
			"fault all xid --xid 79 --after-calls 100",
			"fault all ecc_uncorrectable --probability 0.01",
			"fault 7 lost",
			"proc add " + g + " " + pid + " --name racer --memory 1Gi",
			"mig 4-5=all-1g.5gb",
			"proc rm " + pid,
			"mig 4-5=all-disabled",
			"clear all",
		} {
			select {
			case <-stop:
				return n, failed
			default:
			}
			out, err := exec.Command(nvmock, append([]string{"ctl", "--state", state}, strings.Fields(c)...)...).CombinedOutput()
			n++
			// MIG layouts and processes fail by design at times: a layout
			// on a GPU with processes, a process on a GPU race.c put in
			// MIG mode.
			if err != nil && failed == nil && !strings.HasPrefix(c, "mig ") && !strings.HasPrefix(c, "proc ") {
				failed = fmt.Errorf("nvmock ctl %s: %v\n%s", c, err, out)
			}
		}
	}
}

// runRace runs race.c against the library in libDir with a writer
// changing the live state all the while, and returns its output, failing
// the test on a ThreadSanitizer report or an unclean exit.
func runRace(t *testing.T, bin, libDir string, extra ...string) string {
	t.Helper()
	snap, _ := testenv.Snapshot(t, "a100", gpus)
	testenv.LiveState(t, snap, gpus, time.Time{})
	nvmock := testenv.NvmockBin(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var changes int
	var failed error
	wg.Add(1)
	go func() {
		defer wg.Done()
		changes, failed = changeLiveState(nvmock, filepath.Join(filepath.Dir(snap), "state"), stop)
	}()
	env := testenv.Env(t, snap, append([]string{"LD_LIBRARY_PATH=" + libDir}, extra...)...)
	out, code := run(t, 2*time.Minute, env, bin, strconv.Itoa(raceSeconds))
	close(stop)
	wg.Wait()
	t.Logf("%d nvmock ctl commands ran meanwhile", changes)
	if failed != nil {
		t.Fatalf("the writer failed, so no state changed under the readers: %v", failed)
	}
	if strings.Contains(out, "WARNING: ThreadSanitizer") {
		t.Fatalf("ThreadSanitizer report (exit %d); output:\n%s", code, out)
	}
	if code != 0 || !strings.Contains(out, "race: ") {
		t.Fatalf("race exited %d, want 0 and a summary; output:\n%s", code, out)
	}
	return out
}

// Threads of one process calling at once: readings, handles, events, MIG
// instances made and destroyed, init and shutdown in pairs, while nvmock
// ctl changes the live state. ThreadSanitizer reports any data race or
// lock-order inversion; the plain build runs as long, for crashes.
func TestRaceTSan(t *testing.T) {
	tsanWorks(t)
	t.Run("under ThreadSanitizer", func(t *testing.T) {
		libDir := buildLibWith(t, tsanFlags...)
		bin := filepath.Join(t.TempDir(), "race")
		gcc(t, append(append([]string{"-O1", "-pthread"}, tsanFlags...), "-I"+testenv.NVMLHeaderDir(t), "-o", bin,
			filepath.Join(testDir(), "race.c"), "-L"+libDir, "-l:libnvidia-ml.so.1")...)
		t.Log(strings.TrimSpace(runRace(t, bin, libDir, "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1")))
	})
	t.Run("on the built library", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "race")
		gcc(t, "-O1", "-pthread", "-I"+testenv.NVMLHeaderDir(t), "-o", bin, filepath.Join(testDir(), "race.c"),
			"-L"+testenv.LibDir(t), "-l:libnvidia-ml.so.1")
		t.Log(strings.TrimSpace(runRace(t, bin, testenv.LibDir(t))))
	})
}
