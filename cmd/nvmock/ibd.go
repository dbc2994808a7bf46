package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/ibshim/ibd"
	"github.com/nvmock/nvmock/profile"
)

// ibdCmd runs the node's fabric daemon: `nvmock ibd [--profile P] --socket
// PATH`. It serves until SIGINT or SIGTERM.
func ibdCmd(args []string) error {
	fs := flag.NewFlagSet("ibd", flag.ContinueOnError)
	name := fs.String("profile", "a100", "built-in profile name or profile file")
	socket := fs.String("socket", "/run/nvmock/ibd.sock", "where the umad shim connects (its $NVMOCK_IBD)")
	host := fs.String("host", "", "this node's host name in the fabric (default: $NODE_NAME, else the hostname)")
	slot := fs.Int("slot", -1, "this node's place in the fabric, 0 to nodes-1 (default: from its host name)")
	var lf loadFlags
	lf.add(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("ibd: unexpected argument %q", fs.Arg(0))
	}
	p, _, err := lf.load(*name)
	if err != nil {
		return err
	}
	node, err := p.Node()
	if err != nil {
		return err
	}
	f, err := buildFabric(node, nodeNameOr(*host), *slot)
	if err != nil {
		return fmt.Errorf("ibd: %w", err)
	}
	l, err := ibd.Listen(*socket)
	if err != nil {
		return fmt.Errorf("ibd: %w", err)
	}
	defer os.Remove(*socket)
	log := logrus.New()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sigs; l.Close() }()
	log.WithFields(logrus.Fields{"socket": *socket, "host": f.Hosts[f.Local], "slot": f.Local}).Info("fabric daemon serving")
	return ibd.New(node, f, log).Serve(l)
}

// buildFabric is the fabric of a node named host, or an error naming the
// profile when it has no InfiniBand.
func buildFabric(n *profile.Node, host string, slot int) (*fabric.Fabric, error) {
	if n.IB == nil {
		return nil, fmt.Errorf("profile %s has no InfiniBand (an infiniband block)", n.Profile.Name)
	}
	return fabric.Build(n, host, slot)
}
