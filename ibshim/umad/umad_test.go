//go:build integration

package umad

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
)

var (
	le = binary.LittleEndian
	be = binary.BigEndian
)

// shim is the built libnvmock-umad.so.
func shim(t *testing.T) string {
	t.Helper()
	p := filepath.Join(testenv.BuildDir(), "driver", "usr", "lib64", "nvmock", "libnvmock-umad.so")
	if _, err := os.Stat(p); err != nil {
		testenv.Missing(t, "%s (run make build)", p)
	}
	return p
}

// inFabric runs a real tool with the shim preloaded, in a private mount
// namespace where testdata/sys/class is /sys/class: libibumad reads
// /sys/class/infiniband* directly. /dev/infiniband need not exist, the
// shim catches the path.
func inFabric(ctx context.Context, t *testing.T, env []string, tool string, args ...string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root, for a private mount namespace")
	}
	unshare := testenv.Tool(t, "unshare")
	path := testenv.Tool(t, tool)
	fixture, err := filepath.Abs("testdata/sys/class")
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{"--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" /sys/class && shift && exec env "$@"`, "sh", fixture}
	argv = append(append(append(argv, env...), path), args...)
	return exec.CommandContext(ctx, unshare, argv...)
}

// preload is the environment that points the shim at a daemon socket.
func preload(t *testing.T, socket string) []string {
	return []string{"LD_PRELOAD=" + shim(t), SocketEnv + "=" + socket}
}

func run(t *testing.T, cmd *exec.Cmd) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// fakeIBD is the daemon's side of the protocol: it records what each
// connection sends and answers MADs with answer.
type fakeIBD struct {
	path   string
	answer func(c *ibdConn, umad []byte) [][]byte
	ln     *net.UnixListener

	mu    sync.Mutex
	conns []*ibdConn
	bad   []string
}

type ibdConn struct {
	conn    *net.UnixConn
	hello   []uint32 // umad_index, pid, kind
	regs    []register
	unregs  []uint32
	mads    [][]byte // every ib_user_mad received
	control []string // control messages in order, for failure messages
}

type register struct {
	Agent, QPN           uint32
	Class, Version, RMPP uint8
	OUI                  uint32
	Methods              [4]uint32
}

func newFakeIBD(t *testing.T, answer func(c *ibdConn, umad []byte) [][]byte) *fakeIBD {
	t.Helper()
	return fakeIBDAt(t, filepath.Join(t.TempDir(), "ibd.sock"), answer)
}

// fakeIBDAt listens at path, as a daemon that follows another would.
func fakeIBDAt(t *testing.T, path string, answer func(c *ibdConn, umad []byte) [][]byte) *fakeIBD {
	t.Helper()
	d := &fakeIBD{path: path, answer: answer}
	// Its word, as a real daemon writes one (ibd.Listen).
	if err := os.WriteFile(path+IDSuffix, []byte(fmt.Sprintf("%032x", time.Now().UnixNano())), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: d.path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	d.ln = ln
	t.Cleanup(func() {
		d.stop()
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, b := range d.bad {
			t.Errorf("fake daemon: %s", b)
		}
	})
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			ic := &ibdConn{conn: c}
			d.mu.Lock()
			d.conns = append(d.conns, ic)
			d.mu.Unlock()
			go d.serve(ic)
		}
	}()
	return d
}

// stop closes the socket (removing its file) and every connection, as a
// daemon that exits.
func (d *fakeIBD) stop() {
	d.ln.Close()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.conn.Close()
	}
}

func (d *fakeIBD) serve(c *ibdConn) {
	buf := make([]byte, 1<<16)
	for {
		n, err := c.conn.Read(buf)
		if err != nil || n == 0 {
			return
		}
		m := slices.Clone(buf[:n])
		d.mu.Lock()
		if n >= 8 && le.Uint32(m) == Magic {
			d.control(c, m)
			d.mu.Unlock()
			continue
		}
		if len(c.hello) == 0 {
			d.bad = append(d.bad, "a MAD before HELLO")
		}
		if n < UMADHeaderSize+24 {
			d.bad = append(d.bad, fmt.Sprintf("a %d-byte MAD", n))
		}
		c.mads = append(c.mads, m)
		d.mu.Unlock()
		if d.answer != nil {
			for _, r := range d.answer(c, m) {
				if r == nil { // hang up
					c.conn.Close()
					return
				}
				c.conn.Write(r)
			}
		}
	}
}

// control records one control message; d.mu is held.
func (d *fakeIBD) control(c *ibdConn, m []byte) {
	u32 := func(off int) uint32 { return le.Uint32(m[off:]) }
	size := map[uint32]int{OpHello: HelloSize, OpRegister: RegisterSize, OpUnregister: UnregisterSize}[u32(4)]
	if size == 0 || len(m) != size {
		d.bad = append(d.bad, fmt.Sprintf("control message op %d of %d bytes", u32(4), len(m)))
		return
	}
	switch u32(4) {
	case OpHello:
		if len(c.hello) != 0 || len(c.mads) != 0 {
			d.bad = append(d.bad, "HELLO not first")
		}
		c.hello = []uint32{u32(8), u32(12), u32(16)}
	case OpRegister:
		r := register{Agent: u32(8), QPN: u32(12), Class: m[16], Version: m[17], RMPP: m[18], OUI: u32(20)}
		for i := range r.Methods {
			r.Methods[i] = u32(24 + 4*i)
		}
		c.regs = append(c.regs, r)
	case OpUnregister:
		c.unregs = append(c.unregs, u32(8))
	}
	c.control = append(c.control, fmt.Sprintf("op %d %x", u32(4), m[8:]))
}

// until waits for cond (called with d.mu held) for up to 10 seconds.
func (d *fakeIBD) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		d.mu.Lock()
		ok := cond()
		d.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fake daemon: no %s after 10s", what)
		}
	}
}

// vendorAgent waits for a vendor class 0x32 agent (ibping -S's) and
// returns it with its connection.
func (d *fakeIBD) vendorAgent(t *testing.T) (conn *ibdConn, agent register) {
	t.Helper()
	d.until(t, "vendor class 0x32 registration", func() bool {
		for _, c := range d.conns {
			for _, r := range c.regs {
				if r.Class == 0x32 {
					conn, agent = c, r
					return true
				}
			}
		}
		return false
	})
	return conn, agent
}

// snapshot copies the connections' records.
func (d *fakeIBD) snapshot() []ibdConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []ibdConn
	for _, c := range d.conns {
		out = append(out, *c)
	}
	return out
}

// MAD fields (IBA 13.4.3): the common header of the MAD after the umad
// header.
func class(umad []byte) byte  { return umad[UMADHeaderSize+1] }
func method(umad []byte) byte { return umad[UMADHeaderSize+3] }
func attr(umad []byte) uint16 { return be.Uint16(umad[UMADHeaderSize+16:]) }
func tid(umad []byte) uint64  { return be.Uint64(umad[UMADHeaderSize+8:]) }

// response starts the MAD that answers req: its common header with method
// set and status 0, size bytes in all.
func response(req []byte, meth byte, size int) []byte {
	mad := make([]byte, size)
	copy(mad, req[UMADHeaderSize:UMADHeaderSize+24])
	mad[3] = meth
	mad[4], mad[5] = 0, 0
	return mad
}

// deliver wraps a MAD for agent as the kernel queues a received one: the
// header's length is header + MAD, the address is the sender's.
func deliver(agent uint32, mad []byte, srcLID uint16, srcQP uint32) []byte {
	h := make([]byte, UMADHeaderSize, UMADHeaderSize+len(mad))
	le.PutUint32(h[0:], agent)
	le.PutUint32(h[LengthOffset:], uint32(UMADHeaderSize+len(mad)))
	be.PutUint32(h[20:], srcQP)
	if srcQP == 1 {
		be.PutUint32(h[24:], 0x80010000) // QP1's Q_Key
	}
	be.PutUint16(h[28:], srcLID)
	return append(h, mad...)
}

// reply answers req with mad from LID lid, as the kernel does: to the
// sending agent, from QP0 for SMPs and QP1 otherwise.
func reply(req, mad []byte, lid uint16) []byte {
	qp := uint32(1)
	if class(req) == 0x01 || class(req) == 0x81 {
		qp = 0
	}
	return deliver(le.Uint32(req), mad, lid, qp)
}

// nodeInfo writes a NodeInfo attribute (IBA 14.2.5.3, 40 bytes).
func nodeInfo(b []byte, guid uint64, deviceID uint16, vendorID uint32) {
	b[0], b[1], b[2], b[3] = 1, 1, 1, 1 // base version, class version, CA, 1 port
	be.PutUint64(b[4:], guid)           // system image GUID
	be.PutUint64(b[12:], guid)          // node GUID
	be.PutUint64(b[20:], guid+1)        // port GUID
	be.PutUint16(b[28:], 128)           // partition cap
	be.PutUint16(b[30:], deviceID)
	be.PutUint32(b[32:], 0xa0) // revision
	b[36] = 1                  // local port number
	b[37], b[38], b[39] = byte(vendorID>>16), byte(vendorID>>8), byte(vendorID)
}

// smpAnswer answers LID-routed SMP Gets of NodeInfo and NodeDescription.
func smpAnswer(_ *ibdConn, req []byte) [][]byte {
	if class(req) != 0x01 || method(req) != 0x01 {
		return nil
	}
	mad := response(req, 0x81, MADSize)
	switch attr(req) {
	case 0x11:
		nodeInfo(mad[64:], 0x1122334455667788, 0x101b, 0x0002c9)
	case 0x10:
		copy(mad[64:], "fake-node-1 mlx5_0")
	default:
		mad[4] = 0x0c // unsupported method/attribute
	}
	return [][]byte{reply(req, mad, 1)}
}

func TestSmpqueryNodeInfoThroughTheDaemon(t *testing.T) {
	d := newFakeIBD(t, smpAnswer)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, stderr, err := run(t, inFabric(ctx, t, preload(t, d.path), "smpquery", "nodeinfo", "1"))
	if err != nil {
		t.Fatalf("smpquery nodeinfo 1: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	for _, want := range []string{
		`(?m)^NodeType:\.+Channel Adapter$`,
		`(?m)^SystemGuid:\.+0x1122334455667788$`,
		`(?m)^Guid:\.+0x1122334455667788$`,
		`(?m)^PortGuid:\.+0x1122334455667789$`,
		`(?m)^DevId:\.+0x101b$`,
		`(?m)^VendorId:\.+0x0002c9$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("smpquery output lacks %s:\n%s", want, out)
		}
	}

	conns := d.snapshot()
	if len(conns) != 1 {
		t.Fatalf("%d connections, want 1", len(conns))
	}
	c := conns[0]
	if c.hello[0] != 0 || c.hello[1] == 0 || c.hello[2] != KindUMAD {
		t.Errorf("HELLO {index, pid, kind} = %v, want {0, a pid, %d}", c.hello, KindUMAD)
	}
	// Agent ids from 0 in registration order, as the kernel assigns them.
	for i, r := range c.regs {
		if r.Agent != uint32(i) {
			t.Errorf("registration %d has agent id %d", i, r.Agent)
		}
	}
	smi := slices.IndexFunc(c.regs, func(r register) bool { return r.Class == 0x01 })
	if smi < 0 || c.regs[smi].QPN != 0 || c.regs[smi].Version != 1 {
		t.Fatalf("no SMI agent (class 0x01, QP0, version 1) among %+v", c.regs)
	}
	var nodeInfos int
	for _, m := range c.mads {
		if attr(m) == 0x11 {
			nodeInfos++
			if le.Uint32(m) != c.regs[smi].Agent {
				t.Errorf("NodeInfo Get from agent %d, want the SMI agent %d", le.Uint32(m), c.regs[smi].Agent)
			}
		}
	}
	if nodeInfos != 1 {
		t.Errorf("%d NodeInfo Gets, want 1", nodeInfos)
	}
}

