//go:build integration

package ibshim_test

// The verbs data path: RC, UC, UD and XRC queue pairs move data between
// programs and nodes through the fabric daemons, checked with Debian's
// unmodified pingpongs and perftest and with a verbs program of our own for
// the error completions no tool provokes.

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/internal/testenv"
)

// modelledLID is the LID of a CA of a node that is only modelled.
func modelledLID(t *testing.T, f *fabric.Fabric) uint16 {
	t.Helper()
	for _, nd := range f.Subnets[0].Nodes {
		if nd.Type == fabric.CA && nd.Slot >= 0 && nd.Slot != f.Local {
			return nd.Ports[1].LID
		}
	}
	t.Fatal("the fabric has no modelled CA")
	return 0
}

func TestRCQueuePairsMoveDataAndFailAsHCAsDo(t *testing.T) {
	cc := testenv.Tool(t, "gcc")
	bin := filepath.Join(t.TempDir(), "rcpair")
	if out, err := exec.Command(cc, "-O1", "-Wall", "-Werror", "-o", bin, "testdata/rcpair.c", "-libverbs").CombinedOutput(); err != nil {
		testenv.Missing(t, "building testdata/rcpair.c against libibverbs (libibverbs-dev): %v\n%s", err, out)
	}
	lid := modelledLID(t, model(t))
	out := node(t, fmt.Sprintf("%s mlx5_0 %d", bin, lid))
	for _, check := range []string{"send", "write", "write-with-immediate", "read", "atomics", "rnr-then-receive", "states",
		"remote-access-error", "out-of-range", "misaligned-atomic", "operation-not-allowed", "too-long", "rnr-retry-exceeded", "big-write", "datagrams", "events", "srq", "cq-overrun", "comm-est", "uc", "regions", "retry-exceeded"} {
		if !strings.Contains(out, "ok "+check+"\n") {
			t.Errorf("rcpair did not pass %q:\n%s", check, out)
			break
		}
	}
	// Under valgrind, which reports a freed QP that libibverbs touches: a
	// QP destroyed before its event is read is kept until the context
	// closes; one whose event was acknowledged is freed at once.
	vg := testenv.Tool(t, "valgrind")
	for _, c := range []struct {
		check string
		kept  bool
	}{{"event-after-destroy", true}, {"event-then-destroy", false}} {
		out = node(t, fmt.Sprintf("NVMOCK_TRACE=1 %s -q --error-exitcode=9 %s mlx5_0 %d %s 2>&1; echo \"exit $?\"", vg, bin, lid, c.check))
		kept := strings.Contains(out, "mlx5_0: 1 destroyed objects were kept for async events not acknowledged")
		if !strings.Contains(out, "ok "+c.check+"\n") || !strings.Contains(out, "exit 0") || kept != c.kept {
			t.Errorf("rcpair %s under valgrind (want the QP kept: %v):\n%s", c.check, c.kept, out)
		}
	}
}

