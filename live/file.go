package live

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Size is the size of every state file.
const Size = HeaderSize + MaxGPUs*GPUSize + MaxEvents*EventSize + MaxProcs*ProcSize

// State is the whole file, as it lies on disk.
type State struct {
	Header Header
	GPUs   [MaxGPUs]GPU
	Events [MaxEvents]Event
	Procs  [MaxProcs]Proc
}

var magic = [8]byte{'N', 'V', 'M', 'O', 'C', 'K', 'L', 'V'}

// File is a state file mapped for writing.
type File struct {
	Path string
	f    *os.File
	mem  []byte
	ino  uint64 // of the file mapped (OpenRead's)
}

// IsState says whether path is missing or an nvmock state file, of any
// version: what Create may make or reset there without losing a file of
// someone else's.
func IsState(path string) bool {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	defer f.Close()
	// Empty or zero: a Create that did not finish.
	var m [len(magic)]byte
	_, err = io.ReadFull(f, m[:])
	return errors.Is(err, io.EOF) || err == nil && (m == magic || m == [len(magic)]byte{})
}

// zero empties fd: zeroed in place at the size readers map, as they may
// have it mapped; cut to nothing at any other size, which only another
// version's library maps (it dies of SIGBUS then: in a read-only directory
// no new file can take this one's place).
func zero(fd *os.File, size int64) error {
	if size != Size {
		return fd.Truncate(0)
	}
	err := unix.Fallocate(int(fd.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, 0, Size)
	if errors.Is(err, unix.EOPNOTSUPP) {
		_, err = fd.WriteAt(make([]byte, Size), 0)
	}
	return err
}

// Create makes the state file for a node of gpus GPUs at path, or resets the
// one there in place: processes that mapped it keep the same inode and see
// the fresh state. The file is never resized once made.
func Create(path string, gpus int, seed uint64) error {
	if gpus < 0 || gpus > MaxGPUs {
		return fmt.Errorf("state %s: %d GPUs; at most %d", path, gpus, MaxGPUs)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("state %s: %w", path, err)
	}
	fd, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("state %s: %w", path, err)
	}
	defer fd.Close()
	// Readable by every process whatever the umask: containers map it.
	if err := fd.Chmod(0o644); err != nil {
		return fmt.Errorf("state %s: %w", path, err)
	}
	if err := unix.Flock(int(fd.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("state %s: lock: %w", path, err)
	}
	st, err := fd.Stat()
	if err != nil {
		return fmt.Errorf("state %s: %w", path, err)
	}
	if st.Size() != Size || otherVersion(fd) {
		if st.Size() != 0 {
			// Another layout: readers refuse it by its size or version,
			// so replacing the inode strands nobody, and those still
			// running an older library keep reading the file they know.
			err := os.Remove(path)
			if err == nil {
				fd.Close()
				return Create(path, gpus, seed)
			}
			// A read-only directory (nvmock exec's driver root), the file
			// writable: reset in place, as nothing there maps a file of
			// another size (review: it could not be repaired there).
			if !errors.Is(err, syscall.EROFS) {
				return fmt.Errorf("state %s: %w", path, err)
			}
			// Zeroed, not cut short, when of the size a reader maps:
			// its map past the end would be SIGBUS (review).
			if err := zero(fd, st.Size()); err != nil {
				return fmt.Errorf("state %s: %w", path, err)
			}
		}
		// Allocated, not truncated to size: a full disk is an error here,
		// where the map's first store to a hole would be SIGBUS. Zeroed
		// blocks without writing them (0.2-0.3 ms against 1.7-2.6 for a
		// fresh process writing 152 KiB); written where there is no
		// fallocate.
		err := unix.Fallocate(int(fd.Fd()), 0, 0, Size)
		if errors.Is(err, unix.EOPNOTSUPP) {
			_, err = fd.WriteAt(make([]byte, Size), 0)
		}
		if err != nil {
			return fmt.Errorf("state %s: %w", path, err)
		}
	} else if err := unix.Fallocate(int(fd.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, Size); err != nil &&
		!errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("state %s: %w", path, err) // a sparse one of an older version, on a full disk
	}
	f, err := mapFile(path, fd)
	if err != nil {
		return err
	}
	defer f.Close()
	var s State
	s.Header = Header{Magic: magic, Version: Version, HeaderSize: HeaderSize, GPUSize: GPUSize,
		EventSize: EventSize, ProcSize: ProcSize, Gpus: uint32(gpus), Seed: seed}
	old := f.state()
	s.Header.Wake = old.Header.Wake
	s.Header.Generation = old.Header.Generation
	f.publish(&s)
	return nil
}

// Open maps the state file at path for writing. It is an error for the file
// to be missing or of another layout.
func Open(path string) (*File, error) {
	fd, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, openError(path, err)
	}
	defer fd.Close()
	f, err := mapFile(path, fd)
	if err != nil {
		return nil, err
	}
	// All zero is a Create that did not finish: Update says so.
	if h := f.state().Header; h.Magic == magic {
		if err := checkHeader(path, &h); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// Check says whether the state, as Read gave it, is one this nvmock wrote
// (a status must not show a state of no GPUs as a healthy node; review).
func (f *File) Check(s *State) error { return checkHeader(f.Path, &s.Header) }

// checkHeader refuses a header this nvmock did not write, or a damaged
// one, as the library does (libnvml/live.c): its readers would index
// past the GPU table.
func checkHeader(path string, h *Header) error {
	var what string
	switch {
	case h.Magic != magic || h.Version != Version:
		what = "not initialised by this nvmock"
	case h.HeaderSize != HeaderSize || h.GPUSize != GPUSize || h.EventSize != EventSize || h.ProcSize != ProcSize:
		what = fmt.Sprintf("damaged header: record sizes %d/%d/%d/%d, not %d/%d/%d/%d",
			h.HeaderSize, h.GPUSize, h.EventSize, h.ProcSize, HeaderSize, GPUSize, EventSize, ProcSize)
	case h.Gpus > MaxGPUs:
		what = fmt.Sprintf("damaged header: %d GPUs, at most %d", h.Gpus, MaxGPUs)
	default:
		return nil
	}
	return fmt.Errorf("state %s: %s; make it again (nvmock ctl create) or reinstall the node", path, what)
}

// openError says what to do about a state file that does not open.
func openError(path string, err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("state %s: no such file; install a node first (nvmock hostprep install), run under nvmock exec, or make one beside a snapshot (nvmock ctl create)", path)
	case errors.Is(err, syscall.EROFS), errors.Is(err, os.ErrPermission):
		// A GPU container sees the state read-only, by design.
		return fmt.Errorf("state %s: %w; change it on the node, in nvmock exec or in the chart's pod (kubectl exec -c nri)", path, err)
	}
	return fmt.Errorf("state %s: %w", path, err)
}

func mapFile(path string, fd *os.File) (*File, error) {
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("state %s: %w", path, err)
	}
	if st.Size() != Size {
		return nil, fmt.Errorf("state %s: %d bytes, not a state file of this nvmock (%d bytes); make it again (nvmock ctl create) or reinstall the node", path, st.Size(), Size)
	}
	mem, err := unix.Mmap(int(fd.Fd()), 0, Size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("state %s: mmap: %w", path, err)
	}
	f := &File{Path: path, mem: mem}
	if h := f.state().Header; h.Magic != magic && !bytes.Equal(h.Magic[:], make([]byte, 8)) {
		unix.Munmap(mem)
		return nil, fmt.Errorf("state %s: not an nvmock state file (bad magic)", path)
	}
	// A second descriptor for the writers' lock, held only inside Update.
	lf, err := os.Open(path)
	if err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("state %s: %w", path, err)
	}
	f.f = lf
	return f, nil
}

