package ibd

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/ibshim/umad"
	"github.com/nvmock/nvmock/profile"
)

// What programs and peers send is anyone's: whatever it is, the daemon
// goes on answering everyone else. A panic is recovered (and logged as
// "broke the daemon"), which would hide it from a test, and one while mu
// is held leaves the daemon hung; both fail here.

// errorHook records the daemon's Error-level log entries.
type errorHook struct {
	mu   sync.Mutex
	msgs []string
}

func (h *errorHook) Levels() []logrus.Level {
	return []logrus.Level{logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel}
}

func (h *errorHook) Fire(e *logrus.Entry) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, e.Message)
	return nil
}

func (h *errorHook) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.msgs {
		t.Errorf("the daemon logged: %s", m)
	}
}

// fuzzDaemon is daemonOf's daemon of node n (parsed once: most of a run's
// time otherwise), logging nowhere but the hook.
func fuzzDaemon(t *testing.T, n *profile.Node) (*Daemon, string, *fabric.Fabric, *errorHook) {
	f, err := fabric.Build(n, "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "ibd.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	h := &errorHook{}
	log := logrus.New()
	log.SetOutput(io.Discard)
	log.AddHook(h)
	d := New(n, f, log)
	go d.Serve(l)
	return d, sock, f, h
}

// splitMsgs cuts fuzz bytes into messages: a u16 (little-endian) length,
// then that many bytes (fewer at the end).
func splitMsgs(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= 2 {
		n := min(int(binary.LittleEndian.Uint16(b)), len(b)-2)
		out = append(out, b[2:2+n])
		b = b[2+n:]
	}
	return out
}

func joinMsgs(msgs ...[]byte) []byte {
	var b []byte
	for _, m := range msgs {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m)))
		b = append(b, m...)
	}
	return b
}

// within runs f, failing if it takes more than 5 s (as when mu was left
// locked); f's goroutine is then left behind.
func within(t *testing.T, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no end in 5 s; the daemon hangs", what)
	}
}

// askNodeInfo asks for a port's NodeInfo from a fresh connection.
func askNodeInfo(sock string, lid uint16) error {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		return err
	}
	defer c.Close()
	const tid = 0x5eed
	for _, m := range [][]byte{helloMsg(umad.KindUMAD), smp(lid, tid)} {
		if _, err := c.Write(m); err != nil {
			return err
		}
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return fmt.Errorf("no NodeInfo answer: %w", err)
		}
		r := packet(buf[:n])
		if n >= umadHdrLen+madLen && uint32(r.mad().tid()) == tid && r.mad().method() == methodResp {
			return nil
		}
	}
}

// drained reads c until its end, or until an async event of mark comes
// back: the daemon has read all that was sent before the raise of it.
func drained(c *net.UnixConn, mark uint64) error {
	buf := make([]byte, 8<<20)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil // the daemon closed it: fine, if nothing broke
		}
		if n == umad.AsyncEventSize && binary.LittleEndian.Uint64(buf) == mark {
			return nil
		}
	}
}

func raise(mark uint64) []byte {
	b := make([]byte, umad.AsyncRaiseSize)
	binary.LittleEndian.PutUint32(b, umad.Magic)
	binary.LittleEndian.PutUint32(b[4:], umad.OpAsyncRaise)
	binary.LittleEndian.PutUint64(b[8:], mark)
	return b
}

func FuzzProgramMessages(f *testing.F) {
	n, fab := fuzzNode(f)
	for _, s := range programSeeds(fab) {
		f.Add(true, s)
		f.Add(false, s)
	}
	f.Fuzz(func(t *testing.T, hello bool, data []byte) {
		d, sock, fab, h := fuzzDaemon(t, n)
		defer h.check(t) // also after a hang: what broke it
		// Whom the messages may reach: an ibping server and node-b's
		// daemon, reading all they are sent.
		server := dial(t, sock, helloMsg(umad.KindUMAD), registerMsg(0, vendorIBPing, ouiOpenFabric, methodGet))
		go io.Copy(io.Discard, server)
		_, r := nodeBLink(t, d, fab)
		go io.Copy(io.Discard, r)
		c := dial(t, sock)
		if hello {
			if _, err := c.Write(helloMsg(umad.KindUMAD)); err != nil {
				t.Fatal(err)
			}
		}
		const mark = 0x6d61726b
		read := make(chan error, 1)
		go func() { read <- drained(c, mark) }() // answers must not fill the socket
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		for _, m := range append(splitMsgs(data), raise(mark)) {
			if _, err := c.Write(m); errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the daemon stopped reading the connection")
			} else if err != nil {
				break // too big for the socket, or the daemon closed it
			}
		}
		within(t, "the daemon reads on after the messages", func() error { return <-read })
		c.Close()
		within(t, "a fresh connection's NodeInfo", func() error { return askNodeInfo(sock, fab.Find("mlx5_0").Ports[1].LID) })
		within(t, "the daemon forgets the connection", func() error { return forgotten(d, programHeld) })
	})
}

