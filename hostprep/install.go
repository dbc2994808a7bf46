package hostprep

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/nvmock/nvmock/ibshim/umad"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/live"
)

// Defaults of the install command.
const (
	DefaultRoot   = "/var/lib/nvmock"
	DefaultCDIDir = "/var/run/cdi"
	DefaultNFDDir = "/etc/kubernetes/node-feature-discovery/features.d"
)

// ManifestFile, in the root, lists what install created, for uninstall.
const ManifestFile = "hostprep.json"

// InstallOptions say what to install where.
type InstallOptions struct {
	Render   Options
	Root     string    // holds overlays/<hash>, the driver symlink and the manifest
	CDIDir   string    // gets CDIFile
	NFDDir   string    // gets NFDFile
	ProcRoot string    // where a loaded NVIDIA driver shows (ProcRoot/driver/nvidia); "" is /proc
	Force    bool      // install even where a real NVIDIA driver is loaded
	Progress io.Writer // one line per step; nil for none
	Owner    string    // recorded in the manifest (Manifest.Owner); "" for none
}

// Result says what install did.
type Result struct {
	Unchanged bool   // the same inputs were already installed; nothing was touched
	Driver    string // Root/driver, the driver root to point tools at
	Overlay   string // Root/overlays/<hash>
	Hash      string
	CDIFile   string
	NFDFile   string
	GPUs      []snapshot.Identity
	Removed   []string // old overlays and files replaced by this install
}

// Manifest is what install created, so that uninstall removes exactly that.
type Manifest struct {
	Version int      `json:"version"`
	Overlay string   `json:"overlay"` // overlays/<hash>, relative to the root
	Files   []string `json:"files"`   // absolute: the CDI spec and the NFD file
	Dirs    []string `json:"dirs"`    // absolute: directories install created, parents first
	// Sums are the SHA-256s each file may have as nvmock wrote it (while
	// an install runs: the old and the new): uninstall leaves a file
	// changed since. Absent in older manifests.
	Sums map[string][]string `json:"sums,omitempty"`
	// Owner is who installed (the chart's DaemonSet, NAMESPACE/NAME); an
	// uninstall on behalf of another owner leaves the install alone.
	Owner string `json:"owner,omitempty"`
	// Pending are the CDI spec and NFD file an install under way is about
	// to write: one killed before it recorded Files left at most staged
	// copies beside them, which uninstall removes.
	Pending []string `json:"pending,omitempty"`
	// Resetting says an install switched to Overlay and had not finished
	// resetting the live state (its MIG layout, its InfiniBand ports) when
	// it stopped: the next install resets it again.
	Resetting bool `json:"resetting,omitempty"`
}

var overlayName = regexp.MustCompile(`^([0-9a-f]{16}|\.render-.*)$`)

