package inject

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// ControlNodes are the overlay's nodes every container with a GPU gets:
// NVIDIA's runtime gives nvidia-modeset too where the node has it (its CDI
// spec's common device nodes), as the overlay does.
var ControlNodes = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}

// NodeStateFromOverlay reads the overlay that `nvmock hostprep install`
// put under root (default /var/lib/nvmock): the GPUs from its snapshot and
// the device numbers from stat(2) of root/driver/dev/*. Host paths go
// through the stable root/driver symlink, as the CDI spec's do; Overlay
// records what it pointed at, so a caller can notice a switch and probe
// again. RealDriver is read from /proc; the caller fills InUse and OptedIn.
func NodeStateFromOverlay(root string) (NodeState, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return NodeState{}, fmt.Errorf("probe overlay in %s: %w", root, err)
	}
	if _, err := os.Stat(filepath.Join(root, hostprep.ManifestFile)); err != nil {
		return NodeState{}, fmt.Errorf("probe overlay in %s: no %s (run nvmock hostprep install): %w", root, hostprep.ManifestFile, errors.Unwrap(err))
	}
	driver := filepath.Join(root, "driver")
	resolved, err := filepath.EvalSymlinks(driver)
	if err != nil {
		return NodeState{}, fmt.Errorf("probe overlay in %s: %w", root, err)
	}
	n := NodeState{
		DriverRoot: driver,
		Overlay:    resolved,
		Library:    filepath.Join(driver, "usr", "lib64", "libnvidia-ml.so.1"),
		NvidiaSMI:  filepath.Join(driver, "usr", "bin", "nvidia-smi"),
		Snapshot:   filepath.Join(driver, "etc", "nvmock", "snapshot"),
		RealDriver: RealDriverLoaded("/proc"),
	}
	for _, p := range []string{n.Library, n.NvidiaSMI} {
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			return NodeState{}, fmt.Errorf("probe overlay in %s: %s is missing or not a file; reinstall with nvmock hostprep install", root, p)
		}
	}
	for _, name := range hostprep.MPSBinaries {
		p := filepath.Join(driver, "usr", "bin", name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			n.Binaries = append(n.Binaries, p)
		}
	}
	data, err := readSnapshot(n.Snapshot)
	if err != nil {
		return NodeState{}, fmt.Errorf("probe overlay in %s: %w", root, err)
	}
	gpus, err := DecodeGPUs(data)
	if err != nil {
		return NodeState{}, fmt.Errorf("probe overlay in %s: snapshot %s: %w", root, n.Snapshot, err)
	}
	dev := filepath.Join(driver, "dev")
	for i := range gpus {
		name := "nvidia" + strconv.Itoa(int(gpus[i].Node.Minor))
		if gpus[i].Node, err = statNode(dev, name); err != nil {
			return NodeState{}, fmt.Errorf("probe overlay in %s: GPU %d: %w", root, i, err)
		}
	}
	n.GPUs = gpus
	if fi, err := os.Stat(filepath.Join(root, hostprep.StateFile)); err == nil && fi.Mode().IsRegular() {
		n.State = filepath.Join(root, hostprep.StateFile)
	}
	// Installs before pcisim have neither; their containers keep the host's /sys.
	sys, hook := hostprep.SysOf(filepath.Dir(resolved)), filepath.Join(filepath.Dir(resolved), hostprep.HookPath)
	if fi, err := os.Stat(sys); err == nil && fi.IsDir() {
		if fi, err := os.Stat(hook); err == nil && fi.Mode().IsRegular() {
			n.Sys, n.Hook = sys, hook
			if fi, err := os.Stat(filepath.Join(resolved, "proc", "driver")); err == nil && fi.IsDir() {
				n.Proc = filepath.Join(resolved, "proc")
			}
			live := hostprep.IBLiveDir(filepath.Join(root, hostprep.StateFile))
			if fi, err := os.Stat(live); err == nil && fi.IsDir() {
				n.IBLive = live
			}
		}
	}
	if n.MIG, n.MIGOn, n.MIGGen, err = ProbeMIG(n.State, data, gpus, dev); err != nil {
		return NodeState{}, fmt.Errorf("probe overlay in %s: MIG: %w", root, err)
	}
	if c, err := statNode(dev, "nvidia-caps/nvidia-cap2"); err == nil {
		n.MIGMonitor = &c
	}
	if c, err := statNode(dev, "nvidia-caps/nvidia-cap1"); err == nil {
		n.MIGConfig = &c
	}
	if n.IB, err = probeIB(root, filepath.Dir(resolved), dev); err != nil {
		return NodeState{}, fmt.Errorf("probe overlay in %s: InfiniBand: %w", root, err)
	}
	for _, name := range ControlNodes {
		c, err := statNode(dev, name)
		if name == "nvidia-modeset" && errors.Is(err, fs.ErrNotExist) {
			continue // as the runtime, where the node has none
		}
		if err != nil {
			return NodeState{}, fmt.Errorf("probe overlay in %s: %w", root, err)
		}
		n.Control = append(n.Control, c)
	}
	return n, nil
}

