package testenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nvmock/nvmock/profile"
)

// Profile is a built-in profile with gpus GPUs (0: the profile's count).
func Profile(t testing.TB, name string, gpus int) *profile.Profile {
	t.Helper()
	p, err := profile.Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	if gpus > 0 {
		p.GPUs = gpus
	}
	return p
}

// Node is a built-in profile with gpus GPUs resolved into the node model.
func Node(t testing.TB, name string, gpus int) *profile.Node {
	t.Helper()
	n, err := Profile(t, name, gpus).Node()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// FakeDriverAssets is a driver tree with stand-ins for the library,
// nvidia-smi (a script, which hostprep copies without checking its RPATH)
// and the InfiniBand libraries, for tests that render overlays but run
// nothing from them.
func FakeDriverAssets(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	lib64, bin := filepath.Join(d, "usr", "lib64"), filepath.Join(d, "usr", "bin")
	for _, f := range []struct {
		path, data string
	}{
		{filepath.Join(lib64, "libnvidia-ml.so.535.261.03"), "not really a library\n"},
		{filepath.Join(bin, "nvidia-smi"), "#!/bin/sh\necho fake nvidia-smi\n"},
		// The InfiniBand planes' libraries, for profiles with HCAs.
		{filepath.Join(lib64, "nvmock", "libnvmock-umad.so"), "not really a shim\n"},
		{filepath.Join(lib64, "libibverbs", "libnvmock-rdmav34.so"), "not really a provider\n"},
		// nvidia-imex, for NVL72 profiles.
		{filepath.Join(bin, "nvidia-imex"), "#!/bin/sh\necho fake nvidia-imex\n"},
	} {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.path, []byte(f.data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range [][2]string{{"libnvidia-ml.so.535.261.03", "libnvidia-ml.so.1"}, {"libnvidia-ml.so.1", "libnvidia-ml.so"}} {
		if err := os.Symlink(l[0], filepath.Join(lib64, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	return d
}