// nodeRecord writes an SA NodeRecord (IBA 15.2.5.2): LID, reserved,
// NodeInfo, NodeDescription.
func nodeRecord(b []byte, lid uint16, guid uint64, desc string) {
	be.PutUint16(b[0:], lid)
	nodeInfo(b[4:44], guid, 0x101b, 0x0002c9)
	copy(b[44:108], desc)
}

// A reassembled SA GetTable response is longer than saquery's first read
// (64+256): it must see ENOSPC with the full length, then read it all.
func TestSaqueryReadsAResponseLongerThanOneMAD(t *testing.T) {
	const records, recordWords = 3, 14 // 108-byte NodeRecords, 8-byte aligned
	d := newFakeIBD(t, func(_ *ibdConn, req []byte) [][]byte {
		if class(req) != 0x03 || method(req) != 0x12 || attr(req) != 0x11 {
			return nil
		}
		mad := response(req, 0x92, 56+records*recordWords*8)
		mad[24], mad[25], mad[26] = 1, 1, 0x07 // RMPP v1, DATA, active|first|last
		be.PutUint16(mad[44:], recordWords)    // SA attribute offset
		for i := 0; i < records; i++ {
			nodeRecord(mad[56+i*recordWords*8:], uint16(0x10+i), 0x0c42a10300650000+uint64(i)<<4, fmt.Sprintf("fake-node-%d mlx5_0", i+1))
		}
		return [][]byte{reply(req, mad, 1)}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env := append(preload(t, d.path), "NVMOCK_UMAD_DEBUG=1")
	out, stderr, err := run(t, inFabric(ctx, t, env, "saquery"))
	if err != nil {
		t.Fatalf("saquery: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	for i := 0; i < records; i++ {
		for _, want := range []string{
			fmt.Sprintf(`lid\.+%d\n`, 0x10+i),
			fmt.Sprintf(`NodeDescription\.+fake-node-%d mlx5_0\n`, i+1),
		} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("saquery output lacks %q:\n%s", want, out)
			}
		}
	}
	size := UMADHeaderSize + 56 + records*recordWords*8
	if want := fmt.Sprintf("%d-byte message, 320-byte buffer: ENOSPC", size); !strings.Contains(stderr, want) {
		t.Errorf("saquery's stderr lacks the shim's %q:\n%s", want, stderr)
	}
	sa := slices.IndexFunc(d.snapshot()[0].regs, func(r register) bool { return r.Class == 0x03 })
	if sa < 0 || d.snapshot()[0].regs[sa].RMPP != 1 || d.snapshot()[0].regs[sa].QPN != 1 {
		t.Errorf("no SA agent (class 3, QP1, RMPP 1) among %+v", d.snapshot()[0].regs)
	}
}

// Without a daemon the device still opens (a broken fabric, not a missing
// HCA), and requests come back timed out at once, as the kernel returns
// unanswered ones: libibmad retries, then gives up.
func TestWithoutADaemonRequestsTimeOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env := preload(t, filepath.Join(t.TempDir(), "absent.sock"))
	start := time.Now()
	out, stderr, err := run(t, inFabric(ctx, t, env, "smpquery", "-d", "nodeinfo", "1"))
	took := time.Since(start)
	if err == nil {
		t.Fatalf("smpquery succeeded without a fabric:\n%s", out)
	}
	for _, want := range []string{"_do_madrpc: retry 2", "timeout after 3 retries", "node info query failed"} {
		if !strings.Contains(out+stderr, want) {
			t.Errorf("smpquery's output lacks %q:\n%s%s", want, out, stderr)
		}
	}
	if took > 2*time.Second {
		t.Errorf("smpquery took %v to give up, want it at once", took)
	}
}

