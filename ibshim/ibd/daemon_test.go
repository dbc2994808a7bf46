package ibd

import (
	"bytes"
	"encoding/binary"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/ibshim/umad"
	"github.com/nvmock/nvmock/internal/testenv"
)

// register registers agent id on c for class, version, OUI and methods,
// as the shim does for an ioctl.
func register(t *testing.T, c *net.UnixConn, id uint32, class byte, oui uint32, methods ...byte) {
	t.Helper()
	if _, err := c.Write(registerMsg(id, class, oui, methods...)); err != nil {
		t.Fatal(err)
	}
}

func registerMsg(id uint32, class byte, oui uint32, methods ...byte) []byte {
	le := binary.LittleEndian
	reg := make([]byte, umad.RegisterSize)
	le.PutUint32(reg, umad.Magic)
	le.PutUint32(reg[4:], umad.OpRegister)
	le.PutUint32(reg[8:], id)
	reg[16], reg[17] = class, 1
	le.PutUint32(reg[20:], oui)
	for _, m := range methods {
		w := 24 + 4*int(m/32)
		le.PutUint32(reg[w:], le.Uint32(reg[w:])|1<<(m%32))
	}
	return reg
}

// ping is an ibping request (vendor class 0x32, OpenFabrics OUI) to lid.
func ping(lid uint16, tid uint64, timeoutMS uint32) packet {
	u := make(packet, umadHdrLen+madLen)
	binary.LittleEndian.PutUint32(u[8:], timeoutMS)
	u.setLID(lid)
	m := u.mad()
	m[0], m[1], m[2], m[3] = 1, vendorIBPing, 1, methodGet
	put64(m[8:], tid)
	put24(m[37:], ouiOpenFabric)
	return u
}

func read(t *testing.T, c *net.UnixConn, within time.Duration) packet {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	buf := make([]byte, 64<<10)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return packet(buf[:n])
}

// A program's ibping client registers the class with no methods: its own
// request to its own LID must not come back to it as a request (libibmad
// would take it for the answer). With no server, the host's MAD layer
// answers at once, as Linux does with a request no agent takes: the
// request back as a GetResp, status "unsupported method/attribute".
func TestAClientIsNotHandedRequestsItDidNotRegisterFor(t *testing.T) {
	c, f := serve(t)
	register(t, c, 1, vendorIBPing, ouiOpenFabric) // no methods: a client
	own := f.Find("mlx5_0").Ports[1].LID
	u := ping(own, 5, 50)
	copy(u.mad()[40:], "payload")
	if _, err := c.Write(u); err != nil {
		t.Fatal(err)
	}
	r := read(t, c, 2*time.Second)
	if r == nil {
		t.Fatal("nothing came back")
	}
	m := r.mad()
	if m.method() != methodResp || m.status() != statusBadMethodAttr || uint32(m.tid()) != 5 || r.lid() != own || !bytes.Equal(m[40:47], []byte("payload")) {
		t.Errorf("got method %#x, status %#x, TID %d from LID %d, data %q; want the request back as a GetResp with status 0xc from LID %d",
			m.method(), m.status(), m.tid(), r.lid(), m[40:47], own)
	}
}

// Which requests no program took a host answers, and which go unanswered:
// the classes mlx5's firmware takes (congestion control here) and a Send
// (not a Get or Set) time out, as does any request to a switch; a
// modelled host answers a class it runs no agent for as a real one does.
func TestOnlyHostsAnswerRequestsNoProgramTook(t *testing.T) {
	c, f := serve(t)
	own := f.Find("mlx5_0").Ports[1]
	var other *fabric.Port
	for _, nd := range f.Subnets[0].Nodes {
		if nd.Type == fabric.CA && nd.Slot >= 0 && nd.Slot != f.Local {
			other = nd.Ports[1]
			break
		}
	}
	leaf := own.Peer.Node.Ports[0].LID
	for i, tc := range []struct {
		what          string
		lid           uint16
		class, method byte
		answered      bool
	}{
		{"sysstat Get to a modelled host", other.LID, vendorIBPing + 1, methodGet, true},
		{"SA Get to a host that is not the SM", other.LID, classSA, methodGet, true},
		{"congestion control Get to this host", own.LID, 0x21, methodGet, false},
		{"vendor Send to this host", own.LID, vendorIBPing, 0x03, false},
		{"vendor Get to a switch", leaf, vendorIBPing, methodGet, false},
	} {
		u := ping(tc.lid, uint64(100+i), 50)
		u.mad()[1], u.mad()[3] = tc.class, tc.method
		if _, err := c.Write(u); err != nil {
			t.Fatal(err)
		}
		r := read(t, c, 2*time.Second)
		if r == nil {
			t.Fatalf("%s: nothing came back", tc.what)
		}
		timedOut := binary.LittleEndian.Uint32(r[4:]) == etimedout
		if timedOut == tc.answered || (tc.answered && r.mad().status() != statusBadMethodAttr) {
			t.Errorf("%s: timed out %v, MAD status %#x; want answered %v", tc.what, timedOut, r.mad().status(), tc.answered)
		}
	}
}

