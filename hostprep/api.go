package hostprep

import (
	"errors"

	"github.com/nvmock/nvmock/libnvml/profile"
)

// Options say what to render.
type Options struct {
	Profile           *profile.Profile // validated; GPUs already applied
	NodeName          string           // node seed for identities
	Assets            string           // a built driver tree: usr/lib64/libnvidia-ml.so.* and usr/bin/nvidia-smi
	RealDeviceNumbers bool             // NVIDIA's real majors instead of inert /dev/null numbers
}

// Overlay is a rendered tree: Dir/driver is the driver root (usr/lib64,
// usr/bin, etc/nvmock/snapshot, dev, proc/driver/nvidia).
type Overlay struct {
	Dir string
}

// Render writes a complete overlay into dir, which must be empty or absent.
func Render(dir string, o Options) (*Overlay, error) {
	return nil, errors.New("hostprep: Render is not implemented yet")
}
