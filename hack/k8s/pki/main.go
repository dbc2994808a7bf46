// Command pki writes the certificates, keys and kubeconfigs of the one-node
// test cluster of hack/k8s-node.sh (internal/pki says what they are).
//
//	pki -dir DIR -node NAME -node-ip IP -service-ip IP -server URL
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/nvmock/nvmock/internal/pki"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run parses the flags and writes; it returns the exit status: 2 for bad
// flags (every problem in one pass), 1 when writing fails.
func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("pki", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c pki.Config
	var nodeIP, serviceIP string
	fs.StringVar(&c.Dir, "dir", "", "output directory")
	fs.StringVar(&c.Node, "node", "", "node name")
	fs.StringVar(&nodeIP, "node-ip", "", "node IP")
	fs.StringVar(&serviceIP, "service-ip", "10.96.0.1", "the kubernetes Service's ClusterIP")
	fs.StringVar(&c.Server, "server", "https://127.0.0.1:6443", "API server URL for the kubeconfigs")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c.NodeIP, c.ServiceIP = net.ParseIP(nodeIP), net.ParseIP(serviceIP)
	var errs []error
	if c.Dir == "" || c.Node == "" {
		errs = append(errs, errors.New("-dir and -node are required"))
	}
	if c.NodeIP == nil {
		errs = append(errs, fmt.Errorf("-node-ip %q is not an IP address", nodeIP))
	}
	if c.ServiceIP == nil {
		errs = append(errs, fmt.Errorf("-service-ip %q is not an IP address", serviceIP))
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(stderr, "pki:", err)
		return 2
	}
	if err := pki.Write(c, time.Now()); err != nil {
		fmt.Fprintln(stderr, "pki:", err)
		return 1
	}
	return 0
}