// A server (every method registered) gets the request; a send with no
// timeout (an answer) never comes back as a timeout.
func TestAServerGetsRequestsAndAnswersNeedNoTimeout(t *testing.T) {
	c, f := serve(t)
	register(t, c, 2, vendorIBPing, ouiOpenFabric, methodGet)
	own := f.Find("mlx5_0").Ports[1].LID
	if _, err := c.Write(ping(own, 6, 1000)); err != nil {
		t.Fatal(err)
	}
	r := read(t, c, 2*time.Second)
	if r == nil || r.agent() != 2 || r.mad().method() != methodGet || r.lid() != own {
		t.Fatalf("the server got %v; want the Get for agent 2 from LID %d", r, own)
	}
	// Its answer: method GetResp, timeout 0. It reaches the asker (the
	// same program here) and nothing else follows.
	ans := append(packet(nil), r...)
	ans.mad()[3] = methodResp
	binary.LittleEndian.PutUint32(ans[8:], 0)
	if _, err := c.Write(ans); err != nil {
		t.Fatal(err)
	}
	got := read(t, c, 2*time.Second)
	if got == nil || got.mad().method() != methodResp || uint32(got.mad().tid()) != 6 {
		t.Fatalf("the asker got %v, want the GetResp with TID 6", got)
	}
	if extra := read(t, c, 300*time.Millisecond); extra != nil {
		t.Errorf("after the answer the daemon sent %d more bytes", len(extra))
	}
}

// Whatever a program writes, the daemon answers or drops it, and keeps
// serving.
func TestMalformedMADsDoNotStopTheDaemon(t *testing.T) {
	c, f := serve(t)
	rnd := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		u := make(packet, umadHdrLen+madLen+rnd.Intn(64))
		rnd.Read(u)
		binary.LittleEndian.PutUint32(u[8:], 0) // no timeouts piling up
		u[umadHdrLen+1] = []byte{classSMPLID, classSMPDR, classSA, classPerf, vendorIBPing, 0x21}[rnd.Intn(6)]
		if _, err := c.Write(u); err != nil {
			t.Fatal(err)
		}
	}
	for read(t, c, 200*time.Millisecond) != nil {
	}
	leaf := f.Find("mlx5_0").Ports[1].Peer.Node
	if _, err := c.Write(smp(leaf.Ports[0].LID, 9)); err != nil {
		t.Fatal(err)
	}
	for r := read(t, c, 2*time.Second); ; r = read(t, c, 2*time.Second) {
		if r == nil {
			t.Fatal("the daemon stopped answering")
		}
		if uint32(r.mad().tid()) == 9 && r.mad().status() == 0 {
			break
		}
	}
}

// The daemon follows its node's faults file: a new file applies, a bad
// one is reported once and leaves the faults it had.
func TestTheDaemonFollowsTheFaultsFile(t *testing.T) {
	n := testenv.Node(t, "h100", 8)
	f, err := fabric.Build(n, "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	log := logrus.New()
	log.SetOutput(&logged)
	d := New(n, f, log)
	defer d.Close()
	path := filepath.Join(t.TempDir(), "faults.json")
	write := func(s string) { t.Helper(); setFaults(t, d, path, s) }
	port := f.Find("mlx5_3").Ports[1]
	write(`[{"HCA":"mlx5_3","Down":true}]`)
	d.FollowFaults(path)
	if !port.Down() {
		t.Fatal("mlx5_3 is up after a faults file saying down")
	}
	write(`[{"HCA":"mlx5_2","Down":true}]`) // an Ethernet port: refused
	write(`not json`)
	if !port.Down() || strings.Count(logged.String(), "the fabric keeps the faults it had") != 2 {
		t.Errorf("after two bad files: mlx5_3 down %v; log:\n%s", port.Down(), logged.String())
	}
	write(`[]`)
	if port.Down() {
		t.Error("mlx5_3 is still down after a file with no faults")
	}
}

// setFaults replaces the faults file at path, as nvmock ctl ib does, and
// has d look at it.
func setFaults(t *testing.T, d *Daemon, path, faults string) {
	t.Helper()
	if err := os.WriteFile(path+".new", []byte(faults), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	d.refresh()
	d.mu.Unlock()
}
