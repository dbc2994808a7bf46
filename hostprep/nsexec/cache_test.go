package nsexec

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
)

// cacheEnv points the user's cache directory and the temporary directory
// into a test directory: home "" leaves no usable cache directory (HOME
// under a regular file fails even for root, as /nonexistent does for
// nobody).
func cacheEnv(t *testing.T, home string) (tmp, work string) {
	t.Helper()
	d := t.TempDir()
	if home == "" {
		f := filepath.Join(d, "file")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		home = filepath.Join(f, "home")
	}
	t.Setenv("HOME", home)
	t.Setenv("XDG_CACHE_HOME", "")
	tmp, work = filepath.Join(d, "tmp"), filepath.Join(d, "work")
	for _, p := range []string{tmp, work} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	return tmp, work
}

func checkPrivate(t *testing.T, d string) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(d, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o777 != 0o700 {
		t.Errorf("%s: mode %o, owner %d; want a directory of uid %d with mode 0700", d, st.Mode, st.Uid, os.Geteuid())
	}
}

func TestTheLoaderCacheIsKeptInTheUsersCacheDirectory(t *testing.T) {
	home := t.TempDir()
	_, work := cacheEnv(t, home)
	d, err := loaderCacheDir(work)
	if want := filepath.Join(home, ".cache", "nvmock"); err != nil || d != want {
		t.Errorf("got %q, %v; want %s", d, err, want)
	}
}

// nobody's HOME is /nonexistent: the cache goes to a directory of the
// user's own in TMPDIR, made 0700, and is found there again.
func TestWithoutAUsableHomeTheCacheIsAPrivateDirectoryInTMPDIR(t *testing.T) {
	tmp, work := cacheEnv(t, "")
	want := filepath.Join(tmp, fmt.Sprintf("nvmock-%d", os.Geteuid()))
	for run := 1; run <= 2; run++ {
		d, err := loaderCacheDir(work)
		if err != nil || d != want {
			t.Fatalf("run %d: got %q, %v; want %s", run, d, err, want)
		}
		checkPrivate(t, d)
	}
}

// Another user may create the TMPDIR name first; then the cache is made
// for this run only, inside work, and the squatted directory is left alone.
func TestASquattedTMPDIRNameIsNotUsed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, p string)
	}{
		{"a directory others may write", func(t *testing.T, p string) {
			must(t, os.Mkdir(p, 0o700))
			must(t, os.Chmod(p, 0o777))
		}},
		{"a directory others may enter", func(t *testing.T, p string) {
			must(t, os.Mkdir(p, 0o700))
			must(t, os.Chmod(p, 0o711))
		}},
		{"a symlink to a directory of ours", func(t *testing.T, p string) {
			must(t, os.Symlink(t.TempDir(), p))
		}},
		{"a file", func(t *testing.T, p string) {
			must(t, os.WriteFile(p, nil, 0o600))
		}},
		{"a directory of another user", func(t *testing.T, p string) {
			if os.Geteuid() != 0 {
				testenv.Missing(t, "root, to make a directory owned by another user")
			}
			must(t, os.Mkdir(p, 0o700))
			must(t, os.Chown(p, 65534, 65534))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp, work := cacheEnv(t, "")
			squat := filepath.Join(tmp, fmt.Sprintf("nvmock-%d", os.Geteuid()))
			tc.plant(t, squat)
			d, err := loaderCacheDir(work)
			if want := filepath.Join(work, "loader-cache"); err != nil || d != want {
				t.Fatalf("got %q, %v; want %s", d, err, want)
			}
			checkPrivate(t, d)
			if ents, _ := os.ReadDir(squat); len(ents) != 0 {
				t.Errorf("wrote into the squatted %s", squat)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
