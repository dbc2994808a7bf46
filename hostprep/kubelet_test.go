//go:build integration

package hostprep_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// standInKubelet is the part of the kubelet a device plugin talks to: the
// v1beta1 Registration service on kubelet.sock. It records each Register
// call; the test then plays the kubelet's side towards the plugin.
type standInKubelet struct {
	srv        *grpc.Server
	registered chan *pluginapi.RegisterRequest
}

// registration implements pluginapi.RegistrationServer.
type registration struct {
	pluginapi.UnimplementedRegistrationServer
	k *standInKubelet
}

func (r registration) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	select {
	case r.k.registered <- req:
	default: // nobody is waiting for a re-registration; the first one counts
	}
	return &pluginapi.Empty{}, nil
}

// startKubelet serves the Registration service on socket until the test ends.
func startKubelet(t *testing.T, socket string) *standInKubelet {
	t.Helper()
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatalf("stand-in kubelet: %v", err)
	}
	k := &standInKubelet{srv: grpc.NewServer(), registered: make(chan *pluginapi.RegisterRequest, 4)}
	pluginapi.RegisterRegistrationServer(k.srv, registration{k: k})
	go func() { _ = k.srv.Serve(l) }()
	t.Cleanup(k.srv.Stop)
	return k
}

// waitRegister returns the first Register call, or fails the test after
// timeout; exited, when it closes first, says the plugin died.
func (k *standInKubelet) waitRegister(t *testing.T, timeout time.Duration, exited <-chan struct{}, log func() string) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case req := <-k.registered:
		return req
	case <-exited:
		t.Fatalf("the device plugin exited before registering:\n%s", log())
	case <-time.After(timeout):
		t.Fatalf("no Register call within %v:\n%s", timeout, log())
	}
	return nil
}

// dialPlugin connects to a plugin's endpoint as the kubelet does.
func dialPlugin(t *testing.T, socket string) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial device plugin at %s: %v", socket, err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}
