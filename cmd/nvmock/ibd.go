package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/ibshim/ibd"
	"github.com/nvmock/nvmock/ibshim/umad"
	"github.com/nvmock/nvmock/profile"
)

// ibdCmd runs the node's fabric daemon: `nvmock ibd [--profile P] --socket
// PATH [--listen ADDR --peers ADDR,...]`. It serves until SIGINT or SIGTERM.
const ibdUsage = "Usage: nvmock ibd [flags]\n  Serves the node's InfiniBand fabric until SIGINT or SIGTERM.\n"

func ibdCmd(args []string) error {
	fs := flag.NewFlagSet("ibd", flag.ContinueOnError)
	name := fs.String("profile", "a100", "built-in profile name or profile file")
	socket := fs.String("socket", "/run/nvmock/ibd.sock", "where the umad shim connects (its $NVMOCK_IBD)")
	host := fs.String("host", "", "this node's host name in the fabric (default: $NODE_NAME, else the hostname)")
	slot := fs.Int("slot", -1, "this node's place in the fabric, 0 to nodes-1; -1: from its host name")
	var lf loadFlags
	lf.add(fs)
	var pf peerFlags
	pf.add(fs, "")
	var faults faultFlags
	fs.Var(&faults, "fault", faultUsage)
	state := fs.String("state", "", "serve the installed node whose live state file this is (<root>/live/state): its fabric, the port faults nvmock ctl ib sets, its ports' counters in sysfs (run it instead of the NRI plugin's daemon, not beside it)")
	if err := parseFlags(fs, args, os.Stdout, ibdUsage); err != nil {
		return helpShown(err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("ibd: unexpected argument %q", fs.Arg(0))
	}
	if *host != "" && !validNodeName(*host) {
		return fmt.Errorf("ibd: --host %q: %s", *host, hostNameRule)
	}
	if n := os.Getenv("NODE_NAME"); *host == "" && *state == "" && n != "" && !validNodeName(n) {
		return fmt.Errorf("ibd: $NODE_NAME %q, the node's fabric host name without --host: %s", n, hostNameRule)
	}
	if *socket == "" {
		return errors.New("ibd: --socket is empty; give the path the umad shim connects to")
	}
	if err := pf.check(); err != nil {
		return fmt.Errorf("ibd: %w", err)
	}
	node, f, faultsFile, err := ibdFabric(fs, *state, *name, *host, *slot, lf, faults)
	if err != nil {
		return err
	}
	l, err := ibd.Listen(*socket)
	if err != nil {
		return fmt.Errorf("ibd: %w", err)
	}
	word, _ := os.ReadFile(*socket + umad.IDSuffix)
	defer leaveSocket(*socket, word)
	log := logrus.New()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sigs; l.Close() }()
	d := ibd.New(node, f, log)
	if faultsFile != "" {
		d.FollowFaults(faultsFile)
	}
	stopPeers, err := pf.start(d, log)
	if err != nil {
		return fmt.Errorf("ibd: %w", err)
	}
	defer stopPeers()
	log.WithFields(logrus.Fields{"socket": *socket, "host": f.Hosts[f.Local], "slot": f.Local, "listen": pf.listen, "peers": pf.peers, "peersDNS": pf.dns}).Info("fabric daemon serving")
	return d.Serve(l)
}

// ibdFabric is the node and fabric ibd serves: an installed node's (state,
// with the faults file it follows), or the profile's.
func ibdFabric(fs *flag.FlagSet, state, name, host string, slot int, lf loadFlags, faults faultFlags) (*profile.Node, *fabric.Fabric, string, error) {
	if state != "" {
		var set []string
		fs.Visit(func(fl *flag.Flag) {
			if fl.Name != "state" && fl.Name != "socket" && !strings.HasPrefix(fl.Name, "listen") && !strings.HasPrefix(fl.Name, "peers") {
				set = append(set, "--"+fl.Name)
			}
		})
		if len(set) > 0 {
			return nil, nil, "", fmt.Errorf("ibd: --state serves the installed node's fabric and faults; leave out %s", strings.Join(set, ", "))
		}
		dir := hostprep.IBLiveDir(state)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return nil, nil, "", fmt.Errorf("ibd: --state %s: no InfiniBand live state beside it (%s); give the state of a node installed with InfiniBand", state, dir)
		}
		node, f, err := hostprep.LiveFabric(state)
		if err != nil {
			return nil, nil, "", fmt.Errorf("ibd: --state: %w", err)
		}
		return node, f, filepath.Join(dir, hostprep.IBLiveFaults), nil
	}
	p, _, err := lf.load(name)
	if err != nil {
		return nil, nil, "", err
	}
	node, err := p.Node()
	if err != nil {
		return nil, nil, "", err
	}
	if node.IB == nil {
		return nil, nil, "", fmt.Errorf("ibd: profile %s has no InfiniBand (no infiniband block)", p.Name)
	}
	if slot < -1 {
		return nil, nil, "", fmt.Errorf("ibd: --slot %d: give 0 to the fabric's nodes - 1, or leave it out", slot)
	}
	f, err := fabric.Build(node, nodeNameOr(host), slot)
	if err != nil {
		return nil, nil, "", fmt.Errorf("ibd: --slot: %w", err)
	}
	if err := f.Apply(faults); err != nil {
		return nil, nil, "", fmt.Errorf("ibd: --fault: %w", err)
	}
	return node, f, "", nil
}

