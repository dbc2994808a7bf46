package live

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// Where a node's state is, in the order Find looks.
var (
	// ExecState is the state of the private node inside nvmock exec
	// (hostprep/nsexec.NamespaceDriver's etc/nvmock/state).
	ExecState = "/dev/.nvmock/driver/etc/nvmock/state"
	// InstalledState is an installed node's (hostprep.DefaultRoot plus
	// hostprep.StateFile), also inside the chart's pod, which mounts it.
	InstalledState = "/var/lib/nvmock/live/state"
)

// Find is the state file to work on: explicit, else $NVMOCK_STATE, else the
// one of nvmock exec's node when inside it, else the installed node's.
func Find(explicit string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if e := os.Getenv("NVMOCK_STATE"); e != "" {
		return e, nil
	}
	for _, p := range []string{ExecState, InstalledState} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no live state found (looked at $NVMOCK_STATE, %s and %s); install a node (nvmock hostprep install), run under nvmock exec, or give --state", ExecState, InstalledState)
}

// Boards reads the model's numbers for each GPU from the snapshot that goes
// with the state at path.
func Boards(path string) ([]Board, error) {
	devs, err := Snapshot(path)
	if err != nil {
		return nil, err
	}
	out := make([]Board, len(devs))
	for i := range devs {
		out[i] = BoardOf(&devs[i])
	}
	return out, nil
}

// Snapshot reads the records of the snapshot that goes with the state at
// path.
func Snapshot(path string) ([]snapshot.Device, error) {
	_, devs, err := readSnapshot(path)
	return devs, err
}

// snapshotPath is the snapshot that goes with the state at path.
func snapshotPath(path string) (string, error) {
	dir := filepath.Dir(path)
	// Beside it (exec, a snapshot used directly), or an installed node's:
	// the state in <root>/live, the snapshot in <root>/driver.
	cands := []string{filepath.Join(dir, "snapshot"), filepath.Join(filepath.Dir(dir), "driver", "etc", "nvmock", "snapshot")}
	if e := os.Getenv("NVMOCK_SNAPSHOT"); e != "" {
		cands = append([]string{e}, cands...)
	}
	for _, c := range cands {
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() {
			return c, nil
		}
	}
	return "", fmt.Errorf("state %s: no snapshot beside it (looked at %s); set NVMOCK_SNAPSHOT to the one the library reads", path, strings.Join(cands, ", "))
}

// readSnapshot reads the snapshot that goes with the state at path.
func readSnapshot(path string) (snapshot.Header, []snapshot.Device, error) {
	p, err := snapshotPath(path)
	if err != nil {
		return snapshot.Header{}, nil, err
	}
	return readSnapshotAt(p)
}

// readSnapshotAt reads the snapshot at p.
func readSnapshotAt(p string) (snapshot.Header, []snapshot.Device, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return snapshot.Header{}, nil, fmt.Errorf("snapshot %s: %w", p, err)
	}
	h, devs, err := snapshot.Read(data)
	if err != nil {
		return h, nil, fmt.Errorf("snapshot %s: %w", p, err)
	}
	return h, devs, nil
}

// AgreesWithSnapshot says when the snapshot that goes with the state at
// path has another GPU count than the state's header h: the library then
// leaves the state unread, and a change to it would do nothing (review:
// ctl took it silently). A damaged header, no snapshot found, or one
// unreadable, is nil: the commands say what they find of those.
func AgreesWithSnapshot(path string, h *Header) error {
	if checkHeader(path, h) != nil {
		return nil
	}
	gpus := h.Gpus
	p, err := snapshotPath(path)
	if err != nil {
		return nil
	}
	_, devs, err := readSnapshotAt(p)
	if err != nil || len(devs) == int(gpus) {
		return nil
	}
	return fmt.Errorf("state %s: made for %d GPUs, the snapshot %s has %d, so the library leaves it unread; make it again (nvmock ctl create) or reinstall the node", path, gpus, p, len(devs))
}