// cc compiles a helper from testdata.
func cc(t *testing.T, compiler string, src string, flags ...string) string {
	t.Helper()
	path := testenv.Tool(t, compiler)
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(src, ".c")+"-"+filepath.Base(compiler))
	args := append([]string{"-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", out, filepath.Join("testdata", src)}, flags...)
	if msg, err := exec.Command(path, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler, src, err, msg)
	}
	return out
}

// A forked child shares the connection, as it would share the device file.
func TestForkedChildKeepsItsDevice(t *testing.T) {
	d := newFakeIBD(t, smpAnswer)
	bin := cc(t, "gcc", "madclient.c")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "fork")
	cmd.Env = append(os.Environ(), preload(t, d.path)...)
	out, stderr, err := run(t, cmd)
	if err != nil {
		t.Fatalf("madclient fork: %v\n%s%s", err, out, stderr)
	}
	want := "agent 0\nparent 0x1: status 0, 320 bytes\nchild 0x2: status 0, 320 bytes\nparent 0x3: status 0, 320 bytes\n"
	if out != want {
		t.Errorf("madclient fork printed:\n%s\nwant:\n%s", out, want)
	}
	d.until(t, "unregistration", func() bool { return len(d.conns[0].unregs) > 0 })
	c := d.snapshot()[0]
	var tids []uint64
	for _, m := range c.mads {
		tids = append(tids, tid(m))
	}
	if !slices.Equal(tids, []uint64{1, 2, 3}) || !slices.Equal(c.unregs, []uint32{0}) {
		t.Errorf("daemon saw TIDs %v and unregistrations %v, want [1 2 3] and [0]", tids, c.unregs)
	}
}