// peerFlags say how a node's fabric daemon finds the other real nodes'.
type peerFlags struct {
	prefix             string // of the flags' names, for messages
	listen, peers, dns string
}

// Usage of the peer flags, which ibd, exec and nri share.
const (
	peerListenUsage = "TCP address where other nodes' fabric daemons connect, such as :4791; empty: none"
	peerPeersUsage  = "comma list of other nodes' fabric daemons, HOST:PORT"
	peerDNSUsage    = "a name whose addresses are the other nodes' daemons (a headless Service), on the listen port"
)

func (f *peerFlags) add(fs *flag.FlagSet, prefix string) {
	f.prefix = prefix
	fs.StringVar(&f.listen, prefix+"listen", "", peerListenUsage)
	fs.StringVar(&f.peers, prefix+"peers", "", peerPeersUsage)
	fs.StringVar(&f.dns, prefix+"peers-dns", "", peerDNSUsage)
}

// check refuses flags that cannot work together, at start.
// none says whether no flag connects this daemon to other nodes'.
func (f *peerFlags) none() bool { return f.listen == "" && f.peers == "" && f.dns == "" }

func (f *peerFlags) check() error {
	if f.dns != "" && f.listen == "" {
		return fmt.Errorf("--%speers-dns needs --%slisten: the peers listen on the same port", f.prefix, f.prefix)
	}
	if f.listen != "" {
		if _, _, err := net.SplitHostPort(f.listen); err != nil {
			return fmt.Errorf("--%slisten %q: %w", f.prefix, f.listen, err)
		}
	}
	for _, a := range splitList(f.peers) {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("--%speers: %q is not HOST:PORT: %w", f.prefix, a, err)
		}
	}
	return nil
}

// start serves and dials the peers the flags name; stop ends both. A name
// that does not resolve is logged (when its error changes, or after a
// minute) and tried again each round: with broken DNS the nodes would
// otherwise never meet, silently.
func (f *peerFlags) start(d *ibd.Daemon, log logrus.FieldLogger) (stop func(), err error) {
	done := make(chan struct{})
	var closers []func()
	stop = func() {
		close(done)
		for _, c := range closers {
			c()
		}
		d.Close()
	}
	port := ""
	if f.listen != "" {
		l, err := net.Listen("tcp", f.listen)
		if err != nil {
			return nil, fmt.Errorf("--%slisten: %w", f.prefix, err)
		}
		closers = append(closers, func() { l.Close() })
		go d.ServePeers(l)
		_, port, _ = net.SplitHostPort(l.Addr().String())
	}
	static := splitList(f.peers)
	if len(static) == 0 && f.dns == "" {
		return stop, nil
	}
	var lastErr string
	var lastAt time.Time
	go d.DialPeers(func() []string {
		out := append([]string{}, static...)
		if f.dns != "" {
			ips, err := net.LookupHost(f.dns) // none yet: the next round
			if err != nil && (err.Error() != lastErr || time.Since(lastAt) > time.Minute) {
				log.WithError(err).WithField("name", f.dns).Warn("cannot resolve the other nodes' fabric daemons; trying again")
				lastErr, lastAt = err.Error(), time.Now()
			}
			for _, ip := range ips {
				out = append(out, net.JoinHostPort(ip, port))
			}
		}
		return out
	}, done)
	return stop, nil
}

// faultFlags collect repeated --ib-fault flags ([NODE/]HCA=down or
// [NODE/]HCA=COUNTER:N,...), parsed as they come, so that a bad one is
// named by its flag; flags for one port make one fault.
type faultFlags []fabric.Fault

func (f *faultFlags) String() string { return "" }

func (f *faultFlags) Set(s string) error {
	ft, err := fabric.ParseFault(s)
	if err != nil {
		return err
	}
	// As within one flag: two values of one counter leave which is meant open.
	for _, old := range *f {
		for name := range ft.Counters {
			if _, twice := old.Counters[name]; twice && old.Node == ft.Node && old.HCA == ft.HCA {
				return fmt.Errorf("%s of %s is given twice", name, ft.HCA)
			}
		}
	}
	*f = fabric.Merge(*f, ft)
	return nil
}

const faultUsage = "an InfiniBand port fault, repeatable: [NODE/]HCA=down (cable out) or\n[NODE/]HCA=COUNTER:N,... (error counters such as symbol_error:12); NODE: for that node only"

// leaveSocket removes a daemon's socket and word as it stops, unless a new
// daemon has taken the path over (a restart): that one's word is beside
// it then.
func leaveSocket(path string, word []byte) {
	if now, err := os.ReadFile(path + umad.IDSuffix); err == nil && string(now) == string(word) {
		os.Remove(path)
		os.Remove(path + umad.IDSuffix)
	}
}