// ibv_rc_pingpong -t polls an extended CQ for completion timestamps, in
// ticks of the clock ibv_devinfo reports: the mean gap between receives
// is one round trip, which the tool also times by the system's clock.
// (With -e it arms the CQ before polling it, and stops at the event a
// ConnectX raises at once for completions not yet polled: its
// ibv_start_poll finds none, ENOENT, which its -t path takes as an error.)
func TestCompletionTimestampsTickWithTheDevicesClock(t *testing.T) {
	testenv.Tool(t, "ibv_rc_pingpong")
	for _, flags := range []string{"-t"} {
		out := node(t, testenv.WaitListen+fmt.Sprintf(`ibv_devinfo -v -d mlx5_0 | grep hca_core_clock
ibv_rc_pingpong -d mlx5_0 -g 0 -c %[1]s -n 200 -p 18661 > /tmp/server.out 2>&1 & srv=$!
waitlisten 18661; ibv_rc_pingpong -d mlx5_0 -g 0 -c %[1]s -n 200 -p 18661 localhost; echo "client exit $?"
wait $srv; echo "server exit $?"`, flags))
		clock := regexp.MustCompile(`hca_core_clock:\s*(\d+)kHZ`).FindStringSubmatch(out)
		iter := regexp.MustCompile(`200 iters in [\d.]+ seconds = ([\d.]+) usec/iter`).FindStringSubmatch(out)
		cycles := regexp.MustCompile(`Average receive completion clock cycles = ([\d.]+)`).FindStringSubmatch(out)
		if clock == nil || iter == nil || cycles == nil || !strings.Contains(out, "client exit 0") || !strings.Contains(out, "server exit 0") {
			t.Errorf("ibv_rc_pingpong %s:\n%s", flags, out)
			continue
		}
		khz, _ := strconv.ParseFloat(clock[1], 64)
		us, _ := strconv.ParseFloat(iter[1], 64)
		c, _ := strconv.ParseFloat(cycles[1], 64)
		// The two clocks time the same round trips, but the tool's
		// includes its first (a connection's start), which the mean gap
		// between receives leaves out.
		if got := c / khz * 1000; got < us/1.5 || got > us*1.5 {
			t.Errorf("ibv_rc_pingpong %s: %.0f cycles of %.0f kHz between receives is %.1f us, the tool's clock says %.1f us a round trip:\n%s",
				flags, c, khz, got, us, out)
		}
	}
}

// Parent and thread domains, as mlx5 gives them: checked by a verbs
// program of ours under valgrind, which also sees the queues use the
// memory the program's allocator gave.
func TestParentDomainsStandForTheirPDAndGiveQueueMemory(t *testing.T) {
	checkProgram(t, "domains", "hold", "cq", "stands-for-its-pd", "give-back", "allocator-answers")
}

// Extended CQs take what mlx5 takes (and refuse the rest with its errors),
// give wall-clock completion times, and can ignore overruns.
func TestExtendedCQsTakeWhatMlx5Takes(t *testing.T) {
	checkProgram(t, "cqex", "refusals", "fields", "ignore-overrun")
}

// A bind is the HCA's own work: the port's counters do not see it, it
// completes with no peer, and binds between messages keep their order.
func TestBindsAreTheHCAsOwnWork(t *testing.T) {
	checkProgram(t, "binds", "binds-unseen", "writes-seen", "bind-alone", "binds-between-messages", "uc-bind-then-error")
}

// Posting errors are mlx5's, a region of no bytes is refused, memory keys
// never repeat a live one's after their count wraps, and a child forked
// while writes flow closes its parent's context. Found in review.
func TestEdgesOfTheVerbsAreMlx5s(t *testing.T) {
	checkProgram(t, "lifecycle", "post-codes", "zero-length", "key-wrap", "fork-close")
}

// checkProgram builds testdata/<name>.c and runs it under valgrind on an
// exec'd node's mlx5_0; it must print "ok <check>" for each check.
func checkProgram(t *testing.T, name string, checks ...string) {
	cc := testenv.Tool(t, "gcc")
	vg := testenv.Tool(t, "valgrind")
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command(cc, "-O1", "-Wall", "-Werror", "-o", bin, "testdata/"+name+".c", "-libverbs").CombinedOutput(); err != nil {
		testenv.Missing(t, "building testdata/%s.c against libibverbs (libibverbs-dev): %v\n%s", name, err, out)
	}
	out := node(t, fmt.Sprintf("%s -q --error-exitcode=9 %s mlx5_0 2>&1; echo \"exit $?\"", vg, bin))
	for _, check := range checks {
		if !strings.Contains(out, "ok "+check+"\n") {
			t.Errorf("%s did not pass %q:\n%s", name, check, out)
			break
		}
	}
	if !strings.Contains(out, "exit 0") {
		t.Errorf("%s under valgrind:\n%s", name, out)
	}
}