// When the daemon goes away, the device turns into a broken fabric's:
// requests time out instead of failing with EPIPE (or SIGPIPE).
func TestDaemonGoneTurnsIntoTimeouts(t *testing.T) {
	d := newFakeIBD(t, func(c *ibdConn, req []byte) [][]byte {
		if tid(req) == 0xdead {
			return [][]byte{nil}
		}
		return smpAnswer(c, req)
	})
	bin := cc(t, "gcc", "madclient.c")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "gone")
	cmd.Env = append(os.Environ(), preload(t, d.path)...)
	out, stderr, err := run(t, cmd)
	if err != nil {
		t.Fatalf("madclient gone: %v\n%s%s", err, out, stderr)
	}
	// The timed-out request comes back as the kernel's: header + 24-byte
	// MAD header, status 110.
	want := "agent 0\nlive 0x1: status 0, 320 bytes\nhangup 0xdead: status -1, 0 bytes\ndead 0x3: status 110, 88 bytes\n"
	if out != want {
		t.Errorf("madclient gone printed:\n%s\nwant:\n%s", out, want)
	}
}

// madSteps runs madclient MODE against socket; at each line it prints that
// names one of steps, it runs that step, then lets the client go on. It
// returns every line the client printed, and its pid.
func madSteps(t *testing.T, mode, socket string, steps map[string]func()) ([]string, int) {
	t.Helper()
	bin := cc(t, "gcc", "madclient.c")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, mode)
	cmd.Env = append(os.Environ(), preload(t, socket)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for lines := bufio.NewScanner(out); lines.Scan(); {
		got = append(got, lines.Text())
		if step, ok := steps[lines.Text()]; ok {
			step()
			fmt.Fprintln(in)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("madclient %s: %v\n%s", mode, err, stderr.String())
	}
	return got, cmd.Process.Pid
}

// A program's device comes back when a new daemon listens (the chart's pod
// restarted): its next request reconnects, says HELLO and registers its
// agent again, as a fabric that came back under an open device.
func TestANewDaemonRevivesTheDevice(t *testing.T) {
	d := newFakeIBD(t, smpAnswer)
	var d2 *fakeIBD
	got, pid := madSteps(t, "restart", d.path, map[string]func(){
		"stop":  d.stop,
		"start": func() { d2 = fakeIBDAt(t, d.path, smpAnswer) },
	})
	want := []string{"agent 0", "live 0x1: status 0, 320 bytes", "stop", "dead 0x2: status 110, 88 bytes", "start", "back 0x3: status 0, 320 bytes"}
	if !slices.Equal(got, want) || d2 == nil {
		t.Fatalf("madclient restart printed %q, want %q", got, want)
	}
	cs := d2.snapshot()
	if len(cs) != 1 {
		t.Fatalf("the new daemon saw %d connections, want 1", len(cs))
	}
	if c := cs[0]; !slices.Equal(c.hello, []uint32{0, uint32(pid), 0}) || len(c.regs) != 1 || c.regs[0].Class != 0x01 ||
		len(c.mads) != 1 || tid(c.mads[0]) != 3 {
		t.Errorf("the new daemon saw hello %v, registrations %+v and %d MADs, want umad0's hello, the SMI agent and TID 3\n%v",
			c.hello, c.regs, len(c.mads), c.control)
	}
}

// A device opened before any daemon listened comes back when one does, but
// only after the program has read what its dead fabric gave back: a
// request made then still returns timed out (review: the revive threw its
// return away, and opensm waits for the return of every send).
func TestADeviceRevivesOnlyAfterItsTimeoutsAreRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ibd.sock")
	var d *fakeIBD
	got, _ := madSteps(t, "late", path, map[string]func(){"start": func() { d = fakeIBDAt(t, path, smpAnswer) }})
	want := []string{"agent 0", "start", "queued 0x1: status 110, 88 bytes", "back 0x2: status 0, 320 bytes"}
	if !slices.Equal(got, want) || d == nil {
		t.Fatalf("madclient late printed %q, want %q", got, want)
	}
	if cs := d.snapshot(); len(cs) != 1 || len(cs[0].regs) != 1 || len(cs[0].mads) != 1 || tid(cs[0].mads[0]) != 2 {
		t.Errorf("the daemon saw %d connections (%+v), want one with the agent and TID 2", len(cs), cs)
	}
}

