package nri

import (
	"os"

	"github.com/containerd/nri/pkg/api"

	"github.com/nvmock/nvmock/plugin/inject"
)

// During a rolling update the chart's DaemonSet starts the new pod before
// it stops the old one (maxSurge), so two nvmock plugins are registered
// with the runtime for a moment and no container goes without GPUs. The
// runtime calls them in turn, each seeing the edits of those before it:
// the first injects and marks the container (an annotation), and a later
// one, finding the mark, records the GPUs it was given and adds nothing
// (two plugins setting the same variable would fail the container).

// InjectedAnnotation marks a container the plugin edited (in the OCI
// spec's annotations, not the pod's), naming the plugin's host (its pod).
const InjectedAnnotation = "nvmock.io/injected-by"

// byAnother says whether another nvmock plugin edited the container in
// this round.
func byAnother(ctr *api.Container) bool {
	_, ok := ctr.GetAnnotations()[InjectedAnnotation]
	return ok
}

// recordOthers remembers what another plugin gave the container, as
// Synchronize does from a running container's environment.
func (c *nodeCache) recordOthers(ctr *api.Container) {
	id := ctr.GetId()
	c.forget(id)
	if v, ok := lastEnv(ctr.GetEnv(), inject.VisibleDevicesEnv); ok && v != "" {
		c.gpus[id] = given{visible: v}
		c.rebuildUse()
	}
	if name := overlayOfContainer(ctr); name != "" {
		c.overlays[id] = name
		c.writeInUse()
	}
}

// hostName is the plugin's host name (in the chart, its pod's name), or
// "nvmock".
func hostName() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "nvmock"
}