// XRC: domains, XRC SRQs, and initiator and target QPs, checked by a
// verbs program of ours (what a send, RDMA and the errors do), then
// ibv_xsrq_pingpong between two programs, polling and with events.
func TestXRCRequestsReachTheSRQTheyName(t *testing.T) {
	cc := testenv.Tool(t, "gcc")
	bin := filepath.Join(t.TempDir(), "xrcpair")
	if out, err := exec.Command(cc, "-O1", "-Wall", "-Werror", "-o", bin, "testdata/xrcpair.c", "-libverbs").CombinedOutput(); err != nil {
		testenv.Missing(t, "building testdata/xrcpair.c against libibverbs (libibverbs-dev): %v\n%s", err, out)
	}
	out := node(t, bin+" mlx5_0 /tmp/xrc-domain")
	for _, check := range []string{"domains", "srqs", "send", "rnr", "rdma", "domain-violation", "refusals", "close"} {
		if !strings.Contains(out, "ok "+check+"\n") {
			t.Errorf("xrcpair did not pass %q:\n%s", check, out)
			break
		}
	}
	testenv.Tool(t, "ibv_xsrq_pingpong")
	for _, flags := range []string{"", "-e"} {
		// A port of its own: nvmock exec shares the host's network, and
		// the pingpongs' default is everyone's.
		out := node(t, testenv.WaitListen+fmt.Sprintf(`ibv_xsrq_pingpong -d mlx5_0 %[1]s -n 50 -p 18660 > /tmp/server.out 2>&1 & srv=$!
waitlisten 18660; ibv_xsrq_pingpong -d mlx5_0 %[1]s -n 50 -p 18660 localhost; echo "client exit $?"
wait $srv; echo "server exit $?"; cat /tmp/server.out`, flags))
		if strings.Count(out, "success\n") != 2 || !strings.Contains(out, "client exit 0") || !strings.Contains(out, "server exit 0") {
			t.Errorf("ibv_xsrq_pingpong %s, both ends on one node:\n%s\nwant both to succeed", flags, out)
		}
	}
}

// ibv_rc_pingpong and ibv_ud_pingpong -c check every buffer they receive;
// with -e they sleep on a completion channel instead of polling.
// ibv_srq_pingpong's 16 QPs take their receives from one SRQ.
// ibv_uc_pingpong's QPs are unreliable connected. ibv_rc_pingpong -j
// sends from device memory; -O -P registers the whole address space on
// demand and prefetches it.
func TestPingpongsBetweenTwoProgramsCheckTheirData(t *testing.T) {
	for _, c := range []struct{ tool, bytes string }{
		{"ibv_rc_pingpong", "1638400"},    // 200 round trips of 4096
		{"ibv_ud_pingpong", "409600"},     // of 2048, its default
		{"ibv_rc_pingpong -e", "1638400"}, // events
		{"ibv_ud_pingpong -e", "409600"},
		{"ibv_srq_pingpong", "1638400"},
		{"ibv_uc_pingpong", "1638400"},       // UC: unanswered
		{"ibv_rc_pingpong -j", "1638400"},    // from and into device memory
		{"ibv_rc_pingpong -O -P", "1638400"}, // an implicit on-demand region, prefetched
	} {
		testenv.Tool(t, strings.Fields(c.tool)[0])
		out := node(t, testenv.WaitListen+fmt.Sprintf(`%[1]s -d mlx5_0 -g 0 -c -n 200 > /tmp/server.out 2>&1 & srv=$!
waitlisten 18515; %[1]s -d mlx5_0 -g 0 -c -n 200 localhost; echo "client exit $?"
wait $srv; echo "server exit $?"; cat /tmp/server.out`, c.tool))
		if n := strings.Count(out, c.bytes+" bytes in "); n != 2 || !strings.Contains(out, "client exit 0") || !strings.Contains(out, "server exit 0") {
			t.Errorf("%s -c, both ends on one node:\n%s\nwant both to move %s bytes and exit 0", c.tool, out, c.bytes)
		}
	}
}