// Install renders the overlay into Root/overlays/<hash of inputs>, points
// Root/driver at it with one rename(2), writes the CDI spec and NFD file
// (each temp + rename) and removes the overlay it replaced. With the same
// inputs installed already it touches nothing and says Unchanged.
func Install(o InstallOptions) (res *Result, err error) {
	log := progress{o.Progress}
	if o.Root == "" || o.CDIDir == "" || o.NFDDir == "" {
		return nil, errors.New("root, CDI and NFD directories are required")
	}
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return nil, fmt.Errorf("root %s: %w", o.Root, err)
	}
	if err := CheckDirs(root, o.CDIDir, o.NFDDir); err != nil {
		return nil, err
	}
	if err := checkNoRealDriver(o.ProcRoot, o.Force); err != nil {
		return nil, err
	}
	if err := checkMajors(o.ProcRoot); err != nil {
		return nil, err
	}
	// Overlays come and go; the live state stays in the root.
	o.Render.StateLink = filepath.Join(root, StateFile)
	in, err := gather(o.Render)
	if err != nil {
		return nil, err
	}
	in.hash = in.inputsHash()

	var created []string
	var unlock func()
	for try := 0; ; try++ {
		c, err := mkdirAll(root)
		if err != nil {
			removeEmpty(created)
			return nil, fmt.Errorf("create root %s: %w", root, err)
		}
		for _, d := range c { // parents made in an earlier try may be gone too
			if !slices.Contains(created, d) {
				created = append(created, d)
			}
		}
		unlock, err = lock(root)
		if errors.Is(err, errRootGone) && try < 10 {
			continue // an uninstall removed it: make it again
		}
		if err != nil {
			removeEmpty(created)
			return nil, err
		}
		break
	}
	defer unlock()
	var fresh string  // an overlay this call rendered and nothing points at yet
	newState := false // a live state this call made and no manifest records yet
	var old *Manifest
	pending := false // the manifest says this install is under way
	// Runs before unlock: a waiting install or uninstall finds the root
	// as it was.
	defer func() {
		if err != nil { // leave nothing behind a failed install: no new overlay, no empty directories
			if fresh != "" {
				os.RemoveAll(fresh)
			}
			if pending && old == nil {
				os.Remove(filepath.Join(root, ManifestFile))
			} else if pending {
				old.write(root)
			}
			if newState {
				for _, p := range stateFiles(root) {
					if p.all {
						os.RemoveAll(p.path)
					} else {
						os.Remove(p.path)
					}
				}
			}
			removeEmpty(created)
		}
	}()

	sweepManifestTemps(root)
	if old, err = readManifest(root); err != nil {
		return nil, err
	}
	driverLink := filepath.Join(root, "driver")
	if fi, err := os.Lstat(driverLink); err == nil && (fi.Mode()&fs.ModeSymlink == 0 || !ownLink(driverLink)) {
		return nil, fmt.Errorf("%s exists and is not nvmock's symlink; move it away", driverLink)
	}
	rel := filepath.Join("overlays", in.hash)
	statePath := filepath.Join(root, StateFile)
	if !live.IsState(statePath) {
		return nil, fmt.Errorf("%s exists and is not nvmock's live state; move it away", statePath)
	}
	ov := &Overlay{Dir: filepath.Join(root, rel), GPUs: in.ids, DevNodes: in.nodes, Snapshot: in.snap}
	cdiPath := filepath.Join(o.CDIDir, CDIFile)
	nfdPath := filepath.Join(o.NFDDir, NFDFile)
	if cdiPath, err = filepath.Abs(cdiPath); err != nil {
		return nil, err
	}
	if nfdPath, err = filepath.Abs(nfdPath); err != nil {
		return nil, err
	}
	cdiData, err := CDIYAML(CDISpec(ov, driverLink))
	cdiData = append([]byte(ownerLine(root, o.Owner)), cdiData...)
	if err != nil {
		return nil, err
	}
	nfdData := []byte(ownerLine(root, o.Owner) + NFDFeatures(o.Render.Profile))
	// What an install killed before left: staged copies, renders.
	staging := []string{cdiPath, nfdPath}
	if old != nil {
		staging = append(append(staging, old.Files...), old.Pending...)
	}
	sweepStaged(root, staging...)
	sweepRenders(filepath.Join(root, "overlays"))
	// An install records what it is about to make (directories, staged
	// copies beside these paths) before it makes it, so that uninstall
	// finds what one killed midway (SIGKILL, Ctrl-C) left.
	recordPending := func() error {
		p := Manifest{Version: 1, Owner: o.Owner}
		if old != nil {
			p = *old
			p.Files, p.Pending = slices.Clone(old.Files), slices.Clone(old.Pending)
		}
		p.Dirs = slices.Clone(p.Dirs)
		for _, d := range created {
			if !slices.Contains(p.Dirs, d) {
				p.Dirs = append(p.Dirs, d)
			}
		}
		for _, f := range []string{cdiPath, nfdPath} {
			if !slices.Contains(p.Pending, f) {
				p.Pending = append(p.Pending, f)
			}
		}
		pending = true
		return p.write(root)
	}
	if old == nil {
		if err := recordPending(); err != nil {
			return nil, err
		}
	}
	res = &Result{Driver: driverLink, Overlay: ov.Dir, Hash: in.hash, CDIFile: cdiPath, NFDFile: nfdPath, GPUs: in.ids}

	// What the driver link points at is installed; the manifest may name
	// an install that failed before its switch. Its live state is done
	// unless a reset for it was cut short.
	installed := linkIs(driverLink, filepath.Join(rel, "driver"))
	stateDone := old != nil && !(old.Resetting && old.Overlay == rel)
	if installed && stateDone && old.Overlay == rel && old.Owner == o.Owner &&
		in.verify(ov.Dir) == nil && slices.Equal(old.Files, []string{cdiPath, nfdPath}) &&
		fileIs(cdiPath, cdiData) && fileIs(nfdPath, nfdData) && stateOK(statePath, len(in.ids)) {
		res.Unchanged = true
		// Overlays kept for containers that have gone since.
		res.Removed = removeOldOverlays(filepath.Join(root, "overlays"), in.hash, statePath, log)
		return res, nil
	}

	// Stage the CDI spec and NFD file next to their final names; check the
	// spec as a CDI runtime will read it before anything switches.
	var staged []string
	defer func() {
		for _, s := range staged {
			os.Remove(s)
		}
	}()
	stage := func(path string, data []byte) (string, error) {
		if err := checkOwned(path, data, old, o.Owner); err != nil {
			return "", err
		}
		if fileIs(path, data) {
			return "", nil // already right: leave it (and its mtime) alone
		}
		created = append(created, missingDirs(filepath.Dir(path))...)
		if err := recordPending(); err != nil {
			return "", err
		}
		if _, err := mkdirAll(filepath.Dir(path)); err != nil {
			return "", fmt.Errorf("create %s: %w", filepath.Dir(path), err)
		}
		tmp, err := tempFile(path, stagePrefix(root, path), data, 0o644)
		if err != nil {
			return "", err
		}
		staged = append(staged, tmp)
		return tmp, nil
	}
	cdiTmp, err := stage(cdiPath, cdiData)
	if err != nil {
		return nil, err
	}
	if _, err := cdi.ReadSpec(cmp.Or(cdiTmp, cdiPath), 0); err != nil {
		return nil, fmt.Errorf("CDI spec for %s does not validate: %w", cdiPath, err)
	}
	nfdTmp, err := stage(nfdPath, nfdData)
	if err != nil {
		return nil, err
	}

	// Render beside the final place, then rename: a half-written overlay
	// never carries a hash name.
	overlays := filepath.Join(root, "overlays")
	c, err := mkdirAll(overlays)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", overlays, err)
	}
	created = append(created, c...)
	// The state must be there for the overlay to link to it. One of
	// another layout is reset only below, once the overlay is there: the
	// installed overlay links to it too, and keeps it if this install fails.
	stateKept := stateOK(statePath, len(in.ids))
	if _, err := os.Lstat(statePath); os.IsNotExist(err) {
		newState = true
		if err := live.Create(statePath, len(in.ids), StateSeed(o.Render.NodeName)); err != nil {
			return nil, err
		}
	}
	verr := in.verify(ov.Dir)
	if verr == nil {
		log.printf("overlay %s already rendered", ov.Dir)
	} else {
		tmp, err := os.MkdirTemp(overlays, ".render-"+in.hash+"-")
		if err != nil {
			return nil, fmt.Errorf("render overlay in %s: %w", overlays, err)
		}
		log.printf("rendering %d GPUs (%s) into %s", len(in.ids), o.Render.Profile.Name, ov.Dir)
		if err := renderInto(in, tmp, ov.Dir); err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
		if !linkIs(driverLink, filepath.Join(rel, "driver")) {
			fresh = ov.Dir
		}
	}

	// A new overlay starts from a fresh live state, reset in place so that
	// running processes that mapped it see the reset. The same overlay
	// installed again (for another owner: a pool renamed, a node moved to
	// another pool of the same board) keeps it: MIG instances, loads and
	// processes stay, as on the GPUs, and running containers keep their
	// InfiniBand ports; so does the same overlay rendered again to repair
	// it (a file of it changed), as a damaged driver file resets no GPU.
	// The reset comes after the switch, so an install that fails before it
	// leaves the installed node's state alone.
	_, ibErr := os.Stat(IBLiveDir(statePath))
	keepState := installed && stateDone && stateKept && (in.ib == nil || ibErr == nil)
	// The fabric daemon's socket directory: GPU containers mount it, so it
	// must be there before the daemon is.
	if in.ib != nil {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, IBSocket)), 0o755); err != nil {
			return nil, err
		}
	} else {
		os.Remove(filepath.Dir(filepath.Join(root, IBSocket))) // an InfiniBand profile's before, if empty
	}

	// Recorded before the switch and the renames: whatever fails from
	// here on, uninstall finds all of it.
	// Until this install is done, the manifest also names what the last
	// one wrote: the files may still hold it, or be in other directories.
	m := Manifest{Version: 1, Overlay: rel, Files: []string{cdiPath, nfdPath},
		Sums: map[string][]string{cdiPath: {sum(cdiData)}, nfdPath: {sum(nfdData)}}, Owner: o.Owner}
	final := m
	m.Resetting = !keepState
	if old != nil {
		m.Dirs = old.Dirs
	}
	for _, d := range created {
		if !slices.Contains(m.Dirs, d) {
			m.Dirs = append(m.Dirs, d)
		}
	}
	final.Dirs = m.Dirs
	m.Files, m.Sums = slices.Clone(m.Files), maps.Clone(m.Sums)
	for _, f := range [][2]string{{cdiTmp, cdiPath}, {nfdTmp, nfdPath}} {
		if b, err := os.ReadFile(f[1]); f[0] != "" && err == nil {
			m.Sums[f[1]] = append(slices.Clone(m.Sums[f[1]]), sum(b))
		}
	}
	if old != nil {
		for _, f := range old.Files {
			if !slices.Contains(m.Files, f) {
				m.Files = append(m.Files, f)
				m.Sums[f] = old.Sums[f]
			}
		}
	}
	if err := m.write(root); err != nil {
		return nil, err
	}
	created, newState, pending = nil, false, false // recorded: uninstall removes them

	// Switch: one rename of a fresh symlink.
	target := filepath.Join(rel, "driver")
	if !linkIs(driverLink, target) {
		tmpLink := filepath.Join(root, ".driver-"+in.hash)
		os.Remove(tmpLink)
		if err := os.Symlink(target, tmpLink); err != nil {
			return nil, err
		}
		if err := os.Rename(tmpLink, driverLink); err != nil {
			os.Remove(tmpLink)
			return nil, fmt.Errorf("switch %s: %w", driverLink, err)
		}
		log.printf("switched %s -> %s", driverLink, target)
	}
	fresh = ""

	for _, f := range [][2]string{{cdiTmp, cdiPath}, {nfdTmp, nfdPath}} {
		if f[0] == "" {
			continue
		}
		if err := os.Rename(f[0], f[1]); err != nil {
			return nil, err
		}
		log.printf("wrote %s", f[1])
	}
	staged = nil
	if keepState {
		log.printf("kept the live state %s", statePath)
	} else if err := resetState(statePath, in, o.Render.NodeName, log); err != nil {
		return nil, err
	}

	// Only now is the old overlay unreferenced.
	if old != nil {
		for _, f := range old.Files {
			if slices.Contains(final.Files, f) {
				continue
			}
			if _, err := os.Lstat(f); err == nil && !unchanged(f, old) {
				log.printf("left %s: changed since nvmock wrote it", f)
				continue
			}
			if os.Remove(f) == nil {
				res.Removed = append(res.Removed, f)
				log.printf("removed %s", f)
			}
		}
	}
	if !reflect.DeepEqual(m, final) {
		if err := final.write(root); err != nil {
			return nil, err
		}
	}
	res.Removed = append(res.Removed, removeOldOverlays(overlays, in.hash, statePath, log)...)
	return res, nil
}

