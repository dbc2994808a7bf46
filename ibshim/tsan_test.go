//go:build integration

package ibshim_test

// The verbs provider and the umad shim built with ThreadSanitizer, under
// a program whose threads post, poll, wait for events, make and destroy
// objects, query and send MADs at once, as NCCL's and UCX's do: no data
// race, no lock-order inversion. Then the same program against the
// normal build, for crashes and hangs.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
)

// -g: TSan's reports name our functions and lines.
const tsanFlags = "-fsanitize=thread -fno-omit-frame-pointer -g"

// threadsSeconds is how long threads.c runs each time.
const threadsSeconds = 4

// tsanScript runs threads with the TSan runtime first in LD_PRELOAD (the
// shell has the shim first: ibshim.Env puts it ahead of any preload).
// No suppressions: every report so far came from our code, and
// libibverbs, uninstrumented, shows TSan only its calls into libc and
// pthreads, whose ordering it sees.
const tsanScript = `export LD_PRELOAD="$TSAN:${LD_PRELOAD%%:$TSAN}"
%s mlx5_0 %d; echo "exit $?"
`

func TestThreadsUnderTSan(t *testing.T) {
	runUnderTSan(t, "threads")
}

// The verbs threads.c leaves out, the same way: extended CQs, ibv_qp_ex
// batches, memory windows, device memory, ibv_rereg_mr and fork (in the
// normal build only: TSan does not follow a multithreaded fork's child,
// and can deadlock in it).
func TestExtendedVerbsUnderTSan(t *testing.T) {
	runUnderTSan(t, "threads_ext")
}

// runUnderTSan builds testdata/name.c and runs it with TSan, then against
// the normal build; it must print "ok name".
func runUnderTSan(t *testing.T, name string) {
	tsan := sanitizerRuntime(t, "libtsan.so", "libtsan2")
	assets := sanitizedAssets(t, tsanFlags)
	src := filepath.Join("testdata", name+".c")
	sanitized := buildC(t, src, append(strings.Fields(tsanFlags), "-pthread")...)

	out := runThreads(t, assets, fmt.Sprintf(tsanScript, sanitized, threadsSeconds),
		"TSAN="+tsan, "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1")
	if strings.Contains(out, "WARNING: ThreadSanitizer") {
		t.Fatalf("ThreadSanitizer report; output:\n%s", out)
	}
	checkThreads(t, name, "under TSan", out)

	plain := buildC(t, src, "-pthread")
	out = runThreads(t, filepath.Join(testenv.BuildDir(), "driver"), fmt.Sprintf("%s mlx5_0 %d; echo \"exit $?\"\n", plain, threadsSeconds))
	checkThreads(t, name, "with the normal build", out)
}

// runThreads runs script in nvmock exec on an h100 node with assets as the
// driver tree; a hang is killed after two minutes.
func runThreads(t *testing.T, assets, script string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, builtNvmock(t), "exec", "--profile", "h100", "--assets", assets, "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("threads hung (killed after 2 minutes); output:\n%s", out)
	}
	if err != nil {
		t.Fatalf("nvmock exec: %v\n%s", err, out)
	}
	return string(out)
}

func checkThreads(t *testing.T, name, how, out string) {
	t.Helper()
	if !strings.Contains(out, "ok "+name+"\n") || !strings.Contains(out, "exit 0\n") {
		t.Fatalf("%s %s failed; output:\n%s", name, how, out)
	}
	t.Logf("%s %s:\n%s", name, how, out)
}
