package live

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// A state of another layout version at the same size is a new file, as one
// of another size is: processes of the older nvmock keep the file they
// read, never this layout's bytes under theirs (QA).
func TestCreateReplacesAStateOfAnotherVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	if err := Create(path, 2, 1); err != nil {
		t.Fatal(err)
	}
	// An older nvmock's process keeps the file open (mapped).
	old, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	var v [4]byte
	binary.NativeEndian.PutUint32(v[:], Version-1)
	if _, err := old.WriteAt(v[:], 8); err != nil {
		t.Fatal(err)
	}
	if err := Create(path, 2, 1); err != nil {
		t.Fatal(err)
	}
	oldSt, _ := old.Stat()
	newSt, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.ReadAt(v[:], 8); err != nil || binary.NativeEndian.Uint32(v[:]) != Version-1 || os.SameFile(oldSt, newSt) {
		t.Error("a state of another version was reset in place, under its older readers")
	}
	if err := Create(path, 2, 1); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.Stat(path); !os.SameFile(newSt, again) {
		t.Error("a state of this version was replaced, not reset in place")
	}
}
