package hostprep

import (
	"errors"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// asset is a file of the assets that the overlay holds: its bytes, or, when
// the caller binds the assets over the overlay's copies (Options.BindAssets),
// only its path.
type asset struct {
	path  string
	data  []byte
	bound bool
}

// entry is the overlay's file at path holding a; every asset is a program
// or a library.
func (a asset) entry(path string) entry {
	e := entry{path: path, data: a.data, mode: 0o755}
	if a.bound {
		e.from = a.path
	}
	return e
}

// assetReader reads the files of the assets, or, with bind, only checks
// them: nvmock exec binds them, and copying about 1.3 MB into every run's
// overlay was a sixth of its time.
func assetReader(bind bool) func(path string) (asset, error) {
	return func(p string) (asset, error) {
		if bind {
			fi, err := os.Stat(p)
			if err == nil && !fi.Mode().IsRegular() {
				why := error(syscall.EISDIR) // as reading it would say
				if !fi.IsDir() {
					why = errors.New("not a regular file")
				}
				return asset{}, &fs.PathError{Op: "read", Path: p, Err: why}
			}
			if err == nil && bindable(p, fi) {
				return asset{path: p, bound: true}, nil
			}
		}
		data, err := os.ReadFile(p)
		return asset{path: p, data: data}, err
	}
}

// bindable says whether the asset at p shows bound as its copy would: a
// copy is written with mode 0755 for anyone to run (commands in exec may
// switch users), and a bound file keeps its own mode and its mount's
// noexec (access refuses X_OK there). Any other asset is copied.
func bindable(p string, fi fs.FileInfo) bool {
	return fi.Mode().Perm()&0o555 == 0o555 && unix.Access(p, unix.R_OK|unix.X_OK) == nil
}
