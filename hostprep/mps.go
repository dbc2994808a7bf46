package hostprep

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// MPSBinaries are NVIDIA's MPS control daemon and server, which a driver
// installs beside nvidia-smi (Debian's nvidia-cuda-mps): NVIDIA's device
// plugin runs the daemon to share GPUs by MPS, and NVIDIA's runtime
// mounts both into a container with GPUs. The daemon loads no NVML; the
// server would need CUDA, which starts it.
var MPSBinaries = []string{"nvidia-cuda-mps-control", "nvidia-cuda-mps-server"}

// readMPS reads the MPS binaries from the assets' usr/bin: both, or neither
// for assets without them (a driver tree built before they were added).
func readMPS(assets string, read func(string) (asset, error)) ([]asset, error) {
	var out []asset
	for _, name := range MPSBinaries {
		a, err := read(filepath.Join(assets, "usr", "bin", name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("assets %s: %w", assets, err)
		}
		out = append(out, a)
	}
	if len(out) != 0 && len(out) != len(MPSBinaries) {
		return nil, fmt.Errorf("assets %s: usr/bin has one of %v without the other (run hack/package-driver.sh)", assets, MPSBinaries)
	}
	return out, nil
}

// mpsEntries install the MPS binaries in the driver root's usr/bin.
func mpsEntries(as []asset) []entry {
	var es []entry
	for i, a := range as {
		es = append(es, a.entry(filepath.Join("driver", "usr", "bin", MPSBinaries[i])))
	}
	return es
}

// mpsHash stands for the MPS binaries in an overlay's hash.
func mpsHash(as []asset) string {
	parts := make([]any, len(as))
	for i, a := range as {
		parts[i] = a.data
	}
	return Hash(parts...)
}