// perftest's bandwidth tests between two mock nodes, each with its own
// daemon: the packets cross between the daemons, and the node's port
// counters count them.
func TestPerftestRunsBetweenTwoNodes(t *testing.T) {
	tools := []string{"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw", "ib_send_bw -c UD", "ib_send_bw -e",
		"ib_send_bw -c UC", "ib_write_bw -c UC", "ib_send_bw -c XRC", "ib_write_bw -c XRC", "ib_read_bw -c XRC"}
	for _, tool := range tools {
		testenv.Tool(t, strings.Fields(tool)[0])
	}
	var server, client []string
	for i, tool := range tools {
		port := 18515 + i
		server = append(server, fmt.Sprintf("%s -d mlx5_0 -n 200 -p %d", tool, port))
		client = append(client, fmt.Sprintf("waitlisten %[2]d; echo '== %[1]s'; %[1]s -d mlx5_0 -n 200 -p %[2]d 127.0.0.1 || echo \"exit $?\"", tool, port))
	}
	out, serverOut := twoNodes(t, []string{"sh", "-c", strings.Join(server, " && ")},
		testenv.WaitListen+strings.Join(client, "\n")+"\necho '== counters'; perfquery -x -C mlx5_0")
	// " 65536      200      peak      average      rate" (4096 for UD)
	row := regexp.MustCompile(`(?m)^\s*(\d+)\s+200\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s*$`)
	parts := strings.Split(out, "== ")
	for i, tool := range tools {
		part := parts[i+1]
		m := row.FindStringSubmatch(part)
		if m == nil || strings.Contains(part, "exit ") {
			t.Errorf("%s from node-b to node-a:\n%s\nnode-a:\n%s", tool, part, serverOut)
			continue
		}
		if avg, _ := strconv.ParseFloat(m[2], 64); avg <= 0 {
			t.Errorf("%s: average bandwidth %s MB/s", tool, m[2])
		}
	}
	// write, read and send move 200 x 64 KiB each; the port sends the
	// writes and sends, and receives the reads.
	words := func(name string) uint64 {
		m := regexp.MustCompile(name + `:\.*(\d+)`).FindStringSubmatch(parts[len(parts)-1])
		if m == nil {
			t.Fatalf("perfquery -x:\n%s", parts[len(parts)-1])
		}
		n, _ := strconv.ParseUint(m[1], 10, 64)
		return n
	}
	if x, r := words("PortXmitData"), words("PortRcvData"); x < 2*200*65536/4 || r < 200*65536/4 {
		t.Errorf("node-b's mlx5_0 counts %d words sent and %d received; want at least %d and %d", x, r, 2*200*65536/4, 200*65536/4)
	}
}

