package ibd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/ibshim/umad"
)

// Listen replaces what a daemon left (its socket and word) and nothing
// else: a path given by mistake cost the file there and the one beside it
// (review: --socket /etc/passwd).
func TestListenReplacesOnlyADaemonsSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "ibd.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	l.Close() // leaves the socket and its word, as a daemon killed does
	l, err = Listen(sock)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	l.Close()

	file := filepath.Join(dir, "notes")
	os.WriteFile(file, []byte("mine"), 0o644)
	if _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "exists and is not a socket") {
		t.Errorf("over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "mine" {
		t.Errorf("the file became %q", b)
	}

	other := filepath.Join(dir, "other.sock")
	os.WriteFile(other+umad.IDSuffix, []byte(strings.Repeat("x", 100)), 0o644)
	if _, err := Listen(other); err == nil || !strings.Contains(err.Error(), "is not a daemon's word") {
		t.Errorf("beside a file that is no daemon's word: %v", err)
	}
	if fi, err := os.Stat(other + umad.IDSuffix); err != nil || fi.Size() != 100 {
		t.Errorf("the file beside it: %v, %v", fi, err)
	}
}

// Counters shown into live ports that went away (nvmock exec removing its
// overlay while the daemon still ticks) are no warning on the command's
// stderr (CI: it landed in a test's parsed output).
func TestCountersForPortsThatWentAreNotWarnedAbout(t *testing.T) {
	d, _, _ := daemonOf(t)
	var out strings.Builder
	d.log.SetOutput(&out)
	dir := t.TempDir()
	at := filepath.Join(dir, "mlx5_0", "ports", "1", "counters")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	go os.RemoveAll(dir)
	for i := 0; i < 200; i++ {
		d.showCounters(dir, []shownCounters{{hca: "mlx5_0"}})
	}
	if out.Len() != 0 {
		t.Errorf("warned:\n%s", out.String())
	}
}
