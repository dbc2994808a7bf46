package nri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/plugin/inject"
)

// PluginName is the name the plugin registers with.
const PluginName = "nvmock"

// Defaults of Options.
const (
	DefaultSocket           = api.DefaultSocketPath
	DefaultPluginIdx        = "10"
	DefaultNamespaceRefresh = 30 * time.Second
	DefaultFirstListWait    = 30 * time.Second
)

// Options configure a Plugin.
type Options struct {
	Socket      string // NRI socket; "" is DefaultSocket
	PluginIdx   string // used when the runtime did not launch us (NRI_PLUGIN_IDX unset); "" is DefaultPluginIdx
	OverlayRoot string // where hostprep installed the overlay; "" is hostprep.DefaultRoot
	Inject      inject.Config

	// Kube lists and watches opted-in namespaces; nil outside a cluster,
	// where only Inject.Namespaces applies.
	Kube             *hostprep.KubeClient
	NamespaceLabel   string        // KEY=VALUE that opts a namespace in; "" is DefaultNamespaceLabel
	NamespaceRefresh time.Duration // the longest wait before asking again after a failure; 0 is DefaultNamespaceRefresh
	// FirstListWait bounds how long registration waits for the first
	// namespace list; 0 is DefaultFirstListWait.
	FirstListWait time.Duration

	// Backoff bounds the wait between reconnects; zero values are 100ms and 10s.
	MinBackoff, MaxBackoff time.Duration

	Log *logrus.Entry // nil logs to logrus' standard logger
}

// Plugin is the NRI plugin. Create it with New, run it with Run.
type Plugin struct {
	opt     Options
	log     *logrus.Entry
	metrics *metrics
	node    *nodeCache

	optedIn atomic.Pointer[map[string]bool]
	listed  chan struct{} // closed at the first namespace list
	listedO sync.Once
	synced  atomic.Bool // registered and synchronized with a runtime

	// fdMode: the runtime launched us on an inherited socket; after a
	// disconnect it launches a new process, so Run returns instead.
	fdMode bool

	// syncedC is signalled (non-blocking) after each Synchronize: tests wait on it.
	syncedC chan struct{}

	// procs are the processes to register when containers start, by ID;
	// procMu orders their registration and removal.
	procs  sync.Map // string -> procStart
	procMu sync.Mutex
	starts starts
	ctx    context.Context // Run's
	host   string          // names the plugin in InjectedAnnotation
}