// Close unmaps the file.
func (f *File) Close() error {
	if f.f != nil {
		f.f.Close()
	}
	return unix.Munmap(f.mem)
}

func (f *File) state() *State { return (*State)(unsafe.Pointer(&f.mem[0])) }

// Read returns a consistent copy of the state, as readers see it. A writer
// that died inside the seqlock leaves it odd: after 100 ms Read takes the
// state as it lies.
func (f *File) Read() *State {
	live := f.state()
	deadline := time.Now().Add(100 * time.Millisecond)
	for {
		s1 := atomic.LoadUint32(&live.Header.Seq)
		if s1&1 != 0 && time.Now().Before(deadline) {
			time.Sleep(time.Microsecond)
			continue
		}
		c := *live
		if atomic.LoadUint32(&live.Header.Seq) == s1 {
			return &c
		}
	}
}

// Warn says what a writer found and went on from: on stderr, as the
// library says it; the NRI plugin sends it to its log.
var Warn = func(msg string) { fmt.Fprintln(os.Stderr, "nvmock: "+msg) }

// ErrUnchanged, returned by an Update's function, ends the update without
// publishing it: no new generation, no waiter woken.
var ErrUnchanged = errors.New("state unchanged")

// Update runs fn on a copy of the state under the writers' lock and
// publishes the result; readers never wait for it. now is the state's clock.
func (f *File) Update(fn func(s *State, now int64) error) error {
	if f.f == nil {
		return fmt.Errorf("state %s: opened for reading only", f.Path)
	}
	if err := lock(f.Path, int(f.f.Fd())); err != nil {
		return fmt.Errorf("state %s: lock: %w", f.Path, err)
	}
	defer unix.Flock(int(f.f.Fd()), unix.LOCK_UN)
	// Under the lock no writer is inside: an odd seq is a dead one's, and
	// what it copied in so far is published with this change (one copy of
	// the state: no earlier one to go back to), so that is said.
	c := *f.state()
	s := &c
	if c.Header.Seq&1 != 0 {
		Warn(fmt.Sprintf("state %s: a writer died while changing it; its change may be partly applied", f.Path))
	}
	if err := checkHeader(f.Path, &s.Header); err != nil {
		return err
	}
	// A damaged count is published clamped, as the library reads it.
	for i := range s.GPUs {
		s.GPUs[i].Faults = s.GPUs[i].faults()
	}
	if err := fn(s, s.Now()); err != nil {
		if errors.Is(err, ErrUnchanged) {
			return nil
		}
		return err
	}
	f.publish(s)
	return nil
}

