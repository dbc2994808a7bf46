package ibd

import (
	"encoding/binary"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/nvmock/nvmock/ibshim/umad"
)

// A verbs context's async fd hears its HCA's port go down and up, once
// each; another HCA's change is not its.
func TestAsyncFdsHearTheirPortGoDownAndUp(t *testing.T) {
	d, _ := quietDaemon(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "faults.json")
	set := func(s string) { t.Helper(); setFaults(t, d, path, s) }
	set(`[]`)
	d.FollowFaults(path)
	sock := filepath.Join(dir, "ibd.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go d.Serve(l)
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hello := make([]byte, umad.VerbsHelloSize)
	binary.LittleEndian.PutUint32(hello, umad.Magic)
	binary.LittleEndian.PutUint32(hello[4:], umad.OpAsyncHello)
	binary.LittleEndian.PutUint32(hello[12:], 1)
	copy(hello[16:], "mlx5_0")
	if _, err := c.Write(hello); err != nil {
		t.Fatal(err)
	}
	// The hello is served before the faults change.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		d.mu.Lock()
		heard := len(d.async)
		d.mu.Unlock()
		if heard == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not take the async hello")
		}
	}
	next := func() (port uint64, event uint32) {
		t.Helper()
		buf := make([]byte, 64)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		k, err := c.Read(buf)
		if err != nil || k != umad.AsyncEventSize {
			t.Fatalf("event: %d bytes, %v", k, err)
		}
		return binary.NativeEndian.Uint64(buf), binary.NativeEndian.Uint32(buf[8:])
	}
	set(`[{"HCA":"mlx5_3","Down":true}]`) // not mlx5_0's
	set(`[{"HCA":"mlx5_3","Down":true},{"HCA":"mlx5_0","Down":true}]`)
	if port, ev := next(); port != 1 || ev != umad.EventPortErr {
		t.Errorf("first event: port %d, type %d; want port 1, IBV_EVENT_PORT_ERR", port, ev)
	}
	set(`[]`)
	if port, ev := next(); port != 1 || ev != umad.EventPortActive {
		t.Errorf("second event: port %d, type %d; want port 1, IBV_EVENT_PORT_ACTIVE", port, ev)
	}
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if k, err := c.Read(make([]byte, 64)); err == nil {
		t.Errorf("a third event of %d bytes", k)
	}
}
