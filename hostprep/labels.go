package hostprep

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nvmock/nvmock/profile"
)

// Labels are what GPU feature discovery would put on a node with these GPUs
// (product and family sanitised as GFD does, memory in MiB); install applies
// them to the node and writes them as NFD's feature file. Profile validation
// has checked that the product's label is one Kubernetes accepts.
func Labels(p *profile.Profile) map[string]string {
	b := p.Board
	return map[string]string{
		"nvidia.com/gpu.present": "true",
		"nvidia.com/gpu.product": profile.ProductLabel(b.ProductName),
		"nvidia.com/gpu.count":   fmt.Sprint(p.GPUs),
		"nvidia.com/gpu.memory":  fmt.Sprint(uint64(b.Memory.Total) >> 20),
		"nvidia.com/gpu.family":  strings.ToLower(profile.ProductLabel(b.Architecture)),
	}
}

// labelTimeout bounds SetLabels.
const labelTimeout = 10 * time.Second

// SetLabels sets labels on a node with one strategic-merge PATCH; a nil
// value removes that label (removing an absent one is no change). It gives
// up after labelTimeout: install and the preStop hook must not hang on an
// API server that does not answer.
func (c *KubeClient) SetLabels(ctx context.Context, node string, labels map[string]*string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, labelTimeout)
	defer cancel()
	if err := c.patchNode(ctx, node, body); err != nil {
		return fmt.Errorf("label node %s: %w", node, err)
	}
	return nil
}

// labelPatch turns labels into a patch that sets them (or, with remove,
// deletes them).
func labelPatch(labels map[string]string, remove bool) map[string]*string {
	out := make(map[string]*string, len(labels))
	for k, v := range labels {
		if remove {
			out[k] = nil
		} else {
			v := v
			out[k] = &v
		}
	}
	return out
}

// ApplyLabels sets (or removes) the profile's labels on the node.
func (c *KubeClient) ApplyLabels(ctx context.Context, node string, p *profile.Profile, remove bool) error {
	return c.SetLabels(ctx, node, labelPatch(Labels(p), remove))
}

// RemoveLabels removes every label install sets, whatever their values.
func (c *KubeClient) RemoveLabels(ctx context.Context, node string) error {
	keys := map[string]*string{}
	for k := range Labels(&profile.Profile{}) {
		keys[k] = nil
	}
	return c.SetLabels(ctx, node, keys)
}

func sortedLines(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, labels[k])
	}
	return b.String()
}
