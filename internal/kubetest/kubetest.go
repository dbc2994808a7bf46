package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nvmock/nvmock/internal/pki"
	"github.com/nvmock/nvmock/internal/testenv"
)

// readyTimeout bounds the API server's start; it takes 3 to 8 s here, more
// on a loaded machine.
const readyTimeout = 90 * time.Second

// Server is a running etcd and kube-apiserver.
type Server struct {
	URL        string       // https://127.0.0.1:PORT
	CAFile     string       // the CA that signed the serving certificate
	Kubeconfig string       // an admin (system:masters) kubeconfig
	Config     *rest.Config // the same admin credentials
	Dir        string       // PKI, etcd data and the logs (etcd.log, kube-apiserver.log)

	apiserverArgs []string
	bin           string
	etcd, api     *proc
}

// Bin is the directory of the etcd and kube-apiserver binaries; without
// them the test stops through testenv.Missing.
func Bin(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(testenv.CacheDir(), "k8s", "bin")
	for _, n := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			testenv.Missing(t, "%s in %s (run hack/k8s-node.sh build)", n, dir)
		}
	}
	return dir
}

// Start starts etcd and kube-apiserver and returns once the API server is
// ready; both stop when t's cleanup runs.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Bin(t)
	var s *Server
	var err error
	// A free port found here may be taken before the server binds it; try
	// again with other ports then.
	for range 3 {
		if s, err = start(t, bin); !errors.Is(err, errPortTaken) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var errPortTaken = errors.New("a port was taken")

func start(t testing.TB, bin string) (*Server, error) {
	dir := t.TempDir()
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	s := &Server{URL: "https://127.0.0.1:" + strconv.Itoa(ports[2]), Dir: dir, bin: bin}
	pkiDir := filepath.Join(dir, "pki")
	if err := pki.Write(pki.Config{Dir: pkiDir, Node: "kubetest", NodeIP: net.IPv4(127, 0, 0, 1),
		ServiceIP: net.IPv4(10, 0, 0, 1), Server: s.URL}, time.Now()); err != nil {
		return nil, fmt.Errorf("kubetest: pki: %w", err)
	}
	s.CAFile = filepath.Join(pkiDir, "ca.crt")
	s.Kubeconfig = filepath.Join(pkiDir, "admin.kubeconfig")
	if s.Config, err = clientcmd.BuildConfigFromFlags("", s.Kubeconfig); err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	s.Config.QPS, s.Config.Burst = 100, 200 // set-up requests are not throttled

	s.etcd, err = startProc(dir, "etcd", filepath.Join(bin, "etcd"),
		"--name=kubetest", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubetest="+peerURL,
		"--unsafe-no-fsync", "--log-level=warn") // a throwaway store: no fsync
	if err != nil {
		return nil, err
	}
	t.Cleanup(s.stop)
	hc := &http.Client{Timeout: 2 * time.Second}
	if err := s.etcd.waitFor(readyTimeout, func() bool {
		resp, err := hc.Get(etcdURL + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		s.stop()
		return nil, err
	}
	s.apiserverArgs = []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[2]), "--advertise-address=127.0.0.1",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--endpoint-reconciler-type=none", // no Endpoints for a loopback address
		"--authorization-mode=RBAC",
		"--client-ca-file=" + s.CAFile,
		"--tls-cert-file=" + filepath.Join(pkiDir, "apiserver.crt"),
		"--tls-private-key-file=" + filepath.Join(pkiDir, "apiserver.key"),
		"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(pkiDir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(pkiDir, "sa.key"),
		"--profiling=false",
	}
	if err := s.startAPIServer(); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// Restart kills the API server, as a crash would, and starts it again on
// the same port and etcd; it returns once the new one is ready. Its watch
// cache starts at etcd's current revision, so a watch from an older
// resourceVersion is answered with 410 Gone.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.api.kill()
	if err := s.startAPIServer(); err != nil {
		t.Fatal(err)
	}
}

func (s *Server) startAPIServer() error {
	var err error
	if s.api, err = startProc(s.Dir, "kube-apiserver", filepath.Join(s.bin, "kube-apiserver"), s.apiserverArgs...); err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		return err
	}
	hc.Timeout = 2 * time.Second
	return s.api.waitFor(readyTimeout, func() bool {
		resp, err := hc.Get(s.URL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// stop kills both processes; the test's TempDir cleanup removes the rest.
func (s *Server) stop() {
	if s.api != nil {
		s.api.kill()
	}
	if s.etcd != nil {
		s.etcd.kill()
	}
}

// proc is one server process, its log in DIR/NAME.log.
type proc struct {
	name, exe, log string
	cmd            *exec.Cmd
	done           chan struct{} // closed once the process is reaped
}

func startProc(dir, name, exe string, args ...string) (*proc, error) {
	exe, err := filepath.EvalSymlinks(exe) // what /proc/PID/exe will say
	if err == nil {
		exe, err = filepath.Abs(exe)
	}
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	log := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, exe: exe, log: log, cmd: exec.Command(exe, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// Pdeathsig: a test binary killed by its timeout takes the server with it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("kubetest: start %s: %w", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// waitFor polls ready every 100 ms until it is true, the process exits, or
// timeout passes; the error quotes the log's end.
func (p *proc) waitFor(timeout time.Duration, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if ready() {
			return nil
		}
		select {
		case <-p.done:
			tail := p.tail()
			if bytes.Contains(tail, []byte("address already in use")) {
				return fmt.Errorf("kubetest: %s: %w", p.name, errPortTaken)
			}
			return fmt.Errorf("kubetest: %s exited (%v); the end of %s:\n%s", p.name, p.cmd.ProcessState, p.log, tail)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.kill()
			return fmt.Errorf("kubetest: %s not ready after %v; the end of %s:\n%s", p.name, timeout, p.log, p.tail())
		}
	}
}

func (p *proc) tail() []byte {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return b
}

// kill sends SIGKILL while the pid still runs our binary (checked in
// /proc/PID/exe), and waits until it is reaped.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	if ours(p.cmd.Process.Pid, p.exe) {
		_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		fmt.Fprintf(os.Stderr, "kubetest: %s (pid %d) did not exit after SIGKILL\n", p.name, p.cmd.Process.Pid)
	}
}

// ours says pid runs exe: a pid is only a number, reused once reaped.
func ours(pid int, exe string) bool {
	l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return err == nil && (l == exe || l == exe+" (deleted)")
}

// freePorts are n loopback ports nobody listened on a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("kubetest: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ctx is a context for one set-up request.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}
