package ibd

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/internal/testenv"
)

// Two nodes that dialled each other hold two links, and each side may use
// a different one. A change of this node's faults goes out on both, as the
// peer takes faults only from the link it uses (seen as node-b missing
// node-a's port going down for good).
func TestFaultsGoOutOnEveryLinkToAPeer(t *testing.T) {
	d, f := quietDaemon(t)
	path := filepath.Join(t.TempDir(), "faults.json")
	setFaults(t, d, path, `[]`)
	d.FollowFaults(path)

	var links []*bufio.Reader
	for range 2 {
		_, r := nodeBLink(t, d, f)
		if faults := nextFaults(t, r); faults != "null" && faults != "[]" {
			t.Fatalf("faults at connect: %s, want none", faults)
		}
		links = append(links, r)
	}
	setFaults(t, d, path, `[{"HCA":"mlx5_3","Down":true}]`)
	for i, r := range links {
		if faults := nextFaults(t, r); !strings.Contains(faults, `"mlx5_3"`) {
			t.Errorf("link %d: faults %s, want mlx5_3's", i+1, faults)
		}
	}
}

// nextFaults is the body of the next faults frame on r, within 5 s.
func nextFaults(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		for {
			typ, body, err := readFrame(r)
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			if typ == frameFaults {
				got <- string(body)
				return
			}
		}
	}()
	select {
	case s := <-got:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("no faults frame in 5 s")
		return ""
	}
}

// When the link in use ends, the node's other link carries on, with the
// faults that last came on it, though they were not applied then.
func TestTheOtherLinkCarriesOnWithItsFaults(t *testing.T) {
	d, f := quietDaemon(t)
	var theirs []net.Conn
	for range 2 {
		ours, r := nodeBLink(t, d, f)
		nextFaults(t, r)
		go io.Copy(io.Discard, r) // the daemon's later frames
		theirs = append(theirs, ours)
	}
	var port *fabric.Port
	for _, nd := range f.Subnets[0].Nodes {
		if nd.Type == fabric.CA && nd.Slot == 1 && nd.HCA == "mlx5_0" {
			port = nd.Ports[1]
		}
	}
	if port == nil {
		t.Fatal("the fabric has no mlx5_0 at slot 1")
	}
	// The first link is not the one in use: its faults wait.
	if _, err := theirs[0].Write(frame(frameFaults, [][]byte{[]byte(`[{"HCA":"mlx5_0","Down":true}]`)})); err != nil {
		t.Fatal(err)
	}
	down := func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return port.Down()
	}
	time.Sleep(100 * time.Millisecond)
	if down() {
		t.Fatal("faults from the link not in use were applied")
	}
	theirs[1].Close()
	for deadline := time.Now().Add(5 * time.Second); !down(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("node-b's mlx5_0 is up after the link in use ended; its other link said down")
		}
	}
}

// quietDaemon is node-a's daemon of an h100 fabric, logging nowhere.
func quietDaemon(t *testing.T) (*Daemon, *fabric.Fabric) {
	t.Helper()
	n := testenv.Node(t, "h100", 8)
	f, err := fabric.Build(n, "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(&strings.Builder{})
	d := New(n, f, log)
	t.Cleanup(d.Close)
	return d, f
}

// nodeBLink is node-b's end of a new peer link to d, greeted as node-b's
// daemon would.
func nodeBLink(t *testing.T, d *Daemon, f *fabric.Fabric) (net.Conn, *bufio.Reader) {
	t.Helper()
	ours, theirs := net.Pipe()
	t.Cleanup(func() { ours.Close() })
	go d.peerConn(theirs)
	r := bufio.NewReader(ours)
	if typ, _, err := readFrame(r); err != nil || typ != frameHello {
		t.Fatalf("no hello from the daemon: type %d, %v", typ, err)
	}
	me, _ := json.Marshal(hello{Fabric: f.Name, Slot: 1, Host: "node-b"})
	if _, err := ours.Write(frame(frameHello, [][]byte{me})); err != nil {
		t.Fatal(err)
	}
	return ours, r
}

// A frame's length alone holds no memory: it grows as its bytes come
// (review: 500 links announcing 1 MiB each and sending nothing held 500 MB).
func TestAFramesLengthAloneHoldsNoMemory(t *testing.T) {
	var in bytes.Buffer
	binary.Write(&in, binary.BigEndian, uint32(maxFrame))
	in.WriteString("0123456789") // then the link goes quiet, or away
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := readFrame(bufio.NewReader(&in))
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("a frame cut short was read")
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > maxFrame/4 {
		t.Errorf("reading 10 bytes of a %d-byte frame allocated %d bytes", maxFrame, got)
	}
}

// Past maxLinks a connection is closed at once, however many come at once
// (review: links were unbounded, each one held until its hello's 5 s ran
// out; then a burst got past a count taken before each link was served).
func TestLinksAreBounded(t *testing.T) {
	d, f := quietDaemon(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go d.ServePeers(l)
	most := maxLinks(len(f.Hosts))
	const extra = 20
	var held, closed atomic.Int64
	var wg sync.WaitGroup
	for range most + extra {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(func() { c.Close() })
			c.SetReadDeadline(time.Now().Add(4 * time.Second)) // before the hello's 5 s
			if _, err := c.Read(make([]byte, 64)); err == io.EOF {
				closed.Add(1)
			} else if err == nil {
				held.Add(1) // greeted
			}
		}()
	}
	wg.Wait()
	if held.Load() > int64(most) || closed.Load() < extra {
		t.Errorf("%d links at once: %d greeted, %d closed; want at most %d greeted", most+extra, held.Load(), closed.Load(), most)
	}
}

// A peer refused (another fabric here; a slot another node held a moment)
// is dialled again later, not never (review: never again).
func TestARefusedPeerIsDialledAgain(t *testing.T) {
	d, _ := quietDaemon(t)
	refusedWait = 50 * time.Millisecond
	t.Cleanup(func() { refusedWait = 30 * time.Second })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepts := make(chan struct{}, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepts <- struct{}{}
			body, _ := json.Marshal(hello{Fabric: "another-fabric", Slot: 1, Host: "node-b"})
			c.Write(frame(frameHello, [][]byte{body}))
			io.Copy(io.Discard, c) // until the daemon hangs up
			c.Close()
		}
	}()
	stop := make(chan struct{})
	defer close(stop)
	go d.DialPeers(func() []string { return []string{l.Addr().String()} }, stop)
	for i := range 2 {
		select {
		case <-accepts:
		case <-time.After(20 * time.Second):
			t.Fatalf("dialled %d times in 20 s, want again after a refusal", i)
		}
	}
}
