package hostprep

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nvmock/nvmock/ibshim"
	"github.com/nvmock/nvmock/ibshim/fabric"
	ibsysfs "github.com/nvmock/nvmock/ibshim/sysfs"
	"github.com/nvmock/nvmock/pcisim"
	"github.com/nvmock/nvmock/profile"
)

// FabricFile is where an overlay keeps what its fabric is built from: the
// profile and this node's name and slot, for the fabric daemon the NRI
// plugin runs (LoadFabric).
var FabricFile = filepath.Join("fabric", "fabric.json")

// IBSocket is the fabric daemon's socket in an installed root. It has a
// directory of its own, which the chart's plugin container mounts
// read-write and GPU containers read-only.
var IBSocket = filepath.Join("ib", "ibd.sock")

// Where the overlay's driver root holds the InfiniBand planes' libraries.
var (
	UmadShimPath = filepath.Join("driver", ibshim.UmadShim)
	ProviderPath = filepath.Join("driver", ibshim.VerbsProvider+ibshim.ProviderSuffix)
)

type fabricSpec struct {
	Profile string         `json:"profile"` // the resolved profile as JSON, or YAML (older overlays); Parse reads both
	Host    string         `json:"host"`
	Slot    int            `json:"slot"`
	Faults  []fabric.Fault `json:"faults,omitempty"`
}

// ibInputs are an InfiniBand node's parts of the overlay.
type ibInputs struct {
	shim, provider asset
	spec           []byte // FabricFile
	nodes          []DevNode
	node           *profile.Node
	fab            *fabric.Fabric // with the node's faults
	faults         []fabric.Fault // this node's
}

// gatherIB builds the node's fabric and reads the planes' libraries from
// the assets; pci gets the HCAs' sysfs.
func gatherIB(o Options, node *profile.Node, pci *[]pcisim.File, read func(string) (asset, error)) (*ibInputs, error) {
	p := o.Profile
	host := o.FabricHost
	if host == "" {
		host = o.NodeName
	}
	var err error
	f := o.Fabric
	if f == nil {
		if f, err = fabric.Build(node, host, o.FabricSlot-1); err != nil {
			return nil, fmt.Errorf("profile %s: %w", p.Name, err)
		}
		if err := f.Apply(o.IBFaults); err != nil {
			return nil, fmt.Errorf("InfiniBand fault: %w", err)
		}
	}
	var faults []fabric.Fault // this node's: another's would change its overlay's hash
	for _, ft := range o.IBFaults {
		if ft.For(host) {
			faults = append(faults, ft)
		}
	}
	in := &ibInputs{node: node, fab: f, faults: faults}
	for _, a := range []struct {
		rel string
		out *asset
	}{{ibshim.UmadShim, &in.shim}, {ibshim.VerbsProvider + ibshim.ProviderSuffix, &in.provider}} {
		if *a.out, err = read(filepath.Join(o.Assets, a.rel)); err != nil {
			return nil, fmt.Errorf("assets %s: no %s, which a node with InfiniBand needs (run make driver)", o.Assets, a.rel)
		}
	}
	// JSON, which Parse reads as the YAML it is: marshalling YAML was
	// a good part of every nvmock exec's render.
	y, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	if in.spec, err = json.Marshal(fabricSpec{Profile: string(y), Host: host, Slot: f.Local, Faults: faults}); err != nil {
		return nil, err
	}
	// Inert whatever --real-device-numbers says: nothing on the node
	// answers uverbs or umad ioctls; the shim and provider do.
	for _, n := range ibsysfs.DevNodes(node) {
		in.nodes = append(in.nodes, DevNode{Name: "infiniband/" + n.Name, Major: nullMajor, Minor: nullMinor})
	}
	if pci != nil {
		*pci = append(*pci, ibsysfs.Files(node, f)...)
	}
	return in, nil
}

// LoadFabric is the node and fabric an overlay was rendered for, from its
// FabricFile; nil, nil when the overlay has no InfiniBand.
func LoadFabric(overlay string) (*profile.Node, *fabric.Fabric, error) {
	node, f, err := readFabric(filepath.Join(overlay, FabricFile), FabricFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	return node, f, err
}

// LiveFabric is the node and fabric of the installed node whose live
// state is statePath, from its live port state's IBLiveFabric.
func LiveFabric(statePath string) (*profile.Node, *fabric.Fabric, error) {
	path := filepath.Join(IBLiveDir(statePath), IBLiveFabric)
	return readFabric(path, path)
}

// readFabric builds the node and fabric of the FabricFile at path; its
// errors name the file as name.
func readFabric(path, name string) (*profile.Node, *fabric.Fabric, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	node, f, err := fabricOf(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return node, f, nil
}

// fabricOf builds the node and fabric a FabricFile's content describes.
func fabricOf(spec []byte) (*profile.Node, *fabric.Fabric, error) {
	var s fabricSpec
	if err := json.Unmarshal(spec, &s); err != nil {
		return nil, nil, err
	}
	p, err := profile.Parse(FabricFile, []byte(s.Profile))
	if err != nil {
		return nil, nil, err
	}
	node, err := p.Node()
	if err != nil {
		return nil, nil, err
	}
	f, err := fabric.Build(node, s.Host, s.Slot)
	if err != nil {
		return nil, nil, err
	}
	return node, f, f.Apply(s.Faults)
}

// hashed is what of the inputs the overlay's hash covers.
func (in *ibInputs) hashed() []byte {
	if in == nil {
		return nil
	}
	return append(append(append([]byte{}, in.shim.data...), in.provider.data...), in.spec...)
}
