package live

import (
	"slices"
	"testing"
	"time"
)

// next reads f's state and takes what the follower finds at now.
func next(t *testing.T, f *File, fol *XIDFollower, now int64) ([]Reported, int, int64) {
	t.Helper()
	return fol.Next(f.Read(), now)
}

func update(t *testing.T, f *File, fn func(s *State) error) {
	t.Helper()
	if err := f.Update(func(s *State, _ int64) error { return fn(s) }); err != nil {
		t.Fatal(err)
	}
}

func xids(rs []Reported) []uint32 {
	var out []uint32
	for _, r := range rs {
		out = append(out, r.XID)
	}
	return out
}

func TestFollowerReportsEachXIDOnceAfterItStarted(t *testing.T) {
	f := newState(t, 2)
	const t0 = int64(1_000_000_000_000)
	update(t, f, func(s *State) error {
		s.Publish(0, EventXID, 13, t0-1) // before the follower: not its business
		return s.AddFault(1, Fault{Kind: FaultThermal, XID: 0}, t0-1)
	})
	update(t, f, func(s *State) error { return s.XID(1, 79, t0-1) })
	fol := NewXIDFollower(f.Read(), t0)
	if got, _, _ := next(t, f, fol, t0); len(got) != 0 {
		t.Fatalf("before anything new: %+v, want nothing", got)
	}
	update(t, f, func(s *State) error {
		s.Publish(0, EventSingleBitECC, 0, t0+1) // not an XID
		if err := s.XID(0, 43, t0+2); err != nil {
			return err
		}
		return s.XID(0, 48, t0+3) // a fault: reported from the fault table
	})
	got, lost, _ := next(t, f, fol, t0+10)
	if !slices.Equal(xids(got), []uint32{43, 48}) || lost != 0 || got[0].GPU != 0 || got[1].TimeNS != t0+3 {
		t.Fatalf("got %+v (lost %d), want XID 43 then 48 on GPU 0", got, lost)
	}
	if got, _, _ := next(t, f, fol, t0+20); len(got) != 0 {
		t.Fatalf("the second look: %+v, want nothing again", got)
	}
}

func TestFollowerReportsATimedFaultWhenItTakesEffect(t *testing.T) {
	f := newState(t, 1)
	const t0 = int64(2_000_000_000_000)
	fol := NewXIDFollower(f.Read(), t0)
	at := t0 + int64(time.Second)
	update(t, f, func(s *State) error {
		if err := s.AddFault(0, Fault{Kind: FaultNvlinkDown, Count: 5, Trigger: TriggerAt, Param: uint64(at)}, t0); err != nil {
			return err
		}
		// Neither a process's fault nor a per-call one is the node's.
		if err := s.AddFault(0, Fault{Kind: FaultXID, XID: 31, PID: 77}, t0); err != nil {
			return err
		}
		return s.AddFault(0, Fault{Kind: FaultXID, XID: 32, Trigger: TriggerCalls, Param: 1}, t0)
	})
	got, _, wake := next(t, f, fol, t0+1)
	if len(got) != 0 || wake != at {
		t.Fatalf("before it is due: %+v, wake %d; want nothing, wake %d", got, wake, at)
	}
	got, _, wake = next(t, f, fol, at)
	if len(got) != 1 || got[0].XID != 74 || got[0].Link != 5 || got[0].TimeNS != at || wake != 0 {
		t.Fatalf("when due: %+v, wake %d; want XID 74 on link 5 at %d, nothing pending", got, wake, at)
	}
	if got, _, _ := next(t, f, fol, at+1); len(got) != 0 {
		t.Fatalf("after: %+v, want nothing", got)
	}
}

func TestFollowerCountsWhatTheRingOverwrote(t *testing.T) {
	f := newState(t, 1)
	fol := NewXIDFollower(f.Read(), 1)
	update(t, f, func(s *State) error {
		for i := range MaxEvents + 44 {
			s.Publish(0, EventXID, uint64(1+i%200), int64(10+i))
		}
		return nil
	})
	got, lost, _ := next(t, f, fol, 1<<40)
	if lost != 44 || len(got) != MaxEvents || got[0].TimeNS != 10+44 {
		t.Fatalf("lost %d, got %d from %+v; want 44 lost, %d from the 45th", lost, len(got), got[0], MaxEvents)
	}
}