// resetState starts the live state afresh for the overlay in: in place,
// then its MIG layout and InfiniBand ports.
func resetState(statePath string, in *inputs, nodeName string, log progress) error {
	if err := live.Create(statePath, len(in.ids), StateSeed(nodeName)); err != nil {
		return err
	}
	log.printf("reset the live state %s", statePath)
	if err := in.mig.apply(statePath); err != nil {
		return err
	}
	if in.ib != nil {
		if err := writeIBLive(statePath, in.ib, true); err != nil {
			return err
		}
	} else {
		os.RemoveAll(IBLiveDir(statePath)) // a profile that had InfiniBand before
	}
	if in.mig != nil {
		log.printf("partitioned the GPUs: MIG layout %s", in.mig.layout.Spec)
	}
	return nil
}

// removeOldOverlays removes the overlays other than current, except those
// running containers use (InUseFile), which a later install removes.
func removeOldOverlays(overlays, current, statePath string, log progress) []string {
	var removed []string
	inUse := readInUse(statePath)
	ents, _ := os.ReadDir(overlays)
	for _, e := range ents {
		if e.Name() != current && overlayName.MatchString(e.Name()) {
			p := filepath.Join(overlays, e.Name())
			if inUse[e.Name()] {
				log.printf("kept old overlay %s: running containers use it (%s); a later install removes it", p, InUseFile(statePath))
				continue
			}
			if err := os.RemoveAll(p); err != nil {
				log.printf("could not remove old overlay %s: %v", p, err)
				continue
			}
			removed = append(removed, p)
			log.printf("removed old overlay %s", p)
		}
	}
	return removed
}

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
		// An install killed before it recorded itself made at most the
		// root; an empty root is nothing to keep. Removed under the lock,
		// as below.
		res := &UninstallResult{Nothing: true}
		if os.Remove(root) == nil {
			res.Removed = append(res.Removed, root)
			log.printf("removed %s: empty", root)
		}
		unlock()
		return res, nil
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
	overlays := filepath.Join(root, "overlays")
	ents, _ := os.ReadDir(overlays)
	for _, e := range ents {
		if overlayName.MatchString(e.Name()) {
			rm(filepath.Join(overlays, e.Name()), true)
		}
	}
	if os.Remove(overlays) == nil { // install's own, wherever it was made
		res.Removed = append(res.Removed, overlays)
		log.printf("removed %s", overlays)
	}
	for _, p := range sweepStaged(root, append(slices.Clone(m.Files), m.Pending...)...) {
		res.Removed = append(res.Removed, p)
		log.printf("removed %s: staged by an install that did not finish", p)
	}
	for _, p := range stateFiles(root) {
		rm(p.path, p.all)
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

// renderInto renders in tmp and moves the tree to dir. A damaged overlay
// already at dir (one that failed verify) is swapped out in one
// renameat2(RENAME_EXCHANGE), so the driver symlink never dangles, and
// removed.
func renderInto(in *inputs, tmp, dir string) error {
	if _, err := in.render(tmp); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if _, err := os.Lstat(dir); err != nil {
		return os.Rename(tmp, dir)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE); err != nil {
		// No exchange on this file system: move the damaged tree aside first.
		aside := tmp + "-damaged"
		if err := os.Rename(dir, aside); err != nil {
			return fmt.Errorf("replace damaged overlay %s: %w", dir, err)
		}
		if err := os.Rename(tmp, dir); err != nil {
			return err
		}
		return os.RemoveAll(aside)
	}
	return os.RemoveAll(tmp) // now the damaged tree
}

// CheckDirs refuses CDI and NFD directories inside the root: overlays come
// and go there, and what is in them goes with them.
func CheckDirs(root, cdiDir, nfdDir string) error {
	for _, d := range [][2]string{{"root", root}, {"CDI directory", cdiDir}, {"NFD directory", nfdDir}} {
		if fi, err := os.Stat(d[1]); err == nil && !fi.IsDir() {
			return fmt.Errorf("the %s %s is not a directory", d[0], d[1])
		}
	}
	root, err := realPath(root)
	if err != nil {
		return err
	}
	for _, d := range [][2]string{{"CDI", cdiDir}, {"NFD", nfdDir}} {
		if a, err := realPath(d[1]); err == nil && (a == root || strings.HasPrefix(a, root+"/")) {
			return fmt.Errorf("the %s directory %s is inside the root %s; give one outside it", d[0], d[1], root)
		}
	}
	return nil
}

// realPath is p absolute, with the symlinks of the part that exists
// resolved (/var/run is /run on most systems).
func realPath(p string) (string, error) {
	p, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rest := ""
	for d := p; ; d = filepath.Dir(d) {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			return filepath.Join(r, rest), nil
		}
		if d == filepath.Dir(d) {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(d), rest)
	}
}

// checkNoRealDriver refuses to shadow a loaded NVIDIA kernel module.
func checkNoRealDriver(procRoot string, force bool) error {
	if procRoot == "" {
		procRoot = "/proc"
	}
	p := filepath.Join(procRoot, "driver", "nvidia")
	if _, err := os.Stat(p); err != nil || force {
		return nil
	}
	return fmt.Errorf("a real NVIDIA driver is loaded (%s exists); installing the mock would shadow it; pass --force to install anyway", p)
}

type progress struct{ w io.Writer }

func (p progress) printf(format string, args ...any) {
	if p.w != nil {
		fmt.Fprintf(p.w, "hostprep: "+format+"\n", args...)
	}
}

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
