package live

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// XIDLog writes the XIDs of a node's GPUs to a kernel log as the driver
// does, or to a file.
type XIDLog struct {
	State string // the state file
	Out   string // /dev/kmsg, or a file lines are appended to
	// Logf reports what the log itself could not say (lost events,
	// failed writes); nil: nothing.
	Logf func(format string, args ...any)
	// Started, if set, is called once the state is read: what happens
	// after it is logged.
	Started func()
}

// Run follows the state until stop is closed. It rereads the snapshot and
// starts over when the state file is made anew (a reinstall).
func (x *XIDLog) Run(stop <-chan struct{}) error {
	kmsg, err := isKmsg(x.Out)
	if err != nil {
		return err
	}
	for {
		again, err := x.follow(kmsg, stop)
		if err != nil || !again {
			return err
		}
	}
}

// follow logs from one state file until it is replaced (again) or stop.
func (x *XIDLog) follow(kmsg bool, stop <-chan struct{}) (again bool, err error) {
	f, err := OpenRead(x.State)
	if err != nil {
		return false, err
	}
	defer f.Close()
	snap, err := snapshotPath(x.State)
	if err != nil {
		return false, err
	}
	ino := inodes(x.State, snap)
	hdr, devs, err := readSnapshot(x.State)
	if err != nil {
		return false, err
	}
	driver := cstr(hdr.DriverVersion[:])
	s := f.Read()
	fol := NewXIDFollower(s, s.Now())
	named := map[int]bool{} // GPUs whose UUID line is out: once a driver load
	if x.Started != nil {
		x.Started()
		x.Started = nil // not again for a state made anew
	}
	for {
		w := f.Wake()
		s := f.Read()
		now := s.Now()
		recs, lost, wake := fol.Next(s, now)
		if lost > 0 && x.Logf != nil {
			x.Logf("%d events were overwritten before they could be logged", lost)
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
			for _, l := range lines {
				if err := writeLine(x.Out, kmsg, l); err != nil && x.Logf != nil {
					x.Logf("%s: %v", x.Out, err)
				}
			}
		}
		// Sleep until a write, the next timed fault, or a second (a frozen
		// clock's faults come due only through a write; the file may be
		// replaced without one).
		d := time.Second
		if wake > 0 && s.Header.Frozen == 0 && time.Duration(wake-now) < d {
			d = time.Duration(wake-now) + time.Millisecond
		}
		select {
		case <-stop:
			return false, nil
		default:
		}
		f.WaitWake(w, d)
		if inodes(x.State, snap) != ino {
			return true, nil // reinstalled: another node, maybe other GPUs
		}
	}
}

// inodes identify the files at paths: a file replaced (written whole and
// renamed over) has another.
func inodes(paths ...string) string {
	var b bytes.Buffer
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			fmt.Fprintf(&b, "%d ", st.Sys().(*syscall.Stat_t).Ino)
		}
	}
	return b.String()
}

// isKmsg says whether out is the kernel log's device (char 1:11), which
// takes one record a write with its level in front.
func isKmsg(out string) (bool, error) {
	st, err := os.Stat(out)
	if os.IsNotExist(err) {
		return false, nil // a file to create
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
// logs a burst of XIDs whole.
func writeLine(out string, kmsg bool, line string) error {
	flags := os.O_WRONLY | os.O_APPEND | os.O_CREATE
	var b bytes.Buffer
	if kmsg {
		flags = os.O_WRONLY
		fmt.Fprintf(&b, "<%d>", xidLevel)
	}
	b.WriteString(line)
	b.WriteByte('\n')
	fd, err := os.OpenFile(out, flags, 0o644)
	if err != nil {
		return err
	}
	_, err = fd.Write(b.Bytes())
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	return err
}