// New checks the options and builds a plugin; a bad option is an error
// here, at start, never later.
func New(opt Options) (*Plugin, error) {
	if err := opt.Inject.Validate(); err != nil {
		// One line: a bad start is reported as one line (errors.Join has one per problem).
		return nil, fmt.Errorf("nri plugin config: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if opt.Socket == "" {
		opt.Socket = DefaultSocket
	}
	if opt.PluginIdx == "" {
		opt.PluginIdx = DefaultPluginIdx
	}
	if _, _, err := api.ParsePluginName(opt.PluginIdx + "-" + PluginName); err != nil {
		return nil, fmt.Errorf("nri plugin config: plugin index %q: use two digits, such as 10", opt.PluginIdx)
	}
	if opt.OverlayRoot == "" {
		opt.OverlayRoot = hostprep.DefaultRoot
	}
	if opt.NamespaceLabel == "" {
		opt.NamespaceLabel = DefaultNamespaceLabel
	}
	if err := ValidateNamespaceLabel(opt.NamespaceLabel); err != nil {
		return nil, fmt.Errorf("nri plugin config: %w", err)
	}
	if opt.NamespaceRefresh <= 0 {
		opt.NamespaceRefresh = DefaultNamespaceRefresh
	}
	if opt.FirstListWait <= 0 {
		opt.FirstListWait = DefaultFirstListWait
	}
	if opt.MinBackoff <= 0 {
		opt.MinBackoff = 100 * time.Millisecond
	}
	if opt.MaxBackoff < opt.MinBackoff {
		opt.MaxBackoff = max(10*time.Second, opt.MinBackoff)
	}
	log := opt.Log
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	p := &Plugin{
		opt:     opt,
		log:     log,
		metrics: newMetrics(),
		node:    newNodeCache(opt.OverlayRoot),
		host:    hostName(),
		fdMode:  os.Getenv(api.PluginSocketEnvVar) != "",
		syncedC: make(chan struct{}, 1),
		listed:  make(chan struct{}),
	}
	return p, nil
}

// Run connects to the runtime and handles its events until ctx ends,
// reconnecting with backoff whenever the runtime goes away. It returns nil
// when ctx is cancelled, or an error the stub cannot be built with.
func (p *Plugin) Run(ctx context.Context) error {
	p.ctx = ctx
	if p.opt.Kube != nil {
		go p.watchNamespaces(ctx)
		if !p.waitListed(ctx) {
			return nil
		}
	}
	backoff := p.opt.MinBackoff
	for {
		closed := make(chan struct{})
		var once sync.Once
		opts := []stub.Option{
			stub.WithPluginName(PluginName),
			stub.WithSocketPath(p.opt.Socket),
			stub.WithLogger(stubLogger{p.log}),
			stub.WithOnClose(func() { once.Do(func() { close(closed) }) }),
		}
		if os.Getenv(api.PluginIdxEnvVar) == "" { // the runtime launched us with our index otherwise
			opts = append(opts, stub.WithPluginIdx(p.opt.PluginIdx))
		}
		s, err := stub.New(&handler{p}, opts...)
		if err != nil {
			return fmt.Errorf("nri plugin: %w", err)
		}
		err = p.start(ctx, s)
		if errors.Is(err, errStartHung) {
			return err
		}
		if err == nil {
			backoff = p.opt.MinBackoff
			select {
			case <-ctx.Done():
				p.synced.Store(false)
				s.Stop()
				return nil
			case <-closed:
				p.synced.Store(false)
				if p.fdMode {
					return errors.New("nri plugin: the runtime closed the connection it launched us with")
				}
				p.log.Warn("runtime connection closed; reconnecting")
			}
		} else {
			p.synced.Store(false)
			if ctx.Err() != nil {
				return nil
			}
			if p.fdMode {
				return fmt.Errorf("nri plugin: %w", err)
			}
			p.log.WithError(err).WithField("retry_in", backoff).Warn("cannot register with the runtime; is its NRI socket " + p.opt.Socket + " (the chart's nri.socketPath), with NRI enabled in containerd?")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, p.opt.MaxBackoff)
	}
}

// waitListed holds registration until the opted-in namespaces are listed:
// registered without them, the plugin would leave the pods it should
// inject untouched. Past FirstListWait it registers anyway, as the static
// namespaces still apply, and Ready fails until the list comes. It returns
// false when ctx ends.
func (p *Plugin) waitListed(ctx context.Context) bool {
	t := time.NewTimer(p.opt.FirstListWait)
	defer t.Stop()
	select {
	case <-p.listed:
	case <-ctx.Done():
		return false
	case <-t.C:
		p.log.WithField("waited", p.opt.FirstListWait).Warn("registering before the opted-in namespaces could be listed: until they are, only the configured namespaces are injected, and readyz fails")
	}
	return true
}

// startTimeout bounds a registration: the stub waits for the runtime's
// Configure without a deadline of its own.
const startTimeout = 30 * time.Second

var errStartHung = fmt.Errorf("nri plugin: registration with the runtime did not finish within %v; exiting to be restarted", startTimeout)

// start is s.Start with a deadline. A hung stub holds its lock and cannot
// be stopped, so past the deadline Run gives up and the process exits (the
// kubelet or the runtime starts a new one) rather than stay unregistered.
func (p *Plugin) start(ctx context.Context, s stub.Stub) error {
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errStartHung
	}
}

