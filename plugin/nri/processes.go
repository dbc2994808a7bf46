package nri

import (
	"github.com/containerd/nri/pkg/api"

	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/plugin/inject"
)

// procStart is a process to show once its container runs.
type procStart struct {
	req   inject.ProcessRequest
	state string // the node's live state file
}

func owner(id string) string { return "container:" + id }

// started registers a started container's process on its GPUs. Failures
// are logged and counted: the container runs anyway.
func (p *Plugin) started(pod *api.PodSandbox, ctr *api.Container) {
	v, ok := p.procs.LoadAndDelete(ctr.GetId())
	if !ok {
		return
	}
	ps := v.(procStart)
	if ps.state == "" || ctr.GetPid() == 0 {
		return
	}
	err := p.updateState(ps.state, func(s *live.State, now int64) error {
		for _, g := range ps.req.GPUs {
			proc := live.Process{PID: ctr.GetPid(), GPU: g, Type: 1, UsedBytes: ps.req.Bytes, Name: ps.req.Name,
				Owner: owner(ctr.GetId())} // a host pid, whatever namespace the plugin runs in: the plugin, not a /proc check, removes it
			if err := s.AddProcess(proc, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		p.metrics.errors.WithLabelValues(reasonProcess).Inc()
		p.fields(pod, ctr).WithError(err).Error("showing the container's GPU process")
		return
	}
	p.fields(pod, ctr).WithField("pid", ctr.GetPid()).Info("GPU process shown")
}

// stopped removes a container's processes, and any whose pid has exited.
func (p *Plugin) stopped(pod *api.PodSandbox, ctr *api.Container) {
	p.procs.Delete(ctr.GetId())
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
