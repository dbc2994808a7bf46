package live

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// cursorFile keeps an XIDLog's place for the next one: the chart's next
// pod starts while the last one runs, and neither may log an XID twice or
// miss one between them.
type cursorFile struct {
	path    string
	lock    *os.File     // path.lock, locked while the log runs
	saved   *savedCursor // what the last log left; nil: none
	written []byte       // what this one wrote last
}

type savedCursor struct {
	State uint64 `json:"state"` // the inode of the state file followed
	XIDCursor
}

// lockCursor waits for the lock of the cursor at path, then reads what
// the last holder left. It returns nil if stop came first.
func lockCursor(path string, stop <-chan struct{}, logf func(string, ...any)) (*cursorFile, error) {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("cursor %s: not a file", path)
	}
	// Before the lock is made beside it: a cursor is replaced whole, so
	// one read while another log writes it is still whole.
	if b, err := os.ReadFile(path); err == nil && len(bytes.Trim(b, "\x00")) > 0 && !json.Valid(b) {
		return nil, fmt.Errorf("cursor %s: not an xidlog cursor; move it away or give another --cursor", path)
	}
	lf, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cursor: %w", err)
	}
	for waited := false; ; waited = true {
		err := unix.Flock(int(lf.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			lf.Close()
			return nil, fmt.Errorf("cursor %s.lock: %w", path, err)
		}
		if !waited {
			logf("another xidlog holds %s.lock: waiting for it to end", path)
		}
		select {
		case <-stop:
			lf.Close()
			return nil, nil
		case <-time.After(100 * time.Millisecond):
		}
	}
	c := &cursorFile{path: path, lock: lf}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		lf.Close()
		return nil, fmt.Errorf("cursor %s: %w", path, err)
	case len(bytes.Trim(b, "\x00")) == 0:
		// Empty or zeroed: what a crash can leave of a file just written.
		logf("cursor %s: empty; starting from now", path)
	default:
		var sc savedCursor
		if err := json.Unmarshal(b, &sc); err != nil {
			lf.Close()
			return nil, fmt.Errorf("cursor %s: not an xidlog cursor (%v); move it away or give another --cursor", path, err)
		}
		c.saved = &sc
	}
	return c, nil
}

func (c *cursorFile) unlock() { c.lock.Close() }

// follower goes on from where the last log left the state file ino, or
// takes a state it did not know as new; with nothing left, it starts now.
func (c *cursorFile) follower(ino uint64, s *State) *XIDFollower {
	switch {
	case c == nil || c.saved == nil:
		return NewXIDFollower(s, s.Now())
	case c.saved.State == ino:
		return c.saved.Follower()
	default:
		return XIDCursor{}.Follower() // made since the last log ended
	}
}

// save writes where fol is, if that moved, written whole and renamed over.
func (c *cursorFile) save(ino uint64, fol *XIDFollower) error {
	if c == nil {
		return nil
	}
	b, err := json.Marshal(savedCursor{State: ino, XIDCursor: fol.Cursor()})
	if err != nil || string(b) == string(c.written) {
		return err
	}
	tmp := c.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("cursor: %w", err)
	}
	if err := os.Rename(tmp, c.path); err != nil {
		return fmt.Errorf("cursor: %w", err)
	}
	c.written = b
	return nil
}