// publish writes s over the file inside the seqlock and wakes waiters.
func (f *File) publish(s *State) {
	live := f.state()
	seq := atomic.LoadUint32(&live.Header.Seq)
	if seq&1 != 0 {
		seq++ // a writer died inside; its lock is gone with it
	}
	atomic.StoreUint32(&live.Header.Seq, seq+1)
	s.Header.Seq = seq + 1
	s.Header.Wake = atomic.LoadUint32(&live.Header.Wake)
	s.Header.Generation++
	s.Header.Procs = 0
	for i := range s.Procs {
		if s.Procs[i].PID != 0 {
			s.Header.Procs++
		}
	}
	*live = *s
	atomic.StoreUint32(&live.Header.Seq, seq+2)
	atomic.AddUint32(&live.Header.Wake, 1)
	// Event waiters sleep on the wake word (a shared futex: the key is the
	// file's page, so every process mapping it is woken).
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&live.Header.Wake)), 1 /* FUTEX_WAKE */, 1<<30, 0, 0, 0)
}

// Now is the state's clock: frozen, or the wall clock.
func (s *State) Now() int64 {
	if s.Header.Frozen != 0 {
		return int64(s.Header.FrozenNS)
	}
	return time.Now().UnixNano()
}

// ReadFile returns a consistent copy of the state file at path, for
// readers that may not write it (the NRI plugin's view of MIG devices).
func ReadFile(path string) (*State, error) {
	f, err := OpenRead(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Read(), nil
}

// OpenRead maps the state file at path for reading only: Update fails on
// it.
func OpenRead(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, openError(path, err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("state %s: %w", path, err)
	}
	if st.Size() != Size {
		return nil, fmt.Errorf("state %s: %d bytes, not a state file of this nvmock (%d bytes); make it again (nvmock ctl create) or reinstall the node", path, st.Size(), Size)
	}
	mem, err := unix.Mmap(int(fd.Fd()), 0, Size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("state %s: mmap: %w", path, err)
	}
	f := &File{Path: path, mem: mem, ino: st.Sys().(*syscall.Stat_t).Ino}
	if h := f.Read().Header; checkHeader(path, &h) != nil {
		unix.Munmap(mem)
		return nil, checkHeader(path, &h)
	}
	return f, nil
}

// Generation is the number of writes the state file at path has seen, read
// from its header alone; 0 when it cannot be read.
func Generation(path string) uint64 { return header(path).Generation }

// ProcessCount is the number of processes registered in the state file at
// path, read from its header alone (no lock, so a writer's change may not
// show yet); 0 when it cannot be read.
func ProcessCount(path string) uint32 { return header(path).Procs }

// header is the state file's header, zero when it cannot be read.
func header(path string) Header {
	fd, err := os.Open(path)
	if err != nil {
		return Header{}
	}
	defer fd.Close()
	var h [HeaderSize]byte
	if n, _ := fd.ReadAt(h[:], 0); n != HeaderSize {
		return Header{}
	}
	return *(*Header)(unsafe.Pointer(&h[0]))
}

// otherVersion says whether fd holds a state of another layout version
// (of the same size: one that reuses a pad field keeps it).
func otherVersion(fd *os.File) bool {
	var h [12]byte
	if n, _ := fd.ReadAt(h[:], 0); n != len(h) || [8]byte(h[:8]) != magic {
		return false // empty, zeroed, or not ours (IsState decides)
	}
	return binary.NativeEndian.Uint32(h[8:]) != Version
}
