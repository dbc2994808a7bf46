package hostprep

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/nvmock/nvmock/ibshim/fabric"
	ibsysfs "github.com/nvmock/nvmock/ibshim/sysfs"
	"github.com/nvmock/nvmock/pcisim"
)

// The live InfiniBand port state of a node sits beside its live state
// file, in IBLiveDir: the fabric it is for (IBLiveFabric, as FabricFile),
// its port faults (IBLiveFaults, which the fabric daemon follows) and its
// InfiniBand HCAs' ports directories, <hca>/ports, which the runtime hook
// and nvmock exec show over the PCI tree's.
const (
	IBLiveFabric = "fabric.json"
	IBLiveFaults = "faults.json"
)

// IBLiveDir is the live port state's directory of the node whose live
// state file is statePath.
func IBLiveDir(statePath string) string { return filepath.Join(filepath.Dir(statePath), "ib") }

// writeIBLive renders the node's live port state afresh, with the faults
// it was rendered with, over what was there in place: running containers
// bind-mount its HCAs' ports directories (the runtime hook), which must
// stay the same directories to show the new state. Without tables the
// ports' GID and P_Key tables are empty directories, where the sysfs view
// shows the tree's (nvmock exec: Options.SharedIBTables).
func writeIBLive(statePath string, ib *ibInputs, tables bool) error {
	dir := IBLiveDir(statePath)
	tmp := dir + ".new"
	os.RemoveAll(tmp)
	files := append(ibsysfs.LivePorts(ib.node, ib.fab, tables),
		pcisim.File{Path: IBLiveFabric, Data: ib.spec})
	faults, err := json.Marshal(ib.faults)
	if err != nil {
		return err
	}
	files = append(files, pcisim.File{Path: IBLiveFaults, Data: faults})
	err = pcisim.Write(files, tmp)
	for _, h := range ib.node.IB.HCAs {
		for _, t := range ibsysfs.Tables {
			if err == nil && !tables && ib.fab.Find(h.Name) != nil {
				err = os.Mkdir(filepath.Join(tmp, h.Name, "ports", "1", t), 0o755)
			}
		}
	}
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("live InfiniBand state %s: %w", dir, err)
	}
	if _, serr := os.Lstat(dir); errors.Is(serr, fs.ErrNotExist) {
		// A first render (every nvmock exec run) has no readers to
		// keep: one rename, not one a file.
		err = os.Rename(tmp, dir)
	} else {
		err = syncInto(tmp, dir)
	}
	os.RemoveAll(tmp)
	if err != nil {
		return fmt.Errorf("live InfiniBand state %s: %w", dir, err)
	}
	return nil
}

// syncInto moves the tree at src over dst: dst's directories stay, each
// file (or link) is replaced in one rename, so a reader never sees half
// of one, and what src lacks goes.
func syncInto(src, dst string) error {
	if fi, err := os.Lstat(dst); err == nil && !fi.IsDir() {
		if err := os.Remove(dst); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, e := range ents {
		keep[e.Name()] = true
		s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if e.IsDir() {
			if err := syncInto(s, d); err != nil {
				return err
			}
			continue
		}
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			if err := os.RemoveAll(d); err != nil {
				return err
			}
		}
		if err := os.Rename(s, d); err != nil {
			return err
		}
	}
	old, err := os.ReadDir(dst)
	if err != nil {
		return err
	}
	for _, e := range old {
		if !keep[e.Name()] {
			if err := os.RemoveAll(filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// IBFaults are the port faults the node whose live state is statePath has
// now.
func IBFaults(statePath string) ([]fabric.Fault, error) {
	b, err := os.ReadFile(filepath.Join(IBLiveDir(statePath), IBLiveFaults))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the node of %s has no InfiniBand (no %s)", statePath, filepath.Join(IBLiveDir(statePath), IBLiveFaults))
	}
	if err != nil {
		return nil, err
	}
	var faults []fabric.Fault
	if err := json.Unmarshal(b, &faults); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(IBLiveDir(statePath), IBLiveFaults), err)
	}
	return faults, nil
}

// SetIBFaults makes faults the port faults of the node whose live state
// is statePath, while it runs.
func SetIBFaults(statePath string, faults []fabric.Fault) error {
	return UpdateIBFaults(statePath, func(*fabric.Fabric, []fabric.Fault) ([]fabric.Fault, error) { return faults, nil })
}

// UpdateIBFaults changes the port faults of the node whose live state is
// statePath, while it runs: change gets the node's fabric, as its daemon
// has it, and the faults it has now, and returns the new ones. It holds
// the state's lock throughout, so two commands at once both count. The
// ports' sysfs files are written first (each replaced in one rename, so a
// reader never sees half of one), then the faults file, which tells the
// fabric daemon.
func UpdateIBFaults(statePath string, change func(f *fabric.Fabric, faults []fabric.Fault) ([]fabric.Fault, error)) error {
	dir := IBLiveDir(statePath)
	d, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the node of %s has no InfiniBand (no %s)", statePath, dir)
	}
	if err != nil {
		return err
	}
	defer d.Close()
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", dir, err)
	}
	spec, err := os.ReadFile(filepath.Join(dir, IBLiveFabric))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the node of %s has no InfiniBand", statePath)
	}
	if err != nil {
		return err
	}
	node, f, err := fabricOf(spec)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, IBLiveFabric), err)
	}
	faults, err := IBFaults(statePath)
	if err != nil {
		return err
	}
	if faults, err = change(f, faults); err != nil {
		return err
	}
	if err := f.Apply(faults); err != nil {
		return err
	}
	for _, h := range node.IB.HCAs {
		for _, pf := range ibsysfs.PortState(node, f, h.Name) {
			if err := writeAtomic(filepath.Join(dir, pf.Path), pf.Data, pcisim.Mode); err != nil {
				return err
			}
		}
	}
	b, err := json.Marshal(faults)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, IBLiveFaults), b, pcisim.Mode)
}
