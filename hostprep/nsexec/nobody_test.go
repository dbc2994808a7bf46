//go:build integration

package nsexec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// nobodyHelperEnv makes a re-executed test binary run a command the way
// nvmock exec does (execAsNobody).
const nobodyHelperEnv = "NVMOCK_NSEXEC_NOBODY_HELPER"

type nobodyHelper struct {
	Driver string   `json:"driver"`
	Args   []string `json:"args"`
	// FD100, if set, is a file the helper opens as descriptor 100 before
	// lowering its open-file limit to 64, as a shell's `100>FILE` and
	// `ulimit -n 64` would.
	FD100 string `json:"fd100"`
}

// execAsNobody is the process the tests below start as nobody: TestMain
// runs it where nobodyHelperEnv is set (review: as a test of its own it
// passed, checking nothing, in every run).
func execAsNobody(spec string) {
	var h nobodyHelper
	if err := json.Unmarshal([]byte(spec), &h); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	if h.FD100 != "" {
		f, err := os.OpenFile(h.FD100, os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			err = syscall.Dup2(int(f.Fd()), 100) // without close-on-exec: inherited
		}
		if err == nil {
			err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 64, Max: 64})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(2)
		}
	}
	status, err := RunRendered(func(string) (string, []Bind, error) { return h.Driver, nil, nil }, Options{
		Args: h.Args, Self: []string{"/proc/self/exe", childArg}, Stdin: strings.NewReader(""),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "nsexec:", err)
	}
	os.Exit(status)
}

// nobody's HOME is /nonexistent: exec used to fail making its loader cache
// there ("mkdir /nonexistent: permission denied").
const nobody = 65534

// nobodyFixture is a t4 overlay (its driver root) in base, a directory
// others may enter: everything nobody reads must be under one, and
// t.TempDir's are not.
func nobodyFixture(t *testing.T) (base, driver string) {
	t.Helper()
	needRoot(t)
	base, err := os.MkdirTemp("", "nsexec-nobody-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	must(t, os.Chmod(base, 0o755))
	return base, fixture(t, base, "t4", 0)
}

func TestExecWorksForAUserWithoutAWritableHome(t *testing.T) {
	base, driver := nobodyFixture(t)
	run := func(t *testing.T) (status int, stdout, stderr string) {
		t.Helper()
		tmp := filepath.Join(base, "tmp") // nobody's TMPDIR
		spec, _ := json.Marshal(nobodyHelper{Driver: driver, Args: []string{"nvidia-smi", "-L"}})
		// /proc/self/exe: nobody may not search go test's build directory.
		cmd := exec.Command("/proc/self/exe")
		cmd.Env = append(cleanEnv(), nobodyHelperEnv+"="+string(spec), "HOME=/nonexistent", "XDG_CACHE_HOME=", "TMPDIR="+tmp, "USER=nobody")
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), out.String(), errb.String()
		}
		must(t, err)
		return 0, out.String(), errb.String()
	}
	tmp := filepath.Join(base, "tmp")
	cache := filepath.Join(tmp, fmt.Sprint("nvmock-", nobody))
	for _, tc := range []struct {
		name    string
		plant   func(t *testing.T)
		private string // where the loader cache must be, as nobody's own with mode 0700; "" in the run's own directory
	}{
		{"the first run makes the cache in a private directory in TMPDIR", nil, cache},
		{"the next run finds it there", nil, cache},
		{"a directory planted at that name by another user is not used", func(t *testing.T) {
			must(t, os.RemoveAll(cache))
			must(t, os.Mkdir(cache, 0o777))
			must(t, os.Chmod(cache, 0o777))
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			must(t, os.MkdirAll(tmp, 0o755))
			must(t, os.Chmod(tmp, 0o1777))
			if tc.plant != nil {
				tc.plant(t)
			}
			status, stdout, stderr := run(t)
			if status != 0 || !strings.HasPrefix(stdout, "GPU 0: Tesla T4 (UUID: GPU-") {
				t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
			}
			if _, err := os.Stat("/nonexistent"); err == nil {
				t.Error("/nonexistent was created")
			}
			ents, err := os.ReadDir(cache)
			must(t, err)
			if tc.private == "" {
				if len(ents) != 0 {
					t.Errorf("wrote %d entries into the planted %s", len(ents), cache)
				}
				return
			}
			var st syscall.Stat_t
			must(t, syscall.Lstat(tc.private, &st))
			if st.Uid != nobody || st.Mode&0o7777 != 0o700 || len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), "ld.so.cache-") {
				t.Errorf("%s: owner %d, mode %o, entries %v; want nobody's, 0700, one ld.so.cache-*", tc.private, st.Uid, st.Mode&0o7777, ents)
			}
		})
	}
	// Each run's directory (and a cache made in it) is gone.
	if ents, _ := os.ReadDir(tmp); len(ents) != 1 {
		t.Errorf("left in TMPDIR: %v", ents)
	}
}

// A descriptor the caller passed above the open-file limit reaches the
// command, for root and in a user namespace. The child's status pipe used
// to be laid out after the highest inherited descriptor, which the child
// could not have ("fork/exec /proc/self/exe: bad file descriptor").
func TestExecPassesADescriptorAboveTheOpenFileLimit(t *testing.T) {
	base, driver := nobodyFixture(t)
	for _, user := range []struct {
		name string
		cred *syscall.Credential
	}{{"root", nil}, {"nobody", &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}} {
		t.Run(user.name, func(t *testing.T) {
			out := filepath.Join(base, "out-"+user.name)
			must(t, os.WriteFile(out, nil, 0o666))
			must(t, os.Chmod(out, 0o666))
			tmp := filepath.Join(base, "tmp-"+user.name)
			must(t, os.Mkdir(tmp, 0o1777))
			must(t, os.Chmod(tmp, 0o1777))
			spec, _ := json.Marshal(nobodyHelper{Driver: driver, Args: []string{"bash", "-c", "echo on-100 >&100"}, FD100: out})
			cmd := exec.Command("/proc/self/exe")
			cmd.Env = append(cleanEnv(), nobodyHelperEnv+"="+string(spec), "TMPDIR="+tmp, "XDG_CACHE_HOME="+tmp)
			cmd.Dir = "/"
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: user.cred}
			b, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			if got, _ := os.ReadFile(out); string(got) != "on-100\n" {
				t.Errorf("descriptor 100 got %q\n%s", got, b)
			}
		})
	}
}
