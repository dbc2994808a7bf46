package profile

import (
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"
)

// Boards returns each GPU's board: the profile's board with that GPU's
// override, if any, laid over it. Errors name the override's fields.
func (p *Profile) Boards() ([]Board, []error) {
	if p.GPUs > MaxGPUs {
		return nil, []error{fmt.Errorf("gpus: %d is out of range; use 1 to %d", p.GPUs, MaxGPUs)}
	}
	boards := make([]Board, max(p.GPUs, 0))
	for i := range boards {
		boards[i] = p.Board
	}
	if len(p.Devices) == 0 {
		return boards, nil
	}
	base, err := json.Marshal(p.Board)
	if err != nil {
		return nil, []error{fmt.Errorf("board: %w", err)}
	}
	var baseMap map[string]any
	if err := json.Unmarshal(base, &baseMap); err != nil {
		return nil, []error{fmt.Errorf("board: %w", err)}
	}
	var errs []error
	seen := map[int]bool{}
	for k, o := range p.Devices {
		at := fmt.Sprintf("devices[%d]", k)
		if o.Index < 0 || o.Index >= p.GPUs {
			errs = append(errs, fmt.Errorf("%s.index: %d is not a GPU of this node (0 to %d)", at, o.Index, p.GPUs-1))
			continue
		}
		if seen[o.Index] {
			errs = append(errs, fmt.Errorf("%s.index: GPU %d already has an override", at, o.Index))
			continue
		}
		seen[o.Index] = true
		var patch map[string]any
		if err := json.Unmarshal(o.Board, &patch); err != nil {
			errs = append(errs, fmt.Errorf("%s.board: expected an object of board fields", at))
			continue
		}
		if m, _ := patch["modes"].(map[string]any); m != nil {
			if mig, _ := m["mig"].(map[string]any); mig != nil && mig["layout"] != nil {
				// Review: it was dropped, silently.
				errs = append(errs, fmt.Errorf("%s.board.modes.mig.layout: the layout is the node's; give it as board.modes.mig.layout with this GPU's index, such as \"%d=all-balanced\"", at, o.Index))
				continue
			}
		}
		merged, _ := json.Marshal(mergeMaps(baseMap, patch))
		var b Board
		if err := yaml.UnmarshalStrict(merged, &b); err != nil {
			errs = append(errs, fmt.Errorf("%s.board: %v", at, err))
			continue
		}
		c := &checker{}
		b.validate(c)
		for _, e := range c.errs {
			errs = append(errs, fmt.Errorf("%s.%s", at, e.Error()))
		}
		boards[o.Index] = b
	}
	return boards, errs
}

// validateDevices adds the overrides' problems to a profile check.
func (p *Profile) validateDevices(c *checker) {
	if p.GPUs < 1 {
		return
	}
	_, errs := p.Boards()
	c.errs = append(c.errs, errs...)
}
