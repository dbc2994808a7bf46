package live

import (
	"slices"
	"sort"
)

// Reported is one XID a GPU reported: what the driver would log.
type Reported struct {
	GPU    int
	XID    uint32
	TimeNS int64
	Link   uint32 // the NVLink an nvlink_down fault took down
}

// XIDFollower finds the XIDs a node's GPUs report from one state to the
// next, each once and when the library's event sets get them
// (libnvml/events.c): the ring's XID events (nvmock ctl xid) and the
// node-wide timed faults with an XID as they take effect. Faults scoped to
// a process, or triggered by its calls, happen in that process's view
// alone, so no follower sees them, as event waiters in other processes do
// not.
type XIDFollower struct {
	ring  uint32          // ring events before this one are done
	last  Event           // the one before it, as read
	start int64           // what took effect before this happened before us
	seen  map[uint32]bool // fault ids reported (or there before us)
}

// NewXIDFollower follows s from now on: what happened before is not
// reported.
func NewXIDFollower(s *State, now int64) *XIDFollower {
	f := &XIDFollower{ring: s.Header.Ring, start: now, seen: map[uint32]bool{}}
	f.last = s.Events[(f.ring-1)%MaxEvents]
	f.Next(s, now)
	return f
}

// XIDCursor is where a follower is, for another to go on from (the chart's
// next pod).
type XIDCursor struct {
	Ring  uint32
	Last  Event
	Start int64
	Seen  []uint32
}

// Cursor is where f is.
func (f *XIDFollower) Cursor() XIDCursor {
	c := XIDCursor{Ring: f.ring, Last: f.last, Start: f.start}
	for id := range f.seen {
		c.Seen = append(c.Seen, id)
	}
	slices.Sort(c.Seen)
	return c
}

// Follower goes on from c; the zero cursor takes all of a state as new.
func (c XIDCursor) Follower() *XIDFollower {
	f := &XIDFollower{ring: c.Ring, last: c.Last, start: c.Start, seen: map[uint32]bool{}}
	for _, id := range c.Seen {
		f.seen[id] = true
	}
	return f
}

// Next returns what was reported since the last call, oldest first; lost
// counts the ring's events overwritten before they were read, and wake is
// when the next event or timed fault is due (0: none pending).
func (f *XIDFollower) Next(s *State, now int64) (out []Reported, lost int, wake int64) {
	ring := s.Header.Ring
	if n := ring - f.ring; n > 1<<31 || n < MaxEvents && s.Events[(f.ring-1)%MaxEvents] != f.last {
		// The last event read is gone: the state was made anew (a
		// reinstall), and all of it is new.
		*f = XIDFollower{seen: map[uint32]bool{}}
	}
	if n := ring - f.ring; n > MaxEvents {
		lost = int(n - MaxEvents)
		f.ring = ring - MaxEvents
	}
	later := func(at int64) {
		if wake == 0 || at < wake {
			wake = at
		}
	}
	for ; f.ring != ring; f.ring++ {
		e := s.Events[f.ring%MaxEvents]
		if int64(e.TimeNS) > now {
			later(int64(e.TimeNS)) // stamped ahead of a clock set back: the library waits too
			break
		}
		if e.Serial != uint64(f.ring)+1 || e.Type != EventXID || int(e.GPU) >= int(s.Header.Gpus) {
			continue
		}
		r := Reported{GPU: int(e.GPU), XID: uint32(e.Data), TimeNS: int64(e.TimeNS)}
		if r.XID == 74 {
			// Again on a link already down (live.State.XID): that link.
			if i := s.active(r.GPU, FaultNvlinkDown, 74, now); i >= 0 {
				r.Link = s.GPUs[r.GPU].FaultCount[i]
			}
		}
		out = append(out, r)
	}
	f.last = s.Events[(f.ring-1)%MaxEvents]
	// Only the faults still in the state are remembered, so that the map
	// stays as small as the fault table; one reported stays so while it is
	// there, whatever the clock does after.
	seen := map[uint32]bool{}
	for gpu := 0; gpu < int(s.Header.Gpus) && gpu < MaxGPUs; gpu++ {
		g := &s.GPUs[gpu]
		for i := uint32(0); i < g.faults(); i++ {
			if g.FaultTrigger[i] != TriggerAt || g.FaultPID[i] != 0 || g.FaultXID[i] == 0 {
				continue
			}
			id, at := g.FaultID[i], int64(g.FaultParam[i])
			switch {
			case f.seen[id]:
				seen[id] = true
			case at > now:
				later(at)
			default:
				seen[id] = true
				if at >= f.start {
					r := Reported{GPU: gpu, XID: g.FaultXID[i], TimeNS: at}
					if g.FaultKind[i] == FaultNvlinkDown {
						r.Link = g.FaultCount[i]
					}
					out = append(out, r)
				}
			}
		}
	}
	f.seen = seen
	sort.SliceStable(out, func(i, j int) bool { return out[i].TimeNS < out[j].TimeNS })
	return out, lost, wake
}
