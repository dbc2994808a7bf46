package hostprep

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/nvmock/nvmock/live"
)

// lock serializes installs and uninstalls of one root (flock on the
// directory itself, so no lock file is left to clean up).
func lock(root string) (func(), error) {
	f, err := os.Open(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("lock %s: %w", root, errRootGone)
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", root, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", root, err)
	}
	// An uninstall that held the lock may have removed the root.
	held, err1 := f.Stat()
	now, err2 := os.Stat(root)
	if err1 != nil || err2 != nil || !os.SameFile(held, now) {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", root, errRootGone)
	}
	return func() { f.Close() }, nil
}

// errRootGone: the root was removed while lock waited for it.
var errRootGone = errors.New("removed while waiting for the lock")

func readManifest(root string) (*Manifest, error) {
	p := filepath.Join(root, ManifestFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil || m.Version != 1 {
		return nil, fmt.Errorf("%s is not an nvmock hostprep manifest (version 1); remove it by hand if nvmock did not write it", p)
	}
	return &m, nil
}

// missingDirs are the directories mkdirAll(dir) would create, parents
// first.
func missingDirs(dir string) []string {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		missing = append(missing, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	slices.Reverse(missing)
	return missing
}

// mkdirAll is os.MkdirAll that returns the directories it created, parents
// first.
func mkdirAll(dir string) ([]string, error) {
	var created []string
	for _, d := range missingDirs(dir) {
		if err := os.Mkdir(d, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) && isDir(d) {
				continue
			}
			removeEmpty(created)
			return nil, err
		}
		created = append(created, d)
	}
	return created, nil
}

// makeRoot makes the root, if missing, with a manifest of the directories
// it made already in it: made beside it and renamed into place, so that an
// install killed at any point leaves a root uninstall knows is nvmock's
// (review: one killed between making it and recording itself left an
// empty root, which uninstall keeps, as it may be a user's).
func makeRoot(root, owner string) ([]string, error) {
	if isDir(root) {
		return nil, nil
	}
	created, err := mkdirAll(filepath.Dir(root))
	if err != nil {
		return nil, err
	}
	tmp := newRootTemp(root, os.Getpid())
	os.RemoveAll(tmp) // a killed install's of a reused pid
	if err := os.Mkdir(tmp, 0o755); err != nil {
		removeEmpty(created)
		return nil, err
	}
	m := Manifest{Version: 1, Owner: owner, Dirs: append(slices.Clone(created), root)}
	if err := m.write(tmp); err != nil {
		os.RemoveAll(tmp)
		removeEmpty(created)
		return nil, err
	}
	if err := os.Rename(tmp, root); err != nil {
		os.RemoveAll(tmp)
		if isDir(root) {
			return created, nil // another install made it meanwhile
		}
		removeEmpty(created)
		return nil, err
	}
	return append(created, root), nil
}

// newRootTemp is where a pid's install makes a missing root before
// renaming it into place.
func newRootTemp(root string, pid int) string {
	return filepath.Join(filepath.Dir(root), fmt.Sprintf(".%s.nvmock-new-%d", filepath.Base(root), pid))
}

// sweepRootTemps removes the roots killed installs were making beside
// root, and the parents their manifests say they made; not one whose
// install still runs.
func sweepRootTemps(root string) {
	old, _ := filepath.Glob(filepath.Join(filepath.Dir(root), "."+filepath.Base(root)+".nvmock-new-*"))
	for _, d := range old {
		pid, err := strconv.Atoi(d[strings.LastIndex(d, "-")+1:])
		if err != nil || pid <= 0 || pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue
		}
		m, _ := readManifest(d)
		os.RemoveAll(d)
		if m != nil {
			removeEmpty(m.Dirs) // the root among them is not there: no matter
		}
	}
}

// rootOnly says whether m records no more than a root makeRoot made.
func (m *Manifest) rootOnly() bool {
	return m.Overlay == "" && len(m.Files) == 0 && len(m.Pending) == 0
}

// removeEmpty removes the given directories, children first, where empty.
func removeEmpty(dirs []string) []string {
	var removed []string
	for i := len(dirs) - 1; i >= 0; i-- {
		if os.Remove(dirs[i]) == nil {
			removed = append(removed, dirs[i])
		}
	}
	return removed
}

// stagePrefix names the copies of path an install of root stages: they
// carry the root, so that a later install or uninstall of that root, and
// of no other sharing the directory, removes those a killed one left.
func stagePrefix(root, path string) string {
	h := sha256.Sum256([]byte(root))
	return "." + filepath.Base(path) + ".nvmock-" + hex.EncodeToString(h[:4]) + "."
}

// sweepStaged removes root's staged copies of paths and returns them.
func sweepStaged(root string, paths ...string) []string {
	var removed []string
	for _, p := range paths {
		old, _ := filepath.Glob(filepath.Join(filepath.Dir(p), stagePrefix(root, p)+"*"))
		for _, f := range old {
			if os.Remove(f) == nil {
				removed = append(removed, f)
			}
		}
	}
	return removed
}

// sweepManifestTemps removes copies of the manifest a killed write left.
func sweepManifestTemps(root string) {
	old, _ := filepath.Glob(filepath.Join(root, "."+ManifestFile+".*"))
	for _, f := range old {
		os.Remove(f)
	}
}

// sweepRenders removes overlays a killed install was rendering. Under the
// install lock no render runs.
func sweepRenders(overlays string) {
	old, _ := filepath.Glob(filepath.Join(overlays, ".render-*"))
	for _, d := range old {
		os.RemoveAll(d)
	}
}

// tempFile writes data beside path, under prefix (a name starting with
// "."), and returns the name.
func tempFile(path, prefix string, data []byte, mode os.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), prefix+"*")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return f.Name(), nil
}

// writeAtomic replaces path in one rename, so a reader never sees half a file.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := tempFile(path, "."+filepath.Base(path)+".", data, mode)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ownLink says whether the symlink at link is one install makes: to
// overlays/<hash>/driver.
func ownLink(link string) bool {
	t, err := os.Readlink(link)
	dir, base := filepath.Split(filepath.Dir(t))
	return err == nil && filepath.Base(t) == "driver" && filepath.Clean(dir) == "overlays" && overlayName.MatchString(base)
}

func linkIs(link, target string) bool {
	t, err := os.Readlink(link)
	return err == nil && t == target
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func fileIs(p string, data []byte) bool {
	b, err := os.ReadFile(p)
	return err == nil && bytes.Equal(b, data)
}

// stateOK says whether the live state at path is one for gpus GPUs.
func stateOK(path string, gpus int) bool {
	f, err := live.OpenRead(path) // a read-only root's unchanged install stays one
	if err != nil {
		return false
	}
	defer f.Close()
	h := f.Read().Header
	return h.Version == live.Version && int(h.Gpus) == gpus
}

// relink makes link a hard link to target, replacing in one rename
// whatever it named.
func relink(link, target string) error {
	t, err := os.Stat(target)
	if err != nil {
		return err
	}
	if l, err := os.Stat(link); err == nil && os.SameFile(l, t) {
		return nil
	}
	tmp := link + ".new"
	os.Remove(tmp)
	if err := os.Link(target, tmp); err != nil {
		return fmt.Errorf("link %s: %w", link, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("link %s: %w", link, err)
	}
	return nil
}