// Ready says the plugin is registered with a runtime and the overlay is present.
func (p *Plugin) Ready() error {
	if !p.synced.Load() {
		return errors.New("not registered with the runtime")
	}
	if p.opt.Kube != nil {
		select {
		case <-p.listed:
		default:
			return errors.New("the opted-in namespaces are not listed yet")
		}
	}
	p.node.mu.Lock()
	p.node.refresh()
	err := p.node.err
	p.node.mu.Unlock()
	if err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	return nil
}

// watchNamespaces keeps the opted-in namespaces current until ctx ends: it
// lists them, then follows the watch (watchOptedIn). On an error it keeps
// the last list, as a flaky API server must not flip pods, and asks again
// after a back-off that doubles from a second to NamespaceRefresh; a watch
// that expired (410 Gone) lists again at once.
func (p *Plugin) watchNamespaces(ctx context.Context) {
	backoff := time.Duration(0)
	ns := p.opt.Kube.Namespaces()
	log := p.log.WithField("namespace_label", p.opt.NamespaceLabel)
	// client-go's own lines (the RetryWatcher's) go to our logger, at debug
	// level: what matters is counted and logged below, once.
	ctx = klog.NewContext(ctx, logr.New(klogSink{l: log}))
	for ctx.Err() == nil {
		listed := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		set, rv, err := listOptedIn(rctx, ns, p.opt.NamespaceLabel)
		cancel()
		if err == nil {
			backoff = 0
			p.optedIn.Store(&set)
			p.listedO.Do(func() { close(p.listed) })
			log.WithFields(logrus.Fields{"namespaces": len(set), "resource_version": rv}).Debug("listed the opted-in namespaces")
			failing := false
			err = watchOptedIn(ctx, ns, p.opt.NamespaceLabel, rv, p.opt.NamespaceRefresh, p.setOptedIn, func(err error) {
				switch {
				case err != nil:
					p.metrics.errors.WithLabelValues(reasonNamespaces).Inc()
					if !failing { // once, not at every retry
						log.WithError(err).Warn("cannot watch namespaces; keeping the last list and retrying")
					}
					failing = true
				case failing:
					log.Info("watching namespaces again")
					failing = false
				}
			})
			if errors.Is(err, errWatchExpired) {
				// Why at once: the watch cannot resume, only a list can
				// catch up, and until then the set misses changes. At most
				// once a second, should a server expire every watch.
				log.WithError(err).Info("listing the opted-in namespaces again")
				select {
				case <-ctx.Done():
				case <-time.After(time.Until(listed.Add(time.Second))):
				}
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		backoff = min(max(2*backoff, time.Second), p.opt.NamespaceRefresh)
		p.metrics.errors.WithLabelValues(reasonNamespaces).Inc()
		log.WithError(err).WithField("retry_in", backoff).Warn("keeping the last list of opted-in namespaces")
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// setOptedIn records that namespace name matches the label (in) or not.
func (p *Plugin) setOptedIn(name string, in bool) {
	next := map[string]bool{}
	if cur := p.optedIn.Load(); cur != nil {
		for k := range *cur {
			next[k] = true
		}
	}
	if in {
		next[name] = true
	} else {
		delete(next, name)
	}
	p.optedIn.Store(&next)
}

// handler carries the stub's callbacks; its method set is exactly the
// events the plugin subscribes to.
type handler struct{ p *Plugin }

// Synchronize rebuilds the GPU use counts from the running containers.
func (h handler) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	h.p.synchronize(ctrs)
	h.p.synced.Store(true)
	select {
	case h.p.syncedC <- struct{}{}:
	default:
	}
	h.p.log.WithFields(logrus.Fields{"pods": len(pods), "containers": len(ctrs)}).Info("synchronized with the runtime")
	return nil, nil
}

// CreateContainer decides and returns the container's adjustment.
func (h handler) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adj, err := h.p.create(pod, ctr)
	return adj, nil, err
}

// StopContainer frees the container's GPUs.
func (h handler) StopContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	h.p.release(ctr.GetId())
	h.p.stopped(pod, ctr)
	return nil, nil
}

// RemoveContainer frees the container's GPUs (if Stop was missed).
func (h handler) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	h.p.release(ctr.GetId())
	h.p.stopped(pod, ctr)
	return nil
}