// forgotten waits up to 3 s until held (called with mu held) says
// nothing: what the daemon keeps for a connection or link ends with it.
func forgotten(d *Daemon, held func(*Daemon) string) error {
	for end := time.Now().Add(3 * time.Second); ; time.Sleep(time.Millisecond) {
		d.mu.Lock()
		what := held(d)
		d.mu.Unlock()
		if what == "" {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("after 3 s it holds %s", what)
		}
	}
}

// programHeld is what the daemon holds past the fuzzed program but the
// ibping server's registration; the groups it joined stay, as on an SA.
func programHeld(d *Daemon) string {
	issm := 0
	for _, n := range d.issm {
		issm += n
	}
	if len(d.pending) != 0 || len(d.agents) != 1 || len(d.async) != 0 || len(d.qpns) != 0 || len(d.attached) != 0 || issm != 0 {
		return fmt.Sprintf("%d requests waiting, %d agents, %d async fds, %d verbs contexts, %d MLIDs attached, %d SMs", len(d.pending), len(d.agents), len(d.async), len(d.qpns), len(d.attached), issm)
	}
	return ""
}

// peerHeld is what the daemon holds of node-b past its link: its
// requests, its link, its name and faults.
func peerHeld(d *Daemon) string {
	b := caAt(d.fab, 1, "mlx5_0")
	if len(d.pending) != 0 || len(d.links) != 0 || len(d.peers) != 0 || d.fab.Hosts[1] != fmt.Sprintf(d.fab.HostFormat, 2) || b.Down() {
		return fmt.Sprintf("%d requests waiting, %d links, %d peers, slot 1 named %q, its mlx5_0 down: %v", len(d.pending), len(d.links), len(d.peers), d.fab.Hosts[1], b.Down())
	}
	return ""
}

// greet opens a link to d as the daemon of slot, as nodeBLink does, but
// with an error for a daemon that does not answer.
func greet(d *Daemon, f *fabric.Fabric, slot int, host string) (net.Conn, *bufio.Reader, error) {
	ours, theirs := net.Pipe()
	go d.peerConn(theirs)
	ours.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(ours)
	if typ, _, err := readFrame(r); err != nil || typ != frameHello {
		ours.Close()
		return nil, nil, fmt.Errorf("no hello from the daemon: type %d, %v", typ, err)
	}
	me, _ := json.Marshal(hello{Fabric: f.Name, Slot: slot, Host: host})
	if _, err := ours.Write(frame(frameHello, [][]byte{me})); err != nil {
		ours.Close()
		return nil, nil, err
	}
	return ours, r, nil
}

// pingThrough sends an ibping from slot 2's mlx5_1 to node-a's on a new
// link, and waits for the host's answer (no program took it).
func pingThrough(d *Daemon, f *fabric.Fabric) error {
	link, r, err := greet(d, f, 2, "node-c")
	if err != nil {
		return err
	}
	defer link.Close()
	to := f.Find("mlx5_1").Ports[1]
	if _, err := link.Write(madFrame(f, caAt(f, 2, "mlx5_1"), to, ping(to.LID, 0x5eed, 1000))); err != nil {
		return err
	}
	for {
		typ, body, err := readFrame(r)
		if err != nil {
			return fmt.Errorf("no answer to a ping: %w", err)
		}
		if typ == frameMAD && len(body) >= 5+umadHdrLen+madLen && uint32(packet(body[5:]).mad().tid()) == 0x5eed {
			return nil
		}
	}
}

func FuzzPeerFrames(f *testing.F) {
	n, fab := fuzzNode(f)
	for _, s := range peerSeeds(fab) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, sock, fab, h := fuzzDaemon(t, n)
		defer h.check(t)
		// Programs the frames may reach: an ibping server and a verbs
		// context, reading all they are sent.
		server := dial(t, sock, helloMsg(umad.KindUMAD), registerMsg(0, vendorIBPing, ouiOpenFabric, methodGet))
		verbs := dial(t, sock, verbsHelloMsg("mlx5_0"))
		for _, c := range []*net.UnixConn{server, verbs} {
			go io.Copy(io.Discard, c)
		}
		link, r := nodeBLink(t, d, fab)
		go io.Copy(io.Discard, r)
		link.SetWriteDeadline(time.Now().Add(5 * time.Second))
		for _, m := range splitMsgs(data) {
			if len(m) == 0 {
				continue
			}
			if _, err := link.Write(frame(m[0], [][]byte{m[1:]})); err != nil {
				if errors.Is(err, io.ErrClosedPipe) {
					break // the daemon ended the link
				}
				t.Fatalf("the daemon stopped reading the link: %v", err)
			}
		}
		link.Close()
		within(t, "the daemon forgets the link", func() error { return forgotten(d, peerHeld) })
		within(t, "a program's NodeInfo", func() error { return askNodeInfo(sock, fab.Find("mlx5_0").Ports[1].LID) })
		within(t, "another peer's ping", func() error { return pingThrough(d, fab) })
	})
}
