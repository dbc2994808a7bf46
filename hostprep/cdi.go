package hostprep

import (
	"fmt"
	"path/filepath"
	"strconv"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"sigs.k8s.io/yaml"
)

// CDIKind is the kind of the node's CDI devices: nvmock.io/gpu=0,
// nvmock.io/gpu=GPU-..., nvmock.io/gpu=all.
const CDIKind = "nvmock.io/gpu"

// CDIFile is the spec's file name in the CDI directory.
const CDIFile = "nvmock.io-gpu.yaml"

// CDISpec describes the overlay's GPUs to a container runtime. driverRoot is
// the host path of the driver root (the stable <root>/driver symlink, so a
// container created during a later switch still finds its nodes).
//
// Each GPU is named by index and by UUID and brings its own node; "all"
// brings every GPU node. The control nodes go in the spec-wide edits, which
// apply whenever any device of the spec is injected: without nvidiactl in a
// container the library would show every GPU. NVIDIA_VISIBLE_DEVICES=void,
// as nvidia-ctk's specs set it, keeps a legacy NVIDIA hook from adding
// devices; the library does not filter on "void", so the nodes decide.
func CDISpec(o *Overlay, driverRoot string) *cdispec.Spec {
	node := func(n DevNode) *cdispec.DeviceNode {
		return &cdispec.DeviceNode{Path: "/dev/" + n.Name, HostPath: filepath.Join(driverRoot, "dev", n.Name)}
	}
	s := &cdispec.Spec{
		Kind: CDIKind,
		ContainerEdits: cdispec.ContainerEdits{
			Env: []string{"NVIDIA_VISIBLE_DEVICES=void"},
		},
	}
	var all []*cdispec.DeviceNode
	var byUUID []cdispec.Device
	for _, n := range o.DevNodes {
		if n.Control {
			s.ContainerEdits.DeviceNodes = append(s.ContainerEdits.DeviceNodes, node(n))
		}
	}
	for i, id := range o.GPUs {
		gpu := node(o.DevNodes[i])
		all = append(all, gpu)
		edits := cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{gpu}}
		s.Devices = append(s.Devices, cdispec.Device{Name: strconv.Itoa(id.Index), ContainerEdits: edits})
		byUUID = append(byUUID, cdispec.Device{Name: id.UUID, ContainerEdits: edits})
	}
	s.Devices = append(s.Devices, byUUID...)
	s.Devices = append(s.Devices, cdispec.Device{Name: "all", ContainerEdits: cdispec.ContainerEdits{DeviceNodes: all}})
	v, err := cdispec.MinimumRequiredVersion(s)
	if err != nil {
		v = cdispec.CurrentVersion
	}
	s.Version = v
	return s
}

// CDIYAML encodes the spec as the file install writes.
func CDIYAML(s *cdispec.Spec) ([]byte, error) {
	b, err := yaml.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode CDI spec: %w", err)
	}
	return append([]byte(cdiHeader), b...), nil
}

// cdiHeader opens every CDI spec install writes.
const cdiHeader = "# Written by nvmock hostprep install; removed by nvmock hostprep uninstall.\n"
