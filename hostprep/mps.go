package hostprep

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
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
func readMPS(assets string) ([][]byte, error) {
	var out [][]byte
	for _, name := range MPSBinaries {
		data, err := os.ReadFile(filepath.Join(assets, "usr", "bin", name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("assets %s: %w", assets, err)
		}
		out = append(out, data)
	}
	if len(out) != 0 && len(out) != len(MPSBinaries) {
		return nil, fmt.Errorf("assets %s: usr/bin has one of %v without the other (run hack/package-driver.sh)", assets, MPSBinaries)
	}
	return out, nil
}

// mpsEntries install the MPS binaries in the driver root's usr/bin.
func mpsEntries(data [][]byte) []entry {
	var es []entry
	for i, d := range data {
		es = append(es, entry{path: filepath.Join("driver", "usr", "bin", MPSBinaries[i]), data: d, mode: 0o755})
	}
	return es
}

// mpsHash stands for the MPS binaries in an overlay's hash.
func mpsHash(data [][]byte) string {
	parts := make([]any, len(data))
	for i, d := range data {
		parts[i] = d
	}
	return Hash(parts...)
}
