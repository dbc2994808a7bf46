package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/ibshim/ibd"
	"github.com/nvmock/nvmock/ibshim/umad"
	"github.com/nvmock/nvmock/internal/testenv"
)

// A peers name that does not resolve is said in the log, once, and tried
// again (review on the real node: on a cluster without DNS the daemons
// never met, and nothing said why).
func TestAPeersNameThatDoesNotResolveIsLogged(t *testing.T) {
	n := testenv.Node(t, "h100", 8)
	f, err := fabric.Build(n, "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	var out testenv.SyncBuffer
	log := logrus.New()
	log.SetOutput(&out)
	d := ibd.New(n, f, log)
	pf := &peerFlags{listen: "127.0.0.1:0", dns: "nvmock-fabric.invalid"}
	stop, err := pf.start(d, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "cannot resolve"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning about the name after 10 s; the log:\n%s", out.String())
		}
	}
	time.Sleep(2 * time.Second) // rounds go on
	if got := out.String(); strings.Count(got, "cannot resolve") != 1 || !strings.Contains(got, "nvmock-fabric.invalid") {
		t.Errorf("the log:\n%s\nwant one warning naming nvmock-fabric.invalid", got)
	}
}

// ibd's own mistakes name what is wrong, not a flag that was not given.
func TestIbdRefusesABoardWithoutInfiniBand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ibd", "--profile", "l40s", "--socket", t.TempDir() + "/s"}, "ibd: profile l40s has no InfiniBand (no infiniband block)"},
		{[]string{"ibd", "--profile", "h100", "--socket", t.TempDir() + "/s", "--fault", "mlx5_99=down"}, "ibd: --fault: the node has no InfiniBand HCA mlx5_99"},
		{[]string{"ibd", "--profile", "h100", "--socket", t.TempDir() + "/s", "--fault", "mlx5_0=symbol_error:3", "--fault", "mlx5_0=symbol_error:5"}, "symbol_error of mlx5_0 is given twice"},
		{[]string{"ibd", "--socket", t.TempDir() + "/s", "--state", "/nonexistent/live/state"}, "ibd: --state /nonexistent/live/state: no InfiniBand live state beside it (/nonexistent/live/ib)"},
		{[]string{"ibd", "--profile", "h100", "--slot", "3", "--socket", t.TempDir() + "/s", "--state", "/nonexistent/live/state"}, "ibd: --state serves the installed node's fabric and faults; leave out --profile, --slot"},
	} {
		if err := run(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// A daemon stopping leaves the socket a new daemon took over (it removed
// the new one's by name).
func TestAStoppingDaemonLeavesItsSuccessorsSocket(t *testing.T) {
	sock := t.TempDir() + "/ibd.sock"
	old, err := ibd.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	oldWord, _ := os.ReadFile(sock + umad.IDSuffix)
	next, err := ibd.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	leaveSocket(sock, oldWord)
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the old daemon removed the new one's socket: %v", err)
	}
	word, _ := os.ReadFile(sock + umad.IDSuffix)
	leaveSocket(sock, word)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the daemon's own socket stayed: %v", err)
	}
}
