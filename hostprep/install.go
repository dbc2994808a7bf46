package hostprep

import (
	"cmp"
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

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"

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
	if o.Render.BindAssets { // the overlay would hold empty files, and its hash miss the assets
		return nil, errors.New("hostprep install: BindAssets is for a namespace that binds them; an install copies the assets")
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
	sweepRootTemps(root)
	for try := 0; ; try++ {
		c, err := makeRoot(root, o.Owner)
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
	if old != nil && old.rootOnly() {
		// The root a killed install made and nothing since: this is the
		// first install, which made those directories too.
		for _, d := range old.Dirs {
			if !slices.Contains(created, d) {
				created = append(created, d)
			}
		}
		slices.SortStableFunc(created, func(a, b string) int { return len(a) - len(b) }) // parents first
		old = nil
	}
	cdiPath := filepath.Join(o.CDIDir, CDIFile)
	nfdPath := filepath.Join(o.NFDDir, NFDFile)
	if cdiPath, err = filepath.Abs(cdiPath); err != nil {
		return nil, err
	}
	if nfdPath, err = filepath.Abs(nfdPath); err != nil {
		return nil, err
	}
	// An install records what it is about to make (directories, staged
	// copies beside these paths) before it makes it, so that uninstall
	// finds what one killed midway (SIGKILL, Ctrl-C) left: a first one at
	// once, so that the root it made is on record (uninstall keeps a root
	// no manifest names).
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
	driverLink := filepath.Join(root, "driver")
	if fi, err := os.Lstat(driverLink); err == nil && (fi.Mode()&fs.ModeSymlink == 0 || !ownLink(driverLink)) {
		return nil, fmt.Errorf("%s exists and is not nvmock's symlink; move it away", driverLink)
	}
	rel := filepath.Join("overlays", in.hash)
	statePath := filepath.Join(root, StateFile)
	if err := checkOwnTrees(root, statePath, old == nil); err != nil {
		return nil, err
	}
	if !live.IsState(statePath) {
		return nil, fmt.Errorf("%s exists and is not nvmock's live state; move it away", statePath)
	}
	ov := &Overlay{Dir: filepath.Join(root, rel), GPUs: in.ids, DevNodes: in.nodes, Snapshot: in.snap}
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
	_, serr := os.Lstat(statePath)
	stateMissing := os.IsNotExist(serr)
	if stateMissing {
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
	} else {
		why := "a new overlay"
		switch {
		case stateMissing:
			why = "a new node"
		case !stateKept:
			why = "it was of another nvmock's layout or GPU count"
		case installed && !stateDone:
			why = "the last reset was cut short"
		}
		before, _ := os.Stat(statePath)
		if err := resetState(statePath, in, o.Render.NodeName, why, log); err != nil {
			return nil, err
		}
		if after, err := os.Stat(statePath); err == nil && before != nil && !os.SameFile(before, after) {
			log.printf("the live state is a new file: restart processes that map the old one (a device plugin, an exporter) for them to see it")
		}
		// A state of another layout is a new file now: the overlay's link
		// must name it, or the library reads the old one (QA: an upgrade
		// left MIG off and ctl's loads unseen).
		if err := relink(filepath.Join(ov.Dir, StatePath), statePath); err != nil {
			return nil, err
		}
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
func resetState(statePath string, in *inputs, nodeName, why string, log progress) error {
	if err := live.Create(statePath, len(in.ids), StateSeed(nodeName)); err != nil {
		return err
	}
	log.printf("reset the live state %s (%s): MIG instances, loads, faults, processes and settings start afresh", statePath, why)
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
	if root == "/" {
		// Its driver, overlays and live directories are nvmock's to replace.
		return fmt.Errorf("the root is /; give a directory of nvmock's own (default %s)", DefaultRoot)
	}
	for _, d := range [][2]string{{"CDI", cdiDir}, {"NFD", nfdDir}} {
		if a, err := realPath(d[1]); err == nil && (a == root || strings.HasPrefix(a, root+"/")) {
			return fmt.Errorf("the %s directory %s is inside the root %s; give one outside it", d[0], d[1], root)
		}
	}
	cdi, err1 := realPath(cdiDir)
	nfd, err2 := realPath(nfdDir)
	if err1 == nil && err2 == nil && cdi == nfd {
		// nfd-worker reads every file in features.d as feature lines.
		return fmt.Errorf("the CDI directory and the NFD directory are both %s; give each its own", cdiDir)
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

// LoadedDriver is where a loaded NVIDIA kernel module shows
// (procRoot/driver/nvidia; "" procRoot is /proc), or "" for none.
func LoadedDriver(procRoot string) string {
	if procRoot == "" {
		procRoot = "/proc"
	}
	p := filepath.Join(procRoot, "driver", "nvidia")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// checkNoRealDriver refuses to shadow a loaded NVIDIA kernel module.
func checkNoRealDriver(procRoot string, force bool) error {
	p := LoadedDriver(procRoot)
	if p == "" || force {
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

// checkOwnTrees refuses what install would write, replace or remove
// through but did not make (review: symlinks planted in the root led
// install and uninstall out of it, and a first install emptied trees it
// had never made): a symlink at live, its state, its InfiniBand ports or
// overlays, and, where no install is recorded (first), entries already in
// overlays or the ports' tree.
func checkOwnTrees(root, statePath string, first bool) error {
	ib, overlays := IBLiveDir(statePath), filepath.Join(root, "overlays")
	for _, p := range []string{filepath.Dir(statePath), statePath, ib, overlays, StartedDir(statePath)} {
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symlink, not nvmock's; move it away", p)
		}
	}
	if !first {
		return nil
	}
	for _, d := range []string{overlays, ib} {
		if ents, err := os.ReadDir(d); err == nil && len(ents) > 0 {
			return fmt.Errorf("%s holds %s, and no install of nvmock is recorded in %s; move it away", d, ents[0].Name(), root)
		}
	}
	return nil
}