// A blocking read on a dead device, waiting for a daemon, still returns
// EINTR to a signal, as the kernel's read does (review: it went on
// waiting, for ever).
func TestAReadOnADeadDeviceReturnsEINTR(t *testing.T) {
	madclientWithoutDaemon(t, "intr", "read: -1, EINTR")
}

// A write of more than one MAD that is no RMPP transfer fails with EINVAL,
// as the kernel's does (review: the daemon handed it on, and it ended an
// ibping server's loop).
func TestAnOversizedWriteIsEINVAL(t *testing.T) {
	madclientWithoutDaemon(t, "big", "write: -1, EINVAL")
}

// madclientWithoutDaemon runs testdata/madclient.c's mode with the shim and
// no daemon, and wants want in its output.
func madclientWithoutDaemon(t *testing.T, mode, want string) {
	t.Helper()
	bin := cc(t, "gcc", "madclient.c")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, mode)
	cmd.Env = append(os.Environ(), preload(t, filepath.Join(t.TempDir(), "absent.sock"))...)
	out, stderr, err := run(t, cmd)
	if err != nil || !strings.Contains(out, want) {
		t.Errorf("madclient %s: %v\n%s%s", mode, err, out, stderr)
	}
}

// A server waiting in poll (ibping -S: libibumad polls before it reads)
// comes back with a new daemon too, and answers again.
func TestIbpingServerComesBackWithANewDaemon(t *testing.T) {
	d := newFakeIBD(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := inFabric(ctx, t, append(preload(t, d.path), "NVMOCK_UMAD_DEBUG=1"), "ibping", "-S")

	var stderr testenv.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	d.vendorAgent(t)
	d.stop()
	time.Sleep(300 * time.Millisecond) // ibping waits on a dead device
	d2 := fakeIBDAt(t, d.path, nil)
	conn, agent := d2.vendorAgent(t)
	mad := make([]byte, MADSize)
	mad[0], mad[1], mad[2], mad[3] = 1, 0x32, 1, 0x01
	be.PutUint64(mad[8:], 0x4343)
	mad[37], mad[38], mad[39] = 0x00, 0x14, 0x05
	if _, err := conn.conn.Write(deliver(agent.Agent, mad, 0x20, 1)); err != nil {
		t.Fatal(err)
	}
	d2.until(t, "ibping's answer through the new daemon", func() bool {
		for _, m := range conn.mads {
			if tid(m) == 0x4343 && method(m) == 0x81 {
				return true
			}
		}
		return false
	})
	// The daemon's hangup woke no poll: the shim said the device died
	// (debug output) and ibping never saw it.
	cmd.Process.Kill()
	cmd.Wait()
	if !strings.Contains(stderr.String(), "fabric daemon gone") || !strings.Contains(stderr.String(), "connected again with 2 agents") {
		t.Errorf("ibping's shim did not report the daemon gone and the device back:\n%s", stderr.String())
	}
}

// Programs that never open a umad device run as without the shim, and
// programs the shim cannot load into (static ones) are not harmed.
func TestOtherProgramsRunUnharmed(t *testing.T) {
	so := shim(t)
	type prog struct {
		name string
		argv []string
	}
	progs := []prog{
		{"ls", []string{testenv.Tool(t, "ls"), "-d", "/", "/tmp"}},
		{"sh", []string{testenv.Tool(t, "sh"), "-c", "echo $((6*7)); cat /etc/hostname"}},
		{"busybox-static", []string{testenv.Tool(t, "busybox"), "sh", "-c", "echo $((6*7))"}},
		{"glibc-static", []string{cc(t, "gcc", "hello.c", "-static")}},
		{"musl-static", []string{cc(t, "musl-gcc", "hello.c", "-static")}},
		{"musl-dynamic", []string{cc(t, "musl-gcc", "hello.c")}},
	}
	for _, p := range progs {
		t.Run(p.name, func(t *testing.T) {
			plain, err := exec.Command(p.argv[0], p.argv[1:]...).Output()
			if err != nil {
				t.Fatalf("%v without the shim: %v", p.argv, err)
			}
			cmd := exec.Command(p.argv[0], p.argv[1:]...)
			cmd.Env = append(os.Environ(), "LD_PRELOAD="+so, "NVMOCK_UMAD_DEBUG=1")
			out, stderr, err := run(t, cmd)
			if err != nil || out != string(plain) || stderr != "" {
				t.Errorf("%v with the shim: %v\nstdout %q (without: %q)\nstderr %q", p.argv, err, out, plain, stderr)
			}
		})
	}
	// musl's loader takes libc.so.6 and libdl.so.2 for itself, so the shim
	// loads into a dynamic musl program and works there; a static program
	// has no loader and ignores LD_PRELOAD.
	for _, p := range progs[4:] {
		cmd := exec.Command(p.argv[0], "umad")
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+so, SocketEnv+"="+filepath.Join(t.TempDir(), "absent.sock"))
		out, _, err := run(t, cmd)
		want := map[string]string{"musl-static": "not opened", "musl-dynamic": "opened"}[p.name]
		if err != nil || !strings.Contains(out, "umad0: "+want+"\n") {
			t.Errorf("%s umad with the shim: %v, %q, want umad0 %s", p.name, err, out, want)
		}
	}
}

