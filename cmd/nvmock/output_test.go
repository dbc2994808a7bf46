package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// -o writes what is there as a user expects: a symlink stays a link to
// the new data, a file keeps its permissions, a pipe or device is written
// into, never replaced by a file (review: -o /dev/full became a file).
func TestOutputKeepsWhatIsThere(t *testing.T) {
	dir := t.TempDir()
	data := []byte("snapshot")
	at := func(name string) string { return filepath.Join(dir, name) }

	real := at("real")
	must(t, os.WriteFile(real, []byte("old"), 0o600))
	must(t, os.Symlink("real", at("link")))
	must(t, writeAtomic(at("link"), data))
	if got, _ := os.ReadFile(real); !bytes.Equal(got, data) {
		t.Errorf("through the link the target holds %q, want %q", got, data)
	}
	if fi, err := os.Lstat(at("link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link is no longer a link: %v %v", fi.Mode(), err)
	}
	if fi, _ := os.Stat(real); fi.Mode().Perm() != 0o600 {
		t.Errorf("the file's mode is %v, want the 0600 it had", fi.Mode().Perm())
	}

	must(t, syscall.Mkfifo(at("fifo"), 0o644))
	got := make(chan []byte)
	go func() {
		b, _ := os.ReadFile(at("fifo"))
		got <- b
	}()
	must(t, writeAtomic(at("fifo"), data))
	if b := <-got; !bytes.Equal(b, data) {
		t.Errorf("the pipe's reader got %q", b)
	}
	if fi, _ := os.Lstat(at("fifo")); fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the pipe became %v", fi.Mode())
	}

	must(t, writeAtomic(os.DevNull, data))
	if fi, err := os.Stat(os.DevNull); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("%s is now %v (%v)", os.DevNull, fi.Mode(), err)
	}
	if err := writeAtomic("/dev/full", data); err == nil || !strings.Contains(err.Error(), "write /dev/full: no space left on device") {
		t.Errorf("/dev/full: %v, want its error", err)
	}

	must(t, os.Symlink("nowhere", at("dangling")))
	if err := writeAtomic(at("dangling"), data); err == nil || !strings.Contains(err.Error(), "it is a symlink to nothing that exists") {
		t.Errorf("a dangling link: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 4 {
		t.Errorf("%d entries after the writes, want real, link, fifo, dangling", len(ents))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
