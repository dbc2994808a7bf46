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

// Bound is an asset left empty in the overlay (Options.BindAssets), for the
// caller to bind over it.
type Bound struct {
	Path  string // relative to Overlay.Dir
	Asset string
}

// assetReader reads the files of the assets directory dir, or, with bind,
// only checks that they are files: nvmock exec binds them, and copying
// about 1.3 MB into every run's overlay was a sixth of its time. An assets
// directory on a noexec mount is read all the same: bound, its programs
// would keep the flag.
func assetReader(dir string, bind bool) func(path string) (asset, error) {
	if bind {
		var st unix.Statfs_t
		bind = unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_NOEXEC == 0
	}
	return func(p string) (asset, error) {
		if !bind {
			data, err := os.ReadFile(p)
			return asset{path: p, data: data}, err
		}
		fi, err := os.Stat(p)
		if err == nil && !fi.Mode().IsRegular() {
			why := error(syscall.EISDIR) // as reading it would say
			if !fi.IsDir() {
				why = errors.New("not a regular file")
			}
			err = &fs.PathError{Op: "read", Path: p, Err: why}
		}
		return asset{path: p, bound: true}, err
	}
}
