package inject

import (
	"os"
	"path/filepath"
	"slices"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/ibshim"
	"github.com/nvmock/nvmock/ibshim/umad"
)

// IBNode is what a container needs of the node's InfiniBand: host paths,
// as bind-mount sources, and the inert /dev/infiniband nodes.
type IBNode struct {
	Devices   []DeviceNode // /dev/infiniband/umadN, issmN, uverbsN, rdma_cm
	Shim      string       // libnvmock-umad.so
	Provider  string       // libnvmock-rdmav34.so
	SocketDir string       // the fabric daemon's socket's directory
}

// Container paths of the InfiniBand planes. The provider keeps the name
// libibverbs gives it (RDMAV_DRIVERS names it without the suffix).
const (
	ibLibDir      = "/usr/lib/nvmock"
	ibShimPath    = ibLibDir + "/libnvmock-umad.so"
	ibProviderDir = ibLibDir + "/libibverbs"
	ibSocketDir   = "/run/nvmock"
)

// InfiniBand gives a GPU container the node's HCAs: their device nodes, the
// umad shim preloaded (ahead of the image's own preloads), the fabric
// daemon's socket and the verbs provider. A statically linked program
// ignores the preload; a musl one loads the shim as it is (measured, see
// docs/infiniband.md). The HCAs' sysfs comes with the PCI tree's hook.
var InfiniBand = Extension{Name: "infiniband", Apply: applyInfiniBand}

func applyInfiniBand(in Input, adj *Adjustment) error {
	ib := in.Node.IB
	if ib == nil || in.Pod.Annotations[InfiniBandAnnotation] == "false" {
		return nil
	}
	for _, d := range ib.Devices {
		if !hasNode(in.Ctr.Devices, d) {
			adj.Devices = append(adj.Devices, d)
		}
		if !hasRule(adj.DeviceRules, d) {
			adj.DeviceRules = append(adj.DeviceRules, DeviceRule{Allow: true, Type: d.Type, Major: d.Major, Minor: d.Minor, Access: "rwm"})
		}
	}
	opts := slices.Clone(bindOptions[:])
	adj.Mounts = append(adj.Mounts,
		Mount{Source: ib.Shim, Destination: ibShimPath, Type: "bind", Options: opts},
		Mount{Source: ib.Provider, Destination: ibProviderDir + "/" + filepath.Base(ib.Provider), Type: "bind", Options: slices.Clone(opts)},
		Mount{Source: ib.SocketDir, Destination: ibSocketDir, Type: "bind", Options: slices.Clone(opts)})
	preload := ibShimPath
	if old, ok := lookupEnv(in.Ctr.Env, "LD_PRELOAD"); ok && old != "" {
		preload += ":" + old
	}
	adj.Env = append(adj.Env,
		EnvVar{Key: "LD_PRELOAD", Value: preload},
		EnvVar{Key: umad.SocketEnv, Value: ibSocketDir + "/" + filepath.Base(hostprep.IBSocket)},
		EnvVar{Key: "RDMAV_DRIVERS", Value: ibProviderDir + "/" + filepath.Base(ibshim.VerbsProvider)})
	return nil
}

// probeIB finds the overlay's InfiniBand planes; nil without them (a
// profile without HCAs, an older install).
func probeIB(root, overlay, dev string) (*IBNode, error) {
	if _, err := os.Stat(filepath.Join(overlay, hostprep.FabricFile)); err != nil {
		return nil, nil
	}
	ib := &IBNode{
		Shim:      filepath.Join(overlay, hostprep.UmadShimPath),
		Provider:  filepath.Join(overlay, hostprep.ProviderPath),
		SocketDir: filepath.Dir(filepath.Join(root, hostprep.IBSocket)),
	}
	ents, err := os.ReadDir(filepath.Join(dev, "infiniband"))
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		d, err := statNode(dev, filepath.Join("infiniband", e.Name()))
		if err != nil {
			return nil, err
		}
		ib.Devices = append(ib.Devices, d)
	}
	return ib, nil
}
