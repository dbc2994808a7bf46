package hostprep

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/nvmock/nvmock/ibshim/umad"
)

// UninstallResult says what uninstall removed.
type UninstallResult struct {
	Nothing bool     // no manifest: nothing of nvmock's was installed in the root
	Removed []string // paths removed
	KeptFor string   // another owner's install, left alone (UninstallOwned)
	// TakenOver is the root whose install (the same owner's) took over the
	// CDI spec or NFD file: the node stays a GPU node, its labels stay.
	TakenOver string
	// Owner is the DaemonSet the removed install was recorded for ("":
	// a manual install).
	Owner string
}

// Uninstall removes what the root's manifest says install created: the CDI
// spec and NFD file, the driver symlink, the overlays, the manifest, and the
// directories install created if they are empty.
func Uninstall(rootDir string, progressTo io.Writer) (*UninstallResult, error) {
	return UninstallOwned(rootDir, "", progressTo)
}

// UninstallOwned is Uninstall on behalf of owner: an install another owner
// made (a node that moved to another pool, whose new pod installed while
// the old one's preStop waited for the lock) is left alone. "" uninstalls
// whoever installed.
func UninstallOwned(rootDir, owner string, progressTo io.Writer) (*UninstallResult, error) {
	log := progress{progressTo}
	root, err := filepath.Abs(rootDir)
	if err != nil {
		return nil, fmt.Errorf("root %s: %w", rootDir, err)
	}
	sweepRootTemps(root)
	if !isDir(root) {
		return &UninstallResult{Nothing: true}, nil
	}
	unlock, err := lock(root)
	if errors.Is(err, errRootGone) {
		return &UninstallResult{Nothing: true}, nil
	}
	if err != nil {
		return nil, err
	}
	sweepManifestTemps(root)
	m, err := readManifest(root)
	if err != nil {
		unlock()
		return nil, err
	}
	if m == nil {
		// Nothing says nvmock made the root (an install killed before it
		// recorded itself leaves it empty): it stays (review: a user's
		// empty directory was removed).
		unlock()
		return &UninstallResult{Nothing: true}, nil
	}
	if owner != "" && m.Owner != "" && m.Owner != owner {
		unlock()
		return &UninstallResult{KeptFor: m.Owner}, nil
	}
	res := &UninstallResult{Owner: m.Owner}
	var errs []error
	rm := func(p string, all bool) {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			return // not there: a read-only root would say EROFS for it
		}
		var err error
		if all {
			if _, err = os.Lstat(p); err == nil {
				err = os.RemoveAll(p)
			}
		} else {
			err = os.Remove(p)
		}
		switch {
		case err == nil:
			res.Removed = append(res.Removed, p)
			log.printf("removed %s", p)
		case errors.Is(err, syscall.ENOTEMPTY):
			// A directory of nvmock's that holds a user's files too.
			log.printf("kept %s: it holds files nvmock did not make", p)
		case !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, err)
		}
	}
	for _, f := range m.Files {
		if _, err := os.Lstat(f); err == nil && !unchanged(f, m) {
			if r, o := fileOwner(f); o != "" && o == m.Owner && r != root {
				res.TakenOver = r
				log.printf("left %s: the install at %s took it over", f, r)
				continue
			}
			if len(m.Sums[f]) == 0 {
				log.printf("left %s: the manifest has no checksum for it", f)
			} else {
				log.printf("left %s: changed since nvmock wrote it", f)
			}
			continue
		}
		rm(f, false)
	}
	driverLink := filepath.Join(root, "driver")
	if fi, err := os.Lstat(driverLink); err == nil && fi.Mode()&fs.ModeSymlink != 0 && ownLink(driverLink) {
		rm(driverLink, false)
	} else if err == nil {
		log.printf("left %s: nvmock did not make it", driverLink)
	}
	// A symlink planted at overlays or live would lead out of the root
	// (review): it is left, and nothing is removed through it.
	planted := func(p string) bool {
		fi, err := os.Lstat(p)
		if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			log.printf("left %s: a symlink nvmock did not make", p)
			return true
		}
		return false
	}
	overlays := filepath.Join(root, "overlays")
	var ents []os.DirEntry
	link := planted(overlays)
	if !link {
		ents, _ = os.ReadDir(overlays)
	}
	for _, e := range ents {
		if overlayName.MatchString(e.Name()) {
			rm(filepath.Join(overlays, e.Name()), true)
		}
	}
	if !link && os.Remove(overlays) == nil { // install's own, wherever it was made
		res.Removed = append(res.Removed, overlays)
		log.printf("removed %s", overlays)
	}
	for _, p := range sweepStaged(root, append(slices.Clone(m.Files), m.Pending...)...) {
		res.Removed = append(res.Removed, p)
		log.printf("removed %s: staged by an install that did not finish", p)
	}
	if !planted(filepath.Join(root, "live")) {
		for _, p := range stateFiles(root) {
			rm(p.path, p.all)
		}
	}
	// The directories install made, the CDI and NFD ones among them,
	// before the manifest that names them (a kill between leaves them
	// named), and under the lock: an install waiting for it sees the root
	// gone and makes it again.
	dirs := removeEmpty(m.Dirs)
	if len(errs) == 0 {
		rm(filepath.Join(root, ManifestFile), false)
		dirs = append(dirs, removeEmpty(m.Dirs)...)
	}
	for _, d := range dirs {
		res.Removed = append(res.Removed, d)
		log.printf("removed %s", d)
	}
	unlock()
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return res, errors.New(strings.Join(msgs, "; "))
	}
	return res, nil
}

// stateFiles are the node state's paths in the root, children first: the
// live state, its InfiniBand and started directories, xidlog's cursor, and
// the fabric daemon's socket; the directories go only if empty (all
// false).
func stateFiles(root string) []struct {
	path string
	all  bool
} {
	state := filepath.Join(root, StateFile)
	return []struct {
		path string
		all  bool
	}{
		{state, false}, {IBLiveDir(state), true}, {IBLiveDir(state) + ".new", true}, {StartedDir(state), true}, {InUseFile(state), false},
		{XIDLogCursor(state), false}, {XIDLogCursor(state) + ".lock", false}, {XIDLogCursor(state) + ".tmp", false},
		{filepath.Dir(state), false},
		{filepath.Join(root, IBSocket), false}, {filepath.Join(root, IBSocket) + umad.IDSuffix, false},
		{filepath.Dir(filepath.Join(root, IBSocket)), false},
	}
}