// ibping -S registers a vendor class agent with OpenIB's OUI, answers the
// request the daemon sends it with its host name.
func TestIbpingServerRegistersAndAnswers(t *testing.T) {
	d := newFakeIBD(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := inFabric(ctx, t, preload(t, d.path), "ibping", "-S")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	conn, agent := d.vendorAgent(t)
	all := [4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)}
	want := register{Agent: agent.Agent, QPN: 1, Class: 0x32, Version: 1, RMPP: 0, OUI: 0x001405, Methods: all}
	if agent != want {
		t.Errorf("ibping -S registered %+v, want %+v", agent, want)
	}

	// A vendor range 2 Get (IBA 13.4.3.2): OUI at 37, data from 40.
	mad := make([]byte, MADSize)
	mad[0], mad[1], mad[2], mad[3] = 1, 0x32, 1, 0x01
	be.PutUint64(mad[8:], 0x4242)
	mad[37], mad[38], mad[39] = 0x00, 0x14, 0x05
	if _, err := conn.conn.Write(deliver(agent.Agent, mad, 0x20, 1)); err != nil {
		t.Fatal(err)
	}
	var resp []byte
	d.until(t, "ibping's answer", func() bool {
		for _, m := range conn.mads {
			if tid(m) == 0x4242 {
				resp = m
				return true
			}
		}
		return false
	})
	host, _ := os.Hostname()
	data := resp[UMADHeaderSize+40:]
	if name := string(data[:max(0, bytes.IndexByte(data, 0))]); method(resp) != 0x81 || le.Uint32(resp) != agent.Agent || !strings.HasPrefix(name, host) {
		t.Errorf("ibping answered method %#x from agent %d with %q, want GetResp (0x81) from agent %d with the host name %q\n%s",
			method(resp), le.Uint32(resp), name, agent.Agent, host, stderr.String())
	}
	if lid := be.Uint16(resp[28:]); lid != 0x20 {
		t.Errorf("ibping answered LID %#x, want the requester's 0x20", lid)
	}
}

