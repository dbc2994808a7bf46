package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// writeAtomic writes a command's output file as a user expects of -o.
// A regular file, or none, is replaced in one rename, so a reader never
// sees half a file; a file there keeps its permissions. A symlink is
// followed, so the link stays and its target gets the data. Anything else
// but a directory (/dev/stdout, /dev/null, a pipe) is written into, as a
// shell's redirection would: a rename would put a file in its place.
func writeAtomic(path string, data []byte) error {
	target, mode := path, fs.FileMode(0o644)
	_, lerr := os.Lstat(path)
	switch fi, err := os.Stat(path); {
	case errors.Is(err, fs.ErrNotExist) && lerr == nil:
		return fmt.Errorf("write %s: it is a symlink to nothing that exists", path)
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("write %s: %v", path, pathless(err))
	case fi.IsDir():
		return fmt.Errorf("write %s: it is a directory; give a file name", path)
	case !fi.Mode().IsRegular():
		return writeInto(path, data)
	default:
		mode = fi.Mode().Perm()
		if target, err = filepath.EvalSymlinks(path); err != nil {
			return fmt.Errorf("write %s: %v", path, pathless(err))
		}
	}
	dir := filepath.Dir(target)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(target)+".*")
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write %s: directory %s does not exist", path, dir)
	}
	if err != nil {
		return fmt.Errorf("write %s: %v", path, pathless(err))
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), target)
	}
	if err != nil {
		return fmt.Errorf("write %s: %v", path, pathless(err))
	}
	return nil
}

// writeInto writes data into a device or pipe that is there.
func writeInto(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err == nil {
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %v", path, pathless(err))
	}
	return nil
}

// pathless is err without the path a *PathError names: the messages name
// the user's path, not a temporary file's.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// sameFile says whether two paths name one file: the same path, or, where
// both exist, the same inode.
func sameFile(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

// notLost refuses an output path that holds a regular file compile would
// not write (a profile, the input itself given as -o): it would be lost.
// A snapshot, an empty file or none may be replaced.
func notLost(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil // none; writeAtomic says what else is wrong
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return nil
	}
	magic := make([]byte, len(snapshot.Magic))
	if _, err := io.ReadFull(f, magic); err == nil && string(magic) == snapshot.Magic {
		return nil
	}
	return fmt.Errorf("-o %s: a file that is not a snapshot is there, and would be lost; remove it or give another name", path)
}
