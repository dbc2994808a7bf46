package nsexec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// startInThread is root's way to start the command: one thread of this
// process makes the new mount namespace, sets it up as Child does and
// starts the command from it. Re-executing this program for that instead
// cost a whole start-up of it (its packages' initialisation), about a sixth
// of an exec on a100. The thread lives, and keeps the namespace and the
// command's Pdeathsig, until release is called once the command is reaped;
// then it ends (Go ends a thread whose goroutine exits locked to it), and
// no other goroutine ever runs in the namespace. It returns the namespace
// held open (holdMountNS): the command may be gone before the caller could
// open it through the command. A signal on sigs during the setup ends the
// run before the command starts, as it ended the child that did the setup.
// A failure comes back as Child reports one, as text but for unshare's, so
// that Run can tell its EPERM.
func startInThread(s spec, cmd *exec.Cmd, sigs <-chan os.Signal) (release func(), ns string, nsf *os.File, status int, err error) {
	type result struct {
		ns     string
		nsf    *os.File
		status int
		err    error
	}
	res := make(chan result, 1)
	rel := make(chan struct{})
	onOtherThread(func() {
		fail := func(status int, err error) { res <- result{status: status, err: err} }
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			fail(StatusSetup, fmt.Errorf("make a private mount namespace: %w", err))
			return
		}
		// CLONE_NEWNS gave this thread its own umask too: the nodes and
		// directories keep the overlay's modes, the command gets the
		// caller's.
		umask := syscall.Umask(0)
		err := setup(s)
		syscall.Umask(umask)
		if err != nil {
			fail(StatusSetup, errors.New(err.Error()))
			return
		}
		path, code, err := lookPath(cmd.Args[0], pathOf(cmd.Env))
		if err != nil {
			fail(code, err)
			return
		}
		ns, nsf := holdMountNS("/proc/thread-self/ns/mnt")
		select {
		case sig := <-sigs:
			if nsf != nil {
				nsf.Close()
			}
			fail(128+int(sig.(syscall.Signal)), fmt.Errorf("interrupted by %v", sig))
			return
		default:
		}
		cmd.Path = path
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			if nsf != nil {
				nsf.Close()
			}
			code := StatusNotRunnable
			if errors.Is(err, syscall.ENOENT) {
				code = StatusNotFound
			}
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			fail(code, fmt.Errorf("%s: %v", cmd.Args[0], err))
			return
		}
		res <- result{ns: ns, nsf: nsf}
		<-rel
	})
	r := <-res
	if r.err != nil {
		return nil, "", nil, r.status, r.err
	}
	return func() { close(rel) }, r.ns, r.nsf, 0, nil
}

// onOtherThread runs f in a goroutine locked to a thread that is not the
// process's main one, and never unlocked: the thread ends with f. The main
// thread is the process's face in /proc (its /proc/PID/ns/mnt is what
// endLeftovers and the guard look for), and Go keeps it rather than ending
// it; so if the goroutine lands there, it holds that thread while another
// one, which then cannot, runs f.
func onOtherThread(f func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			f()
			return
		}
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			defer close(done)
			f()
		}()
		<-done
		runtime.UnlockOSThread()
	}()
}

// pathOf is env's PATH.
func pathOf(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "PATH="); ok {
			return v
		}
	}
	return ""
}
