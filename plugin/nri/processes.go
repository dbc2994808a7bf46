package nri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/fsnotify/fsnotify"
	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/plugin/inject"
)

// procStart is a process to show once its container's runtime hook
// reports the container's pid.
type procStart struct {
	req   inject.ProcessRequest
	state string // the node's live state file
	log   *logrus.Entry
}

func owner(id string) string { return "container:" + id }

// starts follows the directory where runtime hooks write the pids of
// containers that show as GPU processes (hostprep.StartedDir). It is
// armed at the first such container, so that a node whose pods never ask
// pays nothing.
type starts struct {
	mu  sync.Mutex
	dir string
	w   *fsnotify.Watcher
}

// showProcess has the container's runtime hook report its pid, and
// registers the process when it does. The pid comes from the hook, not
// from a PostStartContainer call, which containerd would make, and wait
// for, at every container's start on the node.
func (p *Plugin) showProcess(pod *api.PodSandbox, ctr *api.Container, req inject.ProcessRequest, state string, adj *inject.Adjustment) error {
	if state == "" || len(adj.Hooks) != 1 {
		return fmt.Errorf("the node's overlay has no live state or runtime hook (an older install; install it again)")
	}
	dir := hostprep.StartedDir(state)
	if err := p.follow(dir); err != nil {
		return err
	}
	p.procs.Store(ctr.GetId(), procStart{req: req, state: state, log: p.fields(pod, ctr)})
	adj.Hooks[0] = adj.Hooks[0].WithPIDFile(filepath.Join(dir, ctr.GetId()))
	return nil
}

// follow starts watching dir, once, until the plugin's Run ends, or again
// if it went (an uninstall). Files there from before (a plugin that went
// away) are removed: their containers' requests went with it. Only old
// ones: in a rolling update the other pod's plugin follows dir too, and a
// file it has yet to read is milliseconds old.
func (p *Plugin) follow(dir string) error {
	s := &p.starts
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil && s.dir == dir && isDir(dir) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("GPU processes: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("GPU processes: watch %s: %w", dir, err)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return fmt.Errorf("GPU processes: watch %s: %w", dir, err)
	}
	sweep(dir)
	if s.w != nil {
		s.w.Close()
	}
	s.dir, s.w = dir, w
	go p.reported(p.runCtx(), w)
	return nil
}

// reported registers the process of each pid file a hook writes.
func (p *Plugin) reported(ctx context.Context, w *fsnotify.Watcher) {
	go func() {
		<-ctx.Done()
		w.Close()
	}()
	for {
		select {
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			// The hook renames NAME.tmp to NAME: a move in, reported as Create.
			if ev.Has(fsnotify.Create) && !strings.HasSuffix(ev.Name, ".tmp") {
				p.pidFile(ev.Name)
			}
			if ev.Has(fsnotify.Remove) && p.unfollow(w, ev.Name) {
				return // uninstalled: the next container asking makes it again
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			p.metrics.errors.WithLabelValues(reasonProcess).Inc()
			p.log.WithError(err).Error("following the runtime hooks' pid files")
		}
	}
}

// unfollow forgets w if path is the directory it follows, gone.
func (p *Plugin) unfollow(w *fsnotify.Watcher, path string) bool {
	s := &p.starts
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != w || path != s.dir {
		return false
	}
	w.Close()
	s.w, s.dir = nil, ""
	return true
}

// leftoverAge: a pid file this old was never read by a live plugin.
const leftoverAge = time.Minute

// sweep removes dir's leftover pid files: at the first container that asks,
// and at each report after (review: a plugin that restarted between a
// hook's write and its read left the file for good).
func sweep(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > leftoverAge {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

func (p *Plugin) pidFile(path string) {
	if _, ok := p.procs.Load(filepath.Base(path)); !ok {
		return // the other plugin's in a rolling update (it reads it), or stopped already
	}
	data, err := os.ReadFile(path)
	os.Remove(path)
	sweep(filepath.Dir(path))
	if err != nil {
		return // gone already: a leftover removed at start
	}
	pid, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 32)
	if err != nil || pid == 0 {
		p.metrics.errors.WithLabelValues(reasonProcess).Inc()
		p.log.WithField("file", path).Errorf("the runtime hook wrote %q, not a pid", data)
		return
	}
	p.started(filepath.Base(path), uint32(pid))
}

// started registers a started container's process on its GPUs. Failures
// are logged and counted: the container runs anyway.
func (p *Plugin) started(id string, pid uint32) {
	p.procMu.Lock()
	defer p.procMu.Unlock()
	v, ok := p.procs.LoadAndDelete(id)
	if !ok {
		return // stopped already, or asked of a plugin before this one
	}
	ps := v.(procStart)
	err := p.updateState(ps.state, func(s *live.State, now int64) error {
		// A pid on the node, whatever namespace the plugin runs in: the
		// plugin, not a /proc check, removes it.
		proc := live.Process{PID: pid, Type: 1, UsedBytes: ps.req.Bytes, Name: ps.req.Name, Owner: owner(id)}
		for _, g := range ps.req.GPUs {
			proc.GPU = g
			if err := s.AddProcess(proc, now); err != nil {
				return err
			}
		}
		if m := ps.req.MIG; m != nil {
			proc.GPU, proc.MIG = m.GPU, &live.MIGRef{GI: m.GI, CI: m.CI}
			return s.AddProcess(proc, now)
		}
		return nil
	})
	if err != nil {
		p.metrics.errors.WithLabelValues(reasonProcess).Inc()
		ps.log.WithError(err).Error("showing the container's GPU process")
		return
	}
	ps.log.WithField("pid", pid).Info("GPU process shown")
}

// stopped removes a container's processes, and any whose pid has exited.
func (p *Plugin) stopped(pod *api.PodSandbox, ctr *api.Container) {
	// Under procMu: a pid reported now registers before this removes it,
	// or not at all.
	p.procMu.Lock()
	defer p.procMu.Unlock()
	if v, ok := p.procs.LoadAndDelete(ctr.GetId()); ok {
		// Its pid file, if the hook wrote it before this plugin read it:
		// no plugin reads it now.
		os.Remove(filepath.Join(hostprep.StartedDir(v.(procStart).state), ctr.GetId()))
	}
	p.node.mu.Lock()
	state := p.node.node.State
	p.node.mu.Unlock()
	// Most containers stop with no process registered on the node: one
	// read of the state's header, not its lock.
	if state == "" || live.ProcessCount(state) == 0 {
		return
	}
	id := owner(ctr.GetId())
	err := p.updateState(state, func(s *live.State, _ int64) error {
		if s.RemoveProcesses(func(q live.Process) bool { return q.Owner == id || live.Dead(q) }) == 0 {
			// Not published: every container's stop comes here, and a
			// publish would wake every waiter and make the next creation
			// re-read the node's MIG devices.
			return live.ErrUnchanged
		}
		return nil
	})
	if err != nil {
		p.metrics.errors.WithLabelValues(reasonProcess).Inc()
		p.fields(pod, ctr).WithError(err).Error("removing the container's GPU process")
	}
}

func (p *Plugin) updateState(path string, fn func(s *live.State, now int64) error) error {
	f, err := live.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Update(fn)
}

// runCtx is Run's context: what the pid files' watcher lives for.
func (p *Plugin) runCtx() context.Context {
	if p.ctx == nil {
		return context.Background()
	}
	return p.ctx
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
