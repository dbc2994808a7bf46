package pcisim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A tree wide enough that its directories and files are made by several
// workers reads back as written, links included.
func TestWriteMakesAWideTreeAsVerifyReadsIt(t *testing.T) {
	var files []File
	for d := range 100 {
		for f := range 3 {
			p := fmt.Sprintf("a/d%d/e/f%d", d, f)
			files = append(files, File{Path: p, Data: []byte(p + "\n")})
		}
		files = append(files, File{Path: fmt.Sprintf("a/d%d/link", d), Link: "../d0"})
	}
	dir := filepath.Join(t.TempDir(), "tree")
	if err := Write(files, dir); err != nil {
		t.Fatal(err)
	}
	if err := Verify(files, dir); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a/d99/link/e/f2")); err != nil || string(b) != "a/d0/e/f2\n" {
		t.Fatalf("through the link: %q, %v", b, err)
	}
}

// A path that is a file and another's directory fails, naming it.
func TestWriteNamesAPathThatIsBothFileAndDirectory(t *testing.T) {
	files := []File{{Path: "a/b", Data: []byte("x")}, {Path: "a/b/c", Data: []byte("y")}}
	err := Write(files, filepath.Join(t.TempDir(), "tree"))
	if err == nil || !strings.Contains(err.Error(), "a/b") {
		t.Fatalf("Write = %v, want an error naming a/b", err)
	}
}

func TestInRunsReturnsTheLowestFailure(t *testing.T) {
	for _, n := range []int{3, 1000} {
		var ran [1000]bool
		err := InRuns(n, func(i int) error {
			ran[i] = true
			if i == n-1 || i == n/2 {
				return fmt.Errorf("at %d", i)
			}
			return nil
		})
		if want := fmt.Sprintf("at %d", n/2); err == nil || err.Error() != want {
			t.Errorf("n=%d: %v, want %s", n, err, want)
		}
		if !ran[0] {
			t.Errorf("n=%d: index 0 never ran", n)
		}
	}
	if err := InRuns(0, func(int) error { return errors.New("called") }); err != nil {
		t.Errorf("n=0: %v", err)
	}
}