func TestFollowerStartsOverOnAStateMadeAnew(t *testing.T) {
	// Made anew in place (a reinstall), with fewer events since than the
	// old state had, and with more.
	for _, after := range []int{1, 7} {
		f := newState(t, 1)
		update(t, f, func(s *State) error {
			for range 5 {
				s.Publish(0, EventXID, 13, 5)
			}
			return nil
		})
		fol := NewXIDFollower(f.Read(), 10)
		if err := Create(f.Path, 1, 1); err != nil {
			t.Fatal(err)
		}
		update(t, f, func(s *State) error {
			for range after {
				s.Publish(0, EventXID, 45, 20)
			}
			return nil
		})
		if got, _, _ := next(t, f, fol, 30); len(got) != after || got[0].XID != 45 {
			t.Fatalf("%d events after the state was made anew: %+v, want them all (XID 45)", after, got)
		}
	}
}

// The clock set back and forth (nvmock ctl clock) moves nothing twice, and
// an event stamped ahead of it waits for it, as the library's event sets do.
func TestFollowerFollowsTheClockAsTheLibraryDoes(t *testing.T) {
	f := newState(t, 1)
	const t0 = int64(3_000_000_000_000)
	fol := NewXIDFollower(f.Read(), t0)
	update(t, f, func(s *State) error { return s.XID(0, 48, t0+5) })
	if got, _, _ := next(t, f, fol, t0+10); !slices.Equal(xids(got), []uint32{48}) {
		t.Fatalf("at first: %+v, want XID 48", got)
	}
	for _, now := range []int64{t0 + 1, t0 + 20} { // back before it, then past it again
		if got, _, _ := next(t, f, fol, now); len(got) != 0 {
			t.Fatalf("with the clock at t0%+d: %+v, want nothing again", now-t0, got)
		}
	}
	update(t, f, func(s *State) error { s.Publish(0, EventXID, 13, t0+1000); return nil })
	got, _, wake := next(t, f, fol, t0+30)
	if len(got) != 0 || wake != t0+1000 {
		t.Fatalf("an event stamped ahead: %+v, wake t0%+d; want it to wait until t0+1000", got, wake-t0)
	}
	if got, _, _ := next(t, f, fol, t0+1000); !slices.Equal(xids(got), []uint32{13}) {
		t.Fatalf("when its time comes: %+v, want XID 13", got)
	}
}

// A follower goes on from another's cursor: nothing twice, nothing missed.
func TestFollowerGoesOnFromACursor(t *testing.T) {
	f := newState(t, 1)
	const t0 = int64(4_000_000_000_000)
	a := NewXIDFollower(f.Read(), t0)
	update(t, f, func(s *State) error {
		s.Publish(0, EventXID, 13, t0+1)
		return s.XID(0, 48, t0+2)
	})
	if got, _, _ := next(t, f, a, t0+3); !slices.Equal(xids(got), []uint32{13, 48}) {
		t.Fatalf("the first: %+v", got)
	}
	c := a.Cursor()
	update(t, f, func(s *State) error { s.Publish(0, EventXID, 43, t0+4); return nil }) // between the two
	b := c.Follower()
	if got, _, _ := next(t, f, b, t0+5); !slices.Equal(xids(got), []uint32{43}) {
		t.Fatalf("the second, from the first's cursor: %+v, want XID 43 alone", got)
	}
	// The zero cursor takes a state as new: all of it.
	if got, _, _ := next(t, f, XIDCursor{}.Follower(), t0+6); !slices.Equal(xids(got), []uint32{13, 48, 43}) {
		t.Fatalf("from the zero cursor: %+v, want all three", got)
	}
}

// XID 74 again on a link already down reports that link.
func TestFollowerGivesARepeatedXID74ItsLink(t *testing.T) {
	f := newState(t, 1)
	const t0 = int64(5_000_000_000_000)
	update(t, f, func(s *State) error { return s.AddFault(0, Fault{Kind: FaultNvlinkDown, XID: 74, Count: 6}, t0) })
	fol := NewXIDFollower(f.Read(), t0+1)
	update(t, f, func(s *State) error { return s.XID(0, 74, t0+2) })
	if got, _, _ := next(t, f, fol, t0+3); len(got) != 1 || got[0].XID != 74 || got[0].Link != 6 {
		t.Fatalf("got %+v, want XID 74 on link 6", got)
	}
}
