package inject

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/ibshim"
	"github.com/nvmock/nvmock/ibshim/umad"
)

// IBNode is what a container needs of the node's InfiniBand: host paths,
// as bind-mount sources, and the inert /dev/infiniband nodes.
type IBNode struct {
	// DevDir holds the inert /dev/infiniband nodes (umadN, issmN, uverbsN,
	// rdma_cm, all /dev/null's 1:3): one bind mount gives a container all
	// of them, where a device entry each cost runc a mknod and a cgroup
	// rule (37 on a DGX).
	DevDir    string
	Shim      string // libnvmock-umad.so
	Provider  string // libnvmock-rdmav34.so
	SocketDir string // the fabric daemon's socket's directory
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
	// "false" as nvmock.io/inject reads it: any case, spaces around.
	if ib == nil || strings.EqualFold(strings.TrimSpace(in.Pod.Annotations[InfiniBandAnnotation]), "false") {
		return nil
	}
	null := DeviceNode{Type: "c", Major: 1, Minor: 3}
	if !hasRule(adj.DeviceRules, null) {
		adj.DeviceRules = append(adj.DeviceRules, DeviceRule{Allow: true, Type: "c", Major: 1, Minor: 3, Access: "rwm"})
	}
	opts := slices.Clone(bindOptions[:])
	for _, m := range []Mount{
		// Device nodes: no nodev. Read-only stops nothing a device does.
		{Source: ib.DevDir, Destination: "/dev/infiniband", Type: "bind", Options: []string{"rbind", "ro", "nosuid"}},
		{Source: ib.Shim, Destination: ibShimPath, Type: "bind", Options: opts},
		{Source: ib.Provider, Destination: ibProviderDir + "/" + filepath.Base(ib.Provider), Type: "bind", Options: slices.Clone(opts)},
		{Source: ib.SocketDir, Destination: ibSocketDir, Type: "bind", Options: slices.Clone(opts)},
	} {
		// NRI takes a plugin's mount as replacing the spec's at its
		// destination: an RDMA pod's own /dev/infiniband stays.
		if !slices.Contains(in.Ctr.Mounts, m.Destination) {
			adj.Mounts = append(adj.Mounts, m)
		}
	}
	old, _ := lookupEnv(in.Ctr.Env, "LD_PRELOAD")
	// rdma-core reads IBV_DRIVERS only without RDMAV_DRIVERS, which the
	// provider is named in: the image's list follows it in either.
	drivers, ok := lookupEnv(in.Ctr.Env, "RDMAV_DRIVERS")
	if !ok {
		drivers, _ = lookupEnv(in.Ctr.Env, "IBV_DRIVERS")
	}
	adj.Env = append(adj.Env,
		EnvVar{Key: "LD_PRELOAD", Value: prependList(ibShimPath, old, ": ")},
		EnvVar{Key: umad.SocketEnv, Value: ibSocketDir + "/" + filepath.Base(hostprep.IBSocket)},
		EnvVar{Key: "RDMAV_DRIVERS", Value: prependList(ibProviderDir+"/"+filepath.Base(ibshim.VerbsProvider), drivers, ":;")})
	return nil
}

// prependList puts e ahead of list, a list split on any of seps (glibc's
// LD_PRELOAD on spaces and colons, libibverbs' drivers on colons and
// semicolons), unless the list has it already.
func prependList(e, list, seps string) string {
	if slices.Contains(strings.FieldsFunc(list, func(r rune) bool { return strings.ContainsRune(seps, r) }), e) {
		return list
	}
	if strings.Trim(list, seps) == "" {
		return e
	}
	return e + seps[:1] + list
}

// probeIB finds the overlay's InfiniBand planes; nil without them (a
// profile without HCAs, an older install).
func probeIB(root, overlay, dev string) (*IBNode, error) {
	if _, err := os.Stat(filepath.Join(overlay, hostprep.FabricFile)); err != nil {
		return nil, nil
	}
	ib := &IBNode{
		DevDir:    filepath.Join(dev, "infiniband"),
		Shim:      filepath.Join(overlay, hostprep.UmadShimPath),
		Provider:  filepath.Join(overlay, hostprep.ProviderPath),
		SocketDir: filepath.Dir(filepath.Join(root, hostprep.IBSocket)),
	}
	ents, err := os.ReadDir(ib.DevDir)
	if err != nil {
		return nil, err
	}
	// Inert or nothing: the directory is mounted without nodev.
	for _, e := range ents {
		d, err := statNode(dev, filepath.Join("infiniband", e.Name()))
		if err != nil {
			return nil, err
		}
		if d.Major != 1 || d.Minor != 3 {
			return nil, fmt.Errorf("%s is %d:%d, not /dev/null's 1:3; reinstall", d.Path, d.Major, d.Minor)
		}
	}
	return ib, nil
}
