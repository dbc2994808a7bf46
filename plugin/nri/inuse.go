package nri

import (
	"maps"
	"slices"

	"github.com/containerd/nri/pkg/api"

	"github.com/nvmock/nvmock/hostprep"
)

// The overlays running containers were given (hostprep.InUseFile), which
// install keeps when it switches to a new one: their bind mounts are of
// those directories. The caller of each method holds c.mu.

// useOverlay records that container id was given the overlay at overlay
// (a path in it).
func (c *nodeCache) useOverlay(id, overlay string) {
	if name := hostprep.OverlayOf(overlay); id != "" && name != "" {
		c.overlays[id] = name
		c.writeInUse()
	}
}

func (c *nodeCache) dropOverlay(id string) {
	if _, ok := c.overlays[id]; ok {
		delete(c.overlays, id)
		c.writeInUse()
	}
}

// syncOverlays rebuilds the record from the running containers: the
// overlay their runtime hook, or a mount, comes from.
func (c *nodeCache) syncOverlays(ctrs []*api.Container) {
	c.overlays = map[string]string{}
	for _, ctr := range ctrs {
		if ctr.GetState() == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		var paths []string
		for _, h := range ctr.GetHooks().GetCreateContainer() {
			paths = append(paths, h.GetPath())
		}
		for _, m := range ctr.GetMounts() {
			paths = append(paths, m.GetSource())
		}
		for _, p := range paths {
			if name := hostprep.OverlayOf(p); name != "" {
				c.overlays[ctr.GetId()] = name
				break
			}
		}
	}
	c.inUseWritten = nil // the file may hold another plugin's list
	c.writeInUse()
}

// writeInUse writes the list when it changed. A failure is logged by the
// caller's next change; the worst it costs is an overlay removed under a
// container, as before the list existed.
func (c *nodeCache) writeInUse() {
	if c.node.State == "" {
		return
	}
	names := slices.Sorted(maps.Values(c.overlays))
	names = slices.Compact(names)
	if c.inUseWritten != nil && slices.Equal(names, c.inUseWritten) {
		return
	}
	c.inUseErr = hostprep.WriteInUse(c.node.State, names)
	if c.inUseErr == nil {
		c.inUseWritten = names
	}
}