// A verbs program waiting on its context's async fd hears of the port
// going down and coming back, as an HCA raises them.
func TestAsyncEventsTellOfThePortGoingDownAndUp(t *testing.T) {
	testenv.Tool(t, "ibv_asyncwatch")
	testenv.Tool(t, "stdbuf")
	bin := builtNvmock(t)
	// stdbuf: ibv_asyncwatch never exits by itself, and would keep what
	// it printed in its buffer when killed.
	out := node(t, fmt.Sprintf(`stdbuf -oL ibv_asyncwatch -d mlx5_0 > /tmp/aw.out 2>&1 & aw=$!
sleep 0.3; %[1]s ctl ib down mlx5_0
for i in $(seq 50); do grep -q PORT_ERR /tmp/aw.out && break; sleep 0.1; done
%[1]s ctl ib up mlx5_0
for i in $(seq 50); do grep -q PORT_ACTIVE /tmp/aw.out && break; sleep 0.1; done
kill $aw; wait $aw 2>/dev/null; cat /tmp/aw.out`, bin))
	want := "  event_type IBV_EVENT_PORT_ERR (10), port 1\n  event_type IBV_EVENT_PORT_ACTIVE (9), port 1\n"
	if !strings.Contains(out, want) {
		t.Errorf("ibv_asyncwatch while mlx5_0 went down and up:\n%s\nwant\n%s", out, want)
	}

	// A daemon that goes away ends no kernel async fd: ibv_asyncwatch
	// waits on (timeout ends it, 124). Without the shim's preload it
	// reads the end of the connection and gives up (1): the control.
	// The stand-in daemon is waited for once killed: one still dying as
	// the script ends is a process exec tells of having to end.
	testenv.Tool(t, "python3")
	out = node(t, `for preload in "$LD_PRELOAD" ""; do
sock=$(mktemp -u /tmp/nvmock-gone.XXXXXX)
python3 -c 'import socket,sys,time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.bind(sys.argv[1]); s.listen()
c, _ = s.accept(); c.recv(128); c.close(); time.sleep(2)' $sock &
for i in $(seq 100); do [ -S $sock ] && break; sleep 0.1; done
LD_PRELOAD="$preload" NVMOCK_IBD=$sock timeout 1 ibv_asyncwatch -d mlx5_0 >/dev/null; echo "exit $?"
kill $! 2>/dev/null; wait $! 2>/dev/null; rm -f $sock
done`)
	if got := strings.Fields(out); !slices.Equal(got, []string{"exit", "124", "exit", "1"}) {
		t.Errorf("ibv_asyncwatch after its daemon went away, with the shim and without: %q; want exit 124, then exit 1", got)
	}
}

// A completion channel is libibverbs' own command to the kernel, which
// only the umad shim answers: without its preload the channel cannot be
// made, and the pingpong says so rather than running on a fake.
func TestCompletionChannelsNeedTheShim(t *testing.T) {
	testenv.Tool(t, "ibv_rc_pingpong")
	out := node(t, `env -u LD_PRELOAD ibv_rc_pingpong -d mlx5_0 -e; echo "== events $?"`)
	if want := "Couldn't create completion channel\n== events 1"; !strings.Contains(out, want) {
		t.Errorf("output:\n%s\nwant %q", out, want)
	}
}

// perftest's latency tests, both ends on one node: each finishes its
// iterations and reports a latency row.
func TestPerftestLatencyToolsRun(t *testing.T) {
	tools := []string{"ib_write_lat", "ib_read_lat", "ib_send_lat", "ib_atomic_lat", "ib_send_lat -c UD",
		"ib_write_lat -c UC", "ib_send_lat -c XRC", "ib_read_lat -c XRC"}
	var script []string
	for i, tool := range tools {
		testenv.Tool(t, strings.Fields(tool)[0])
		// Ports of their own: exec shares the host's network with the
		// other tests' servers.
		script = append(script, fmt.Sprintf(`%[1]s -d mlx5_0 -n 100 -p %[2]d > /dev/null 2>&1 & srv=$!
waitlisten %[2]d; echo '== %[1]s'; %[1]s -d mlx5_0 -n 100 -p %[2]d 127.0.0.1 || echo "client exit $?"; wait $srv || echo "server exit $?"`, tool, 18680+i))
	}
	parts := strings.Split(node(t, testenv.WaitListen+strings.Join(script, "\n")), "== ")
	// " 2       100          25.97 ..." (8 bytes for atomics)
	row := regexp.MustCompile(`(?m)^\s*(2|8)\s+100\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s`)
	for i, tool := range tools {
		if i+1 >= len(parts) {
			t.Fatalf("%s did not run:\n%s", tool, strings.Join(parts, "== "))
		}
		part := parts[i+1]
		if m := row.FindStringSubmatch(part); m == nil || strings.Contains(part, " exit ") {
			t.Errorf("%s:\n%s\nwant a latency row for 100 iterations and both ends to exit 0", tool, part)
		}
	}
}
