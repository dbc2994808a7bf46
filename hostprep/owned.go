package hostprep

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The CDI spec and NFD file go in directories other programs and other
// installs share: install replaces only a file this root's manifest says
// it wrote, unchanged since, and uninstall removes only such a file.

func sum(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// ownerLine marks a file an install for an owner (a DaemonSet) wrote, with
// its root: the same owner's install at another root may take the file
// over. A helm upgrade that moves the overlay root runs the new pod beside
// the old (the DaemonSet surges), and the old pod's uninstall then finds
// the file changed and leaves it, with the node's labels.
func ownerLine(root, owner string) string {
	if owner == "" {
		return ""
	}
	return "# nvmock: installed at " + root + " for " + owner + "\n"
}

// fileOwner reads a file's ownerLine (among its first lines): the root and
// owner, or "".
func fileOwner(path string) (root, owner string) {
	f, err := os.Open(path)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	buf := make([]byte, 4096)
	n, _ := f.Read(buf)
	for i, l := range strings.SplitN(string(buf[:n]), "\n", 4) {
		if rest, ok := strings.CutPrefix(l, "# nvmock: installed at "); ok && i < 3 {
			if r, o, ok := strings.Cut(rest, " for "); ok {
				return r, o
			}
		}
	}
	return "", ""
}

// checkOwned says why install must not replace the file at path with data,
// or nil: nothing there, the same content, this root's file as written, or
// a file the same owner's install wrote at another root.
func checkOwned(path string, data []byte, old *Manifest, owner string) error {
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
	if _, o := fileOwner(path); owner != "" && o == owner && (old == nil || !slices.Contains(old.Files, path)) {
		return nil
	}
	if old == nil || !slices.Contains(old.Files, path) {
		return fmt.Errorf("%s exists and this install did not write it (another root's, or yours); move it away or pass another directory", path)
	}
	if len(old.Sums[path]) == 0 && !legacyOwned(path, old) {
		return fmt.Errorf("%s: the manifest has no checksum for it, so it may not be nvmock's; move it away to let install write it", path)
	}
	if !unchanged(path, old) {
		return fmt.Errorf("%s was changed since nvmock wrote it; move it away to let install write it again", path)
	}
	return nil
}

// unchanged says whether the file at path is as the manifest recorded it.
// A file it has no sum for is not known to be nvmock's: kept (a manifest
// edited by hand), unless the manifest is older than sums and the file
// holds what such an install wrote (legacyOwned).
func unchanged(path string, m *Manifest) bool {
	if m.Sums == nil {
		return legacyOwned(path, m)
	}
	want := m.Sums[path]
	b, err := os.ReadFile(path)
	return err == nil && slices.Contains(want, sum(b))
}

// legacyOwned says whether path, named by a manifest older than sums
// (nvmock before 2026-12-04 wrote none), holds what such an install wrote
// there: the CDI spec under nvmock's header line, or the NFD file of
// nvidia.com labels alone. Anything else is a user's, and kept. Without
// this an upgraded node's uninstall left both, with the node's labels.
func legacyOwned(path string, m *Manifest) bool {
	if m.Sums != nil || !slices.Contains(m.Files, path) {
		return false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	switch filepath.Base(path) {
	case CDIFile:
		return bytes.HasPrefix(b, []byte(cdiHeader)) // those installs wrote no owner line
	case NFDFile:
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		for _, l := range lines {
			if k, _, ok := strings.Cut(l, "="); !ok || !strings.HasPrefix(k, "nvidia.com/") {
				return false
			}
		}
		return len(b) > 0
	}
	return false
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
	if errors.Is(err, errRootGone) {
		return false, nil // uninstalled while it waited
	}
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
