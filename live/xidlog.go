package live

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// XIDLog writes the XIDs of a node's GPUs to a kernel log as the driver
// does, or to a file.
type XIDLog struct {
	State string // the state file
	Out   string // /dev/kmsg, or a file lines are appended to
	// Cursor, if set, is where the log keeps its place, locked while it
	// runs: a second log waits for the first to end and goes on from there.
	Cursor string
	// Logf reports what the log itself could not say (lost events,
	// failed writes); nil: nothing.
	Logf func(format string, args ...any)
	// Started, if set, is called once the state is read: what happens
	// after it is logged.
	Started func()
}

// place is what a log carries from one state file, or snapshot, to the
// next.
type place struct {
	fol *XIDFollower
	ino uint64 // the state file fol follows
	cur *cursorFile
}

// Run follows the state until stop is closed. A state or snapshot replaced
// (a reinstall) is followed on; one that cannot be read after the first is
// tried again each second.
func (x *XIDLog) Run(stop <-chan struct{}) error {
	kmsg, err := isKmsg(x.Out)
	if err != nil {
		return err
	}
	var p place
	if x.Cursor != "" {
		if p.cur, err = lockCursor(x.Cursor, stop, x.logf); err != nil || p.cur == nil {
			return err // nil: stopped while waiting for the other
		}
		defer p.cur.unlock()
	}
	last := "" // the error told, told once while it lasts
	for {
		err := x.follow(kmsg, &p, stop)
		if err == nil && isStopped(stop) {
			return nil
		}
		if err == nil {
			last = ""
		} else {
			if p.fol == nil {
				return err
			}
			if err.Error() != last {
				x.logf("%v; trying again each second", err)
				last = err.Error()
			}
			select {
			case <-stop:
				return nil
			case <-time.After(time.Second):
			}
		}
	}
}

func isStopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

func (x *XIDLog) logf(format string, args ...any) {
	if x.Logf != nil {
		x.Logf(format, args...)
	}
}

// follow logs from one state file and snapshot until stop, or until either
// is replaced.
func (x *XIDLog) follow(kmsg bool, p *place, stop <-chan struct{}) (err error) {
	f, err := OpenRead(x.State)
	if err != nil {
		return err
	}
	defer f.Close()
	// A state cut short under the mapping is one that cannot be read, tried
	// again (review: xidlog died of the SIGBUS).
	defer GuardFaults()()
	defer func() {
		if r := recover(); r != nil {
			err = FaultError(r, x.State)
		}
	}()
	snap, err := snapshotPath(x.State)
	if err != nil {
		return err
	}
	snapIno := inode(snap)
	hdr, devs, err := readSnapshotAt(snap)
	if err != nil {
		return err
	}
	driver := cstr(hdr.DriverVersion[:])
	s := f.Read()
	switch {
	case p.fol != nil && p.ino == f.ino:
		// The same state: a new snapshot (or a retry) changes no place.
	case p.fol != nil:
		p.fol = XIDCursor{}.Follower() // a new state file: all of it is new
	default:
		p.fol = p.cur.follower(f.ino, s)
	}
	p.ino = f.ino
	if x.Started != nil {
		x.Started()
		x.Started = nil // once
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-stop:
			f.WakeAll()
		case <-done:
		}
	}()
	named := map[int]bool{} // GPUs whose UUID line is out: once a driver load
	for {
		w := f.Wake()
		s := f.Read()
		now := s.Now()
		recs, lost, wake := p.fol.Next(s, now)
		if lost > 0 {
			x.logf("%d events were overwritten before they could be logged", lost)
		}
		for _, r := range recs {
			if r.GPU >= len(devs) {
				continue
			}
			var lines []string
			if !named[r.GPU] {
				named[r.GPU] = true
				lines = GPULines(&devs[r.GPU])
			}
			lines = append(lines, XIDLine(&devs[r.GPU], driver, r, ChargedTo(s, r)))
			lines = append(lines, AfterLines(&devs[r.GPU], r.XID)...)
			for _, l := range lines {
				if err := writeLine(x.Out, kmsg, l); err != nil {
					x.logf("%s: %v", x.Out, err)
				}
			}
		}
		// Not for a state gone: uninstall removes the cursor with it.
		if p.cur != nil && inode(x.State) == f.ino {
			if err := p.cur.save(f.ino, p.fol); err != nil {
				x.logf("%v", err)
			}
		}
		// Sleep until a write, the next timed fault, stop, or a second (a
		// frozen clock's faults come due only through a write; a file may
		// be replaced without one).
		d := time.Second
		if wake > 0 && s.Header.Frozen == 0 && time.Duration(wake-now) < d {
			d = time.Duration(wake-now) + time.Millisecond
		}
		if isStopped(stop) {
			return nil
		}
		f.WaitWake(w, d)
		if inode(x.State) != f.ino || inode(snap) != snapIno {
			return nil // reinstalled: another node, maybe other GPUs
		}
	}
}

// inode identifies the file at path (0: none): a file replaced (written
// whole and renamed over) has another.
func inode(path string) uint64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// isKmsg says whether out is the kernel log's device (char 1:11), which
// takes one record a write with its level in front.
func isKmsg(out string) (bool, error) {
	if out == "" {
		return false, errors.New("no output given: /dev/kmsg or a file")
	}
	st, err := os.Stat(out)
	if errors.Is(err, os.ErrNotExist) {
		if strings.HasPrefix(out, "/dev/") {
			// Not a file to make: a container without the node's devices.
			return false, fmt.Errorf("%s: no such device here; the kernel log is /dev/kmsg, which only a privileged container sees", out)
		}
		// A file to create: made now, so that a path that cannot be one
		// is told at the start, not as XIDs go missing.
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return false, err
		}
		return false, f.Close()
	}
	if err != nil {
		return false, err
	}
	t := st.Sys().(*syscall.Stat_t)
	if st.Mode()&os.ModeCharDevice != 0 {
		if unix.Major(uint64(t.Rdev)) == 1 && unix.Minor(uint64(t.Rdev)) == 11 {
			return true, nil
		}
		return false, fmt.Errorf("%s: a device other than the kernel log (/dev/kmsg is char 1:11)", out)
	}
	if !st.Mode().IsRegular() && st.Mode()&os.ModeNamedPipe == 0 {
		return false, fmt.Errorf("%s: not a file, a pipe or the kernel log", out)
	}
	return false, nil
}

// writeLine writes one line. The kernel log is opened for each record: the
// kernel rate-limits each open file to 10 records in 5 s, and the driver
// logs a burst of XIDs whole. A pipe without a reader drops the line.
func writeLine(out string, kmsg bool, line string) error {
	flags := os.O_WRONLY | os.O_APPEND | os.O_CREATE | syscall.O_NONBLOCK
	var b bytes.Buffer
	if kmsg {
		flags = os.O_WRONLY
		fmt.Fprintf(&b, "<%d>", xidLevel)
	}
	b.WriteString(line)
	b.WriteByte('\n')
	fd, err := os.OpenFile(out, flags, 0o644)
	if errors.Is(err, syscall.ENXIO) {
		return errors.New("a pipe with no reader: line dropped")
	}
	if err != nil {
		return err
	}
	_, err = fd.Write(b.Bytes())
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	return err
}
