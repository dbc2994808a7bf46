package live

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Wake is the state's wake word, which every write bumps and wakes. Read
// it before the state: WaitWake then misses no write made after.
func (f *File) Wake() uint32 { return atomic.LoadUint32(&f.state().Header.Wake) }

// WaitWake sleeps until a write has changed the wake word from w, or d has
// passed.
func (f *File) WaitWake(w uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	// FUTEX_WAIT, shared: writers in any process wake the file's page.
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&f.state().Header.Wake)), 0, uintptr(w),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// WakeAll wakes whoever waits on the wake word, without a write.
func (f *File) WakeAll() {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&f.state().Header.Wake)), 1 /* FUTEX_WAKE */, 1<<30, 0, 0, 0)
}