// statNode reads one character device of the overlay; its container path is
// /dev/<name>.
func statNode(dev, name string) (DeviceNode, error) {
	p := filepath.Join(dev, name)
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return DeviceNode{}, fmt.Errorf("device node %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return DeviceNode{}, fmt.Errorf("device node %s: not a character device (an unprivileged render?); reinstall as root", p)
	}
	return DeviceNode{
		Path:     "/dev/" + name,
		Type:     "c",
		Major:    int64(unix.Major(st.Rdev)),
		Minor:    int64(unix.Minor(st.Rdev)),
		FileMode: st.Mode & 0o7777,
	}, nil
}

// readSnapshot reads a snapshot no larger than the library would map.
func readSnapshot(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, snapshot.MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > snapshot.MaxBytes {
		return nil, fmt.Errorf("snapshot %s is over the limit of %d bytes the library maps", path, snapshot.MaxBytes)
	}
	return data, nil
}

// DecodeGPUs reads the GPUs' indices, UUIDs and device minors from snapshot
// bytes (libnvml/snapshot's layout). Node holds only the minor.
func DecodeGPUs(data []byte) ([]GPU, error) {
	var h snapshot.Header
	if len(data) < snapshot.HeaderSize {
		return nil, fmt.Errorf("%d bytes, shorter than a header", len(data))
	}
	if err := binary.Read(bytes.NewReader(data[:snapshot.HeaderSize]), binary.LittleEndian, &h); err != nil {
		return nil, err
	}
	switch {
	case string(h.Magic[:]) != "NVMOCKSS":
		return nil, errors.New("not an nvmock snapshot")
	case h.Version != snapshot.Version || h.HeaderSize != snapshot.HeaderSize || h.DeviceSize != snapshot.DeviceSize:
		return nil, fmt.Errorf("layout version %d (sizes %d/%d), want %d (%d/%d); install with this nvmock",
			h.Version, h.HeaderSize, h.DeviceSize, snapshot.Version, snapshot.HeaderSize, snapshot.DeviceSize)
	case h.Flags&snapshot.FlagUnseeded != 0:
		return nil, errors.New("unseeded: the library derives UUIDs at init, so they are not in the file")
	}
	// The rest as the library checks it: a file it would not map gives
	// no container GPUs that could not run nvidia-smi.
	_, devs, err := snapshot.Read(data)
	if err != nil {
		return nil, err
	}
	gpus := make([]GPU, len(devs))
	for i, d := range devs {
		uuid := cstring(d.UUID[:])
		if uuid == "" {
			return nil, fmt.Errorf("device %d has no UUID", i)
		}
		gpus[i] = GPU{Index: i, UUID: uuid, Node: DeviceNode{Minor: int64(d.Minor)}}
	}
	return gpus, nil
}

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// RealDriverLoaded says whether a real NVIDIA kernel driver shows under
// procRoot (procRoot/driver/nvidia), the test hostprep install makes.
func RealDriverLoaded(procRoot string) bool {
	_, err := os.Stat(filepath.Join(procRoot, "driver", "nvidia"))
	return !errors.Is(err, fs.ErrNotExist) && err == nil
}