// refusal is an adjustment whose runtime hook fails the container's start
// with msg.
func refusal(hook, msg string) *api.ContainerAdjustment {
	adj := &api.ContainerAdjustment{}
	adj.AddHooks(&api.Hooks{CreateContainer: []*api.Hook{{Path: hook, Args: []string{"nvmock-hook", "refuse", msg}}}})
	return adj
}

func (p *Plugin) release(id string) {
	p.node.mu.Lock()
	p.node.forget(id)
	p.node.dropOverlay(id)
	p.node.mu.Unlock()
}

// synchronize rebuilds the per-container GPUs from the containers' env, as
// the plugin set it, replacing what was remembered.
func (p *Plugin) synchronize(ctrs []*api.Container) {
	defer func() {
		if r := recover(); r != nil {
			// Why recover: a bad sync must not stop registration; counts start empty.
			p.metrics.errors.WithLabelValues(reasonSync).Inc()
			p.log.WithField("panic", r).WithField("stack", string(debug.Stack())).Error("rebuilding GPU use counts")
		}
	}()
	c := p.node
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gpus = map[string]given{}
	for _, ctr := range ctrs {
		// Only the containers a plugin of nvmock's handled: a CUDA image's
		// NVIDIA_VISIBLE_DEVICES=all elsewhere holds none of these GPUs.
		if ctr.GetState() == api.ContainerState_CONTAINER_STOPPED || ctr.GetAnnotations()[InjectedAnnotation] == "" {
			continue
		}
		v, ok := lastEnv(ctr.GetEnv(), inject.VisibleDevicesEnv)
		if path.Clean(strings.TrimSpace(v)) == inject.DeviceListRoot {
			// A device plugin's volume-mounts list, which NVIDIA's runtime read.
			var dsts []string
			for _, m := range ctr.GetMounts() {
				if m.GetSource() == "/dev/null" {
					dsts = append(dsts, m.GetDestination())
				}
			}
			v = inject.MountedList(dsts)
		}
		if ok && v != "" {
			c.gpus[ctr.GetId()] = given{visible: v}
		}
	}
	c.refresh()
	c.rebuildUse()
	c.syncOverlays(ctrs)
	// Processes of containers that went while the plugin was away go too.
	if state := c.node.State; state != "" {
		ids := map[string]bool{}
		for _, ctr := range ctrs {
			if ctr.GetState() != api.ContainerState_CONTAINER_STOPPED {
				ids[owner(ctr.GetId())] = true
			}
		}
		err := p.updateState(state, func(s *live.State, _ int64) error {
			s.RemoveProcesses(func(q live.Process) bool { return strings.HasPrefix(q.Owner, "container:") && !ids[q.Owner] })
			return nil
		})
		if err != nil {
			p.metrics.errors.WithLabelValues(reasonProcess).Inc()
			p.log.WithError(err).Error("removing the GPU processes of containers that are gone")
		}
	}
}

