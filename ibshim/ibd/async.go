package ibd

import (
	"bytes"
	"encoding/binary"
	"syscall"

	"github.com/nvmock/nvmock/ibshim/umad"
)

// asyncHello takes a verbs context's async fd: it hears of its HCA port
// going down and up, as an HCA raises IBV_EVENT_PORT_ERR and
// IBV_EVENT_PORT_ACTIVE. An HCA the daemon does not have hears nothing.
// The provider raises the events of its own objects (a CQ overrun, an
// SRQ's limit, a QP's last WQE) through it too: OpAsyncRaise comes back
// as the event, as only the daemon's end can make the fd readable.
func (d *Daemon) asyncHello(c *conn, msg []byte) {
	if len(msg) < umad.VerbsHelloSize || binary.LittleEndian.Uint32(msg[12:]) != 1 {
		return
	}
	name, _, _ := bytes.Cut(msg[16:umad.VerbsHelloSize], []byte{0})
	d.mu.Lock()
	defer d.mu.Unlock()
	for p, n := range d.hcas {
		if n == string(name) {
			c.asyncPort, c.asyncDown = p, p.Down()
			d.async[c] = true
		}
	}
}

// portEvents tells async fds of the ports whose state changed; mu is held,
// so nothing here waits: an event for an fd with no room (hundreds left
// unread, as by a program that never reads its async fd) is lost.
func (d *Daemon) portEvents() {
	for c := range d.async {
		down := c.asyncPort.Down()
		if down == c.asyncDown {
			continue
		}
		c.asyncDown = down
		ev := make([]byte, umad.AsyncEventSize)
		binary.NativeEndian.PutUint64(ev, 1) // the port number
		typ := umad.EventPortActive
		if down {
			typ = umad.EventPortErr
		}
		binary.NativeEndian.PutUint32(ev[8:], typ)
		sendNow(c, ev)
	}
}

// sendNow sends b to c if there is room at once, or loses it.
func sendNow(c *conn, b []byte) {
	if rc, err := c.uc.SyscallConn(); err == nil {
		rc.Write(func(fd uintptr) bool {
			syscall.Sendto(int(fd), b, syscall.MSG_DONTWAIT, nil)
			return true // one try, never a wait
		})
	}
}
