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
		if name := overlayOfContainer(ctr); name != "" {
			c.overlays[ctr.GetId()] = name
		}
	}
	c.inUseWritten = nil // the file may hold another plugin's list
	c.writeInUse()
}

// overlayOfContainer is the overlay (its name) a container's runtime hook,
// or else one of its mounts, comes from; "" for none.
func overlayOfContainer(ctr *api.Container) string {
	for _, h := range ctr.GetHooks().GetCreateContainer() {
		if name := hostprep.OverlayOf(h.GetPath()); name != "" {
			return name
		}
	}
	for _, m := range ctr.GetMounts() {
		if name := hostprep.OverlayOf(m.GetSource()); name != "" {
			return name
		}
	}
	return ""
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