// create is CreateContainer's body: a pod's bad request fails the
// container as it starts, through the overlay's runtime hook (refusal),
// where NVIDIA's runtime fails it; without the hook, its creation (an
// error). Any other failure leaves the container untouched (nil
// adjustment), logged and counted.
func (p *Plugin) create(pod *api.PodSandbox, ctr *api.Container) (out *api.ContainerAdjustment, refused error) {
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			// Why recover: a bug here must not block a pod; it starts untouched.
			out, refused = nil, nil
			p.metrics.errors.WithLabelValues(reasonPanic).Inc()
			p.metrics.skipFailed.Inc()
			p.fields(pod, ctr).WithField("panic", r).WithField("stack", string(debug.Stack())).Error("handling container panicked; leaving it untouched")
		}
		p.metrics.decision.Observe(time.Since(start).Seconds())
	}()

	var optedIn map[string]bool
	if set := p.optedIn.Load(); set != nil {
		optedIn = *set
	}
	ipod, ictr := toPod(pod), toContainer(ctr)
	if !inject.Selected(p.opt.Inject, optedIn, ipod, ictr) {
		// Not ours: no node probe, nothing counted against the overlay.
		p.metrics.skipNotSelected.Inc()
		return nil, nil
	}
	c := p.node
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refresh() // every time: see refresh
	if byAnother(ctr) {
		c.recordOthers(ctr)
		p.metrics.skipAnother.Inc()
		return nil, nil
	}
	if c.err != nil {
		if errors.Is(c.err, errNoOverlay) {
			p.metrics.skipNoOverlay.Inc()
			return nil, nil
		}
		// Why fail open: an unreadable overlay must not block pods; they run without GPUs.
		p.metrics.errors.WithLabelValues(reasonProbe).Inc()
		p.metrics.skipFailed.Inc()
		p.fields(pod, ctr).WithError(c.err).Error("cannot read the node overlay; leaving the container untouched")
		return nil, nil
	}
	node := c.node
	node.OptedIn = optedIn
	adj, ok, err := inject.Decide(p.opt.Inject, node, ipod, ictr)
	for _, w := range adj.Warnings {
		p.metrics.warnings.Inc()
		p.fields(pod, ctr).Warn(w)
	}
	if re := (*inject.RequestError)(nil); errors.As(err, &re) {
		p.metrics.refused.Inc()
		p.fields(pod, ctr).WithError(err).Warn("refused the container")
		if node.Hook != "" {
			// As NVIDIA's runtime: the container is created and fails to
			// start (runc create), so a pod that never restarts fails
			// instead of waiting for ever to be created.
			return refusal(node.Hook, "nvmock: "+err.Error()), nil
		}
		return nil, fmt.Errorf("nvmock: %w", err)
	}
	if err != nil {
		// Why fail open: the node's failing, not the pod's; the container runs without GPUs.
		p.metrics.errors.WithLabelValues(reasonDecide).Inc()
		p.metrics.skipFailed.Inc()
		p.fields(pod, ctr).WithError(err).Error("leaving the container untouched")
		return nil, nil
	}
	if !ok {
		p.metrics.skipNotSelected.Inc()
		return nil, nil
	}
	req, show, err := inject.Processes(ipod, ictr, adj, &node)
	if err == nil && show {
		err = p.showProcess(pod, ctr, req, node.State, &adj)
	}
	if err != nil {
		p.metrics.warnings.Inc()
		p.fields(pod, ctr).WithError(err).Warn("no GPU process shown for this container")
	}
	out = toNRI(&adj)
	out.AddAnnotation(InjectedAnnotation, p.host)
	// What the container was given, whoever gives it (NVIDIA's runtime
	// under its handler): the records outlive a re-probe by these UUIDs.
	visible := inject.Given(&node, &adj)
	c.record(ctr.GetId(), adj.GPUs, visible)
	c.useOverlay(ctr.GetId(), node.Overlay)
	if c.inUseErr != nil {
		p.metrics.errors.WithLabelValues(reasonInUse).Inc()
		p.fields(pod, ctr).WithError(c.inUseErr).Warn("cannot record the overlay in use; an install may remove it under this container")
	}
	p.metrics.injections.Inc()
	if p.log.Logger.IsLevelEnabled(logrus.InfoLevel) {
		p.fields(pod, ctr).WithField("gpus", visible).Info("injected")
	}
	return out, nil
}

func (p *Plugin) fields(pod *api.PodSandbox, ctr *api.Container) *logrus.Entry {
	return p.log.WithFields(logrus.Fields{
		"namespace": pod.GetNamespace(), "pod": pod.GetName(), "pod_uid": pod.GetUid(),
		"container": ctr.GetName(), "container_id": ctr.GetId(),
	})
}
