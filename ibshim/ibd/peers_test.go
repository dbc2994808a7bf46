package ibd

import (
	"bufio"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
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
	n := testenv.Node(t, "h100", 8)
	f, err := fabric.Build(n, "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(&strings.Builder{})
	d := New(n, f, log)
	defer d.Close()
	path := filepath.Join(t.TempDir(), "faults.json")
	setFaults(t, d, path, `[]`)
	d.FollowFaults(path)

	// node-b's ends of two links, each greeted as node-b would.
	var links []*bufio.Reader
	for range 2 {
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
