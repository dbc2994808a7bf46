// Package cri holds what the e2e suite and hack/chartpod both need to talk
// to a container runtime through CRI: a connection and the log format.
package cri

import (
	"context"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Dial connects to a runtime's CRI socket (a path); close the connection
// when done.
func Dial(socket string) (runtime.RuntimeServiceClient, *grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", strings.TrimPrefix(addr, "unix://"))
		}))
	if err != nil {
		return nil, nil, err
	}
	return runtime.NewRuntimeServiceClient(conn), conn, nil
}

// Log returns what a container wrote, from its CRI log file: lines of
// "<time> <stream> <P|F> <text>", where P marks a line the runtime split
// and F its last part.
func Log(data []byte) string {
	var b strings.Builder
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.SplitN(l, " ", 4)
		if len(f) < 4 {
			continue
		}
		b.WriteString(f[3])
		if f[2] != "P" {
			b.WriteByte('\n')
		}
	}
	return b.String()
}
