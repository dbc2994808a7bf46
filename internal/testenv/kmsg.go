package testenv

import (
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Kmsg reads the kernel log's records written after it was opened.
type Kmsg struct{ fd *os.File }

// OpenKmsg opens the kernel log at its end; it needs root.
func OpenKmsg(t testing.TB) *Kmsg {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root, to read and write /dev/kmsg")
	}
	fd, err := os.Open("/dev/kmsg")
	if err != nil {
		Missing(t, "/dev/kmsg: %v", err)
	}
	t.Cleanup(func() { fd.Close() })
	if _, err := fd.Seek(0, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	if err := syscall.SetNonblock(int(fd.Fd()), true); err != nil {
		t.Fatal(err)
	}
	return &Kmsg{fd}
}

// Until reads records until one's text contains s, for d at most; it
// returns the record's priority (facility * 8 + level) and text.
func (k *Kmsg) Until(t testing.TB, s string, d time.Duration) (int, string) {
	t.Helper()
	buf := make([]byte, 8192) // more than any record holds
	for end := time.Now().Add(d); time.Now().Before(end); {
		n, err := syscall.Read(int(k.fd.Fd()), buf)
		switch err {
		case nil:
		case syscall.EAGAIN:
			time.Sleep(10 * time.Millisecond)
			continue
		case syscall.EPIPE:
			continue // overwritten before it was read: the next one follows
		default:
			t.Fatalf("/dev/kmsg: %v", err)
		}
		head, text, _ := strings.Cut(string(buf[:n]), ";")
		text, _, _ = strings.Cut(text, "\n")
		if strings.Contains(text, s) {
			prio, _ := strconv.Atoi(strings.SplitN(head, ",", 2)[0])
			return prio, text
		}
	}
	t.Fatalf("no record with %q in the kernel log in %s", s, d)
	return 0, ""
}
