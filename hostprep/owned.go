package hostprep

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// The CDI spec and NFD file go in directories other programs and other
// installs share: install replaces only a file this root's manifest says
// it wrote, unchanged since, and uninstall removes only such a file.

func sum(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// checkOwned says why install must not replace the file at path with data,
// or nil: nothing there, the same content, or this root's file as written.
func checkOwned(path string, data []byte, old *Manifest) error {
	fi, err := os.Lstat(path)
	if os.IsNotExist(err) || fileIs(path, data) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s exists and is not a file; move it away", path)
	}
	if old == nil || !slices.Contains(old.Files, path) {
		return fmt.Errorf("%s exists and this install did not write it (another root's, or yours); move it away or pass another directory", path)
	}
	if !unchanged(path, old) {
		return fmt.Errorf("%s was changed since nvmock wrote it; move it away to let install write it again", path)
	}
	return nil
}

// unchanged says whether the file at path is as the manifest recorded it
// (true when it recorded no sum: an older install's manifest).
func unchanged(path string, m *Manifest) bool {
	want := m.Sums[path]
	if len(want) == 0 {
		return true
	}
	b, err := os.ReadFile(path)
	return err == nil && slices.Contains(want, sum(b))
}

func (m *Manifest) write(root string) error {
	b, _ := json.MarshalIndent(m, "", "  ")
	return writeAtomic(filepath.Join(root, ManifestFile), append(b, '\n'), 0o644)
}

// HandOver makes the install in rootDir to's, when from made it: a leaving
// pod keeps the install for another pool's DaemonSet, whose pod installs
// over it; if that pod installed first, its own leaving must find it its
// own, or the install would never be removed. Under the install lock.
func HandOver(rootDir, from, to string) (bool, error) {
	if _, err := os.Stat(rootDir); os.IsNotExist(err) {
		return false, nil // nothing installed
	}
	unlock, err := lock(rootDir)
	if err != nil {
		return false, err
	}
	defer unlock()
	m, err := readManifest(rootDir)
	if err != nil || m == nil || m.Owner != from {
		return false, err
	}
	m.Owner = to
	return true, m.write(rootDir)
}
