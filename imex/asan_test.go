//go:build integration

package imex

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
)

// The sanitized build: imex.c with AddressSanitizer and UBSan, dynamic
// (the sanitizers' runtimes are shared libraries), made once a process.
var asan = struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}{}

// asanEnv makes any report fatal (exit status 66) and checks for leaks at a
// clean exit.
var asanEnv = []string{
	"ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:exitcode=66",
	"UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=66",
}

// TestMain removes the sanitized builds.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range []string{asan.dir, parser.dir} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

// sanitized is imex.c built with the sanitizers, as its two names.
func sanitized(t *testing.T) tools {
	t.Helper()
	gcc := testenv.Tool(t, "gcc")
	asan.once.Do(func() {
		asan.dir, asan.bin, asan.err = buildSanitized(gcc, "nvidia-imex")
	})
	if asan.err != nil {
		testenv.Missing(t, "the sanitized build (gcc's libasan and libubsan): %v", asan.err)
	}
	return named(t, asan.bin, asanEnv)
}

// buildSanitized builds imex.c with the sanitizers and extra flags into a
// directory of its own, which the caller removes.
func buildSanitized(gcc, name string, flags ...string) (dir, bin string, err error) {
	if dir, err = os.MkdirTemp("", "nvmock-imex-asan"); err != nil {
		return "", "", err
	}
	bin = filepath.Join(dir, name)
	src := filepath.Join(testenv.Root(), "imex", "imex.c")
	args := append([]string{"-g", "-O1", "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
		"-fno-sanitize-recover=all", "-Wall", "-Wextra", "-Werror", "-o", bin, src}, flags...)
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		return dir, "", fmt.Errorf("gcc %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return dir, bin, nil
}

// sanitizerReport says whether a program's output holds a report of
// AddressSanitizer, LeakSanitizer or UBSan.
func sanitizerReport(out string) bool {
	return strings.Contains(out, "Sanitizer") || strings.Contains(out, "runtime error:")
}