// The shim exports exactly the functions it interposes, the version node
// of libibverbs' provider registration, and the two calls the provider
// makes for completion channels.
func TestExports(t *testing.T) {
	got := testenv.Exports(t, shim(t))
	want := []string{"IBVERBS_PRIVATE_34", "__open64_2", "__open_2", "__openat64_2", "__openat_2", "__poll_chk", "__ppoll_chk", "__read_chk", "close", "close_range",
		"closefrom", "dup2", "dup3", "ioctl", "nvmock_verbs_async_fd", "nvmock_verbs_channel_writer", "nvmock_verbs_cmd_fd", "open", "open64", "openat", "openat64", "poll", "ppoll", "read", "verbs_register_driver_34@@IBVERBS_PRIVATE_34", "write"}
	if !slices.Equal(got, want) {
		t.Errorf("exports %v, want %v", got, want)
	}
}

// What the shim costs a program that never opens a umad device: measured
// with the system calls (noisy) and, with nextstub.so preloaded after the
// shim in place of libc's, without them (the shim alone).
func TestOpenCost(t *testing.T) {
	so := shim(t)
	bench := cc(t, "gcc", "openbench.c")
	stub := cc(t, "gcc", "nextstub.c", "-shared", "-fPIC")
	measure := func(preload string) map[string]float64 {
		cmd := exec.Command(bench)
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+preload)
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(out))
		m := map[string]float64{}
		for i := 0; i+1 < len(f); i += 2 {
			m[f[i]], _ = strconv.ParseFloat(f[i+1], 64)
		}
		return m
	}
	// Interleaved, and the median of three: this machine's timings drift.
	preloads := []string{"", so, stub, so + ":" + stub}
	runs := make([][]map[string]float64, len(preloads))
	for range 3 {
		for i, p := range preloads {
			runs[i] = append(runs[i], measure(p))
		}
	}
	median := func(i int, k string) float64 {
		var v []float64
		for _, r := range runs[i] {
			v = append(v, r[k])
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	for _, k := range []string{"open+close", "open-enoent", "read-ebadf"} {
		own := median(3, k) - median(2, k)
		t.Logf("%-12s %7.1f ns without the shim, %7.1f with; the shim alone adds %.1f ns", k, median(0, k), median(1, k), own)
		if own > 50 {
			t.Errorf("%s: the shim adds %.1f ns, want a few", k, own)
		}
	}
}
