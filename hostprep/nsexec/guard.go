package nsexec

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// guardArg, in Child's place of the specification, starts the guard.
const guardArg = "--guard"

// The guard's descriptors: the pipe only Run holds the other end of, and
// the command's mount namespace.
const (
	guardPipeFD = 3
	guardNSFD   = 4
)

// startGuard starts a process that ends what the command left running, and
// removes dir (if set), should this process die without doing it: a SIGKILL
// leaves no time to, and Pdeathsig reaches the command alone. The guard
// waits on a pipe whose other end only this process holds; the returned
// function tells it that all is done. Without a guard (it could not start)
// the run goes on, as it did before guards.
func startGuard(o Options, nsf *os.File, dir string) func() {
	if nsf == nil {
		return func() {}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return func() {}
	}
	defer r.Close()
	g := exec.Command(o.Self[0], append(append([]string{}, o.Self[1:]...), guardArg, dir)...)
	g.Args[0] = "nvmock-exec-guard" // what ps shows; Path runs the program
	g.ExtraFiles = []*os.File{r, nsf}
	// Another writer would need this process alive to copy to it.
	if f, ok := o.Stderr.(*os.File); ok {
		g.Stderr = f
	} else if o.Stderr == nil {
		g.Stderr = os.Stderr
	}
	// A group of its own: a kill of exec's whole group (timeout(1), a CI
	// job's end) leaves the guard to end the command's daemons.
	g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := g.Start(); err != nil {
		w.Close()
		if o.Note != nil {
			o.Note(fmt.Sprintf("no guard (%v): a SIGKILL of exec would leave the command's other processes running", err))
		}
		return func() {}
	}
	return func() {
		// The run is over and the guard has nothing left to do. One still
		// starting would outlive exec by its start-up, a process left
		// behind (an exec in another's namespace found it among the
		// command's leftovers): end it. The byte first, so that it never
		// reads the pipe's end as exec's death.
		_, _ = w.Write([]byte{1})
		_ = g.Process.Kill()
		_ = g.Wait()
		w.Close()
	}
}

// guard is the process startGuard starts. It returns only if it was not.
func guard(args []string) error {
	var pipeSt, nsSt syscall.Stat_t
	if len(args) != 1 || syscall.Fstat(guardPipeFD, &pipeSt) != nil || syscall.Fstat(guardNSFD, &nsSt) != nil {
		return errors.New("nsexec: guard started without its pipe and namespace (it is run by nvmock exec)")
	}
	// Signals for exec are exec's to pass on, and it ends the run itself;
	// a stderr whose reader died with exec must not end the guard.
	signal.Ignore(append(Forwarded, syscall.SIGPIPE)...)
	pipe := os.NewFile(guardPipeFD, "nsexec-guard")
	var b [1]byte
	if n, _ := pipe.Read(b[:]); n == 1 {
		os.Exit(0)
	}
	// EOF without the byte: exec died.
	ns := fmt.Sprintf("mnt:[%d]", nsSt.Ino)
	// A full stderr nobody reads must not hold up the ending.
	wrote, noted := make(chan struct{}), false
	note := func(s string) {
		noted = true
		go func() {
			fmt.Fprintln(os.Stderr, "nvmock exec: note: exec was killed;", s)
			close(wrote)
		}()
	}
	endLeftovers(ns, note)
	if dir := args[0]; dir != "" {
		// The pipe's end can be let go before exec's lock on dir: a dying
		// process's files are released in no set order, and on a busy
		// machine some time apart (CI: the directory was left).
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end) && exists(dir) && !abandoned(dir); {
			time.Sleep(10 * time.Millisecond)
		}
		Sweep(filepath.Dir(dir), func(name string) bool { return name == filepath.Base(dir) })
	}
	if noted {
		select {
		case <-wrote:
		case <-time.After(time.Second):
		}
	}
	os.Exit(0)
	return nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
