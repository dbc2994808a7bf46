package hostprep

import (
	"fmt"

	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/profile"
)

// gatherMIG parses the MIG layout the node is to start with (Options.MIG,
// else the profile's) and checks that it fits, on a scratch state, before
// anything on the node changes. nil: none.
func gatherMIG(o Options, snap []byte) (*migInputs, error) {
	spec, p := o.MIG, o.Profile
	if spec == "" && p.Board.Modes.MIG != nil {
		spec = p.Board.Modes.MIG.Layout
	}
	if spec == "" {
		return nil, nil
	}
	l, err := profile.ParseMIGLayout(spec, p.Board.Modes.MIG, p.GPUs)
	if err != nil {
		return nil, err
	}
	_, devs, err := snapshot.Read(snap)
	if err != nil {
		return nil, fmt.Errorf("compiled snapshot: %w", err)
	}
	s := &live.State{}
	s.Header.Gpus = uint32(len(devs))
	if err := s.ApplyMIGLayout(devs, l); err != nil {
		return nil, err
	}
	return &migInputs{layout: l, devs: devs}, nil
}

type migInputs struct {
	layout *profile.MIGLayout
	devs   []snapshot.Device
}

func (m *migInputs) spec() string {
	if m == nil {
		return ""
	}
	return m.layout.Spec
}

// apply partitions the fresh live state at path.
func (m *migInputs) apply(path string) error {
	if m == nil {
		return nil
	}
	f, err := live.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Update(func(s *live.State, _ int64) error { return s.ApplyMIGLayout(m.devs, m.layout) }); err != nil {
		return fmt.Errorf("state %s: %w", path, err)
	}
	return nil
}
