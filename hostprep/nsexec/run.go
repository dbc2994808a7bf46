package nsexec

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Exit statuses for failures before the command runs, as shells and
// container runtimes use them.
const (
	StatusSetup       = 125 // the namespace could not be set up
	StatusNotRunnable = 126 // the command exists but cannot be executed
	StatusNotFound    = 127 // the command is not on the namespace's PATH
)

// capSysAdmin is CAP_SYS_ADMIN, which the unprivileged child keeps (as an
// ambient capability) only until it executes the command.
const capSysAdmin = 21

// Options say what to run and over which overlay.
type Options struct {
	Driver string   // rendered driver root: usr/lib64, usr/bin, dev, proc/driver/nvidia
	Binds  []Bind   // files to show over the driver root's in the namespace
	Sys    string   // rendered PCI tree (pcisim) to show at /sys; "": the host's
	Work   string   // scratch directory (loader cache, mount staging); the caller removes it
	Args   []string // the command and its arguments
	Env    []string // the command's environment; nil means this process's
	// MIG holds the MIG capability files (hostprep.RenderMIGCaps) to show
	// over the driver root's, and its nodes if it has them; "": the
	// driver root's own.
	MIG string
	// Self re-executes this program into Child, e.g.
	// {"/proc/self/exe", "__exec-child"}, for a user namespace and for the
	// guard; the program's main must pass the arguments that follow to
	// Child before doing anything else.
	Self           []string
	Stdin          io.Reader    // nil: this process's
	Stdout, Stderr io.Writer    // nil: this process's
	Note           func(string) // told how the namespace was made when not as root, and of processes the command left running; may be nil
	TempDir        string       // RunRendered's parent directory; "" means TempDir()
	// Signals, when set, is a channel already given to signal.Notify for
	// Forwarded, by a caller that has work of its own to clean up before
	// RunRendered starts (a signal then ends the run before the command).
	Signals     chan os.Signal
	forceUserNS bool   // tests: take the unprivileged path as root
	tmp         string // RunRendered's directory, for the guard to remove
}

// Bind is a file shown, read-only, over one of the driver root's
// (hostprep's Overlay.Bound: the assets' programs and libraries, not
// copied).
type Bind struct {
	Src string `json:"src"`
	Dst string `json:"dst"` // relative to the driver root
}

// Forwarded are the signals passed on to the command.
var Forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// fromTerminal says whether sig most likely came from this process's
// terminal: its keys (^C, ^\) and its hang-up signal the terminal's whole
// foreground process group, the command included, so passing them on
// would deliver them twice. Such a signal sent to this process alone
// (kill -INT) is then not passed on; kill -TERM always is. hadTTY says
// whether the process had a terminal when the command started.
func fromTerminal(sig os.Signal, hadTTY bool) bool {
	if !hadTTY || (sig != syscall.SIGINT && sig != syscall.SIGQUIT && sig != syscall.SIGHUP) {
		return false
	}
	tty, err := os.OpenFile("/dev/tty", os.O_RDONLY|unix.O_NOCTTY, 0)
	if err != nil {
		return sig == syscall.SIGHUP // the terminal is gone: it hung up on the group
	}
	defer tty.Close()
	fg, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && fg == unix.Getpgrp()
}

// RunRendered makes a private temporary directory, has render write an
// overlay into dir (absent) and return its driver root and the files to
// bind over it, runs o.Args over it as Run does, and removes the directory
// afterwards, also when a signal ended the command.
func RunRendered(render func(dir string) (driver string, binds []Bind, err error), o Options) (int, error) {
	parent := o.TempDir
	if parent == "" {
		parent = TempDir()
	}
	Sweep(parent, Prefixed("nvmock-exec-"))
	tmp, err := os.MkdirTemp(parent, "nvmock-exec-")
	if err != nil {
		return StatusSetup, fmt.Errorf("make temp dir in %s: %w", parent, err)
	}
	defer os.RemoveAll(tmp)
	if err := Claim(tmp); err != nil {
		return StatusSetup, fmt.Errorf("make temp dir: %w", err)
	}
	// From here a signal must not end this process before the cleanup.
	if o.Signals == nil {
		o.Signals = make(chan os.Signal, 4)
		signal.Notify(o.Signals, Forwarded...)
		defer signal.Stop(o.Signals)
	}
	// Programs in the namespace may switch users; they must still reach
	// the library.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return StatusSetup, fmt.Errorf("make temp dir: %w", err)
	}
	o.Driver, o.Binds, err = render(filepath.Join(tmp, "overlay"))
	if err != nil {
		return StatusSetup, err
	}
	// An overlay's PCI tree is beside its driver root (hostprep.SysOf).
	if sys := filepath.Join(filepath.Dir(o.Driver), "sysfs", "sys"); o.Sys == "" && isDir(sys) {
		o.Sys = sys
	}
	o.Work = filepath.Join(tmp, "ns")
	o.tmp = tmp
	return Run(o)
}

// spec is what the parent hands the child on its command line.
type spec struct {
	Driver    string    `json:"driver"`
	Binds     []Bind    `json:"binds,omitempty"`
	Work      string    `json:"work"`
	Cache     string    `json:"cache"`     // the loader cache to show, made on first use
	CacheConf string    `json:"cacheConf"` // ldconfig's configuration to make it from
	Ldconfig  string    `json:"ldconfig"`
	Sys       string    `json:"sys"`
	MIG       string    `json:"mig"`
	UserNS    bool      `json:"userns"`
	warn      io.Writer // where setup's warnings go
}

// statusFile is where the child reports a failed setup, in its work
// directory: a file rather than a descriptor, which would need a number
// of its own beside those the command inherits.
func statusFile(work string) string { return filepath.Join(work, "child-status") }

// Run runs o.Args in a private mount namespace showing the overlay and
// waits for it. It returns the command's exit status (128+n if signal n
// ended it). SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to this process are
// passed on. A failure before the command starts returns a status above 124
// and an error saying why.
func Run(o Options) (int, error) {
	if len(o.Args) == 0 {
		return StatusSetup, errors.New("no command given")
	}
	if len(o.Self) == 0 {
		return StatusSetup, errors.New("nsexec: Options.Self is empty")
	}
	if _, err := os.Stat(filepath.Join(o.Driver, "usr", "lib64", "libnvidia-ml.so.1")); err != nil {
		return StatusSetup, fmt.Errorf("overlay %s has no library: %w", o.Driver, err)
	}
	for _, d := range []string{"stage/dev", "stage/proc"} {
		if err := os.MkdirAll(filepath.Join(o.Work, d), 0o755); err != nil {
			return StatusSetup, fmt.Errorf("prepare %s: %w", o.Work, err)
		}
	}
	plan, err := planLoaderCache(o.Work)
	if err != nil {
		return StatusSetup, err
	}
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	env = CommandEnv(env, filepath.Join(o.Driver, "usr", "bin"))
	// An installed node keeps its live state outside the overlay, behind a
	// link that does not resolve where the namespace shows the driver.
	if st := filepath.Join(o.Driver, "etc", "nvmock", "state"); isLink(st) {
		if real, err := filepath.EvalSymlinks(st); err == nil {
			env = append(env, "NVMOCK_STATE="+real)
		}
	}

	plan.Driver, plan.Binds, plan.Work, plan.Sys, plan.MIG = o.Driver, o.Binds, o.Work, o.Sys, o.MIG
	if os.Geteuid() == 0 && !o.forceUserNS {
		status, err := start(o, plan, env)
		// Root without CAP_SYS_ADMIN (an unprivileged container) may still
		// own a user namespace.
		if !errors.Is(err, syscall.EPERM) {
			return status, err
		}
	}
	plan.UserNS = true
	status, err := start(o, plan, env)
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EACCES) {
		return StatusSetup, fmt.Errorf("cannot create a private mount namespace: run as root, or allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0, kernel.unprivileged_userns_clone=1, kernel.apparmor_restrict_unprivileged_userns=0): %w", err)
	}
	return status, err
}

// start starts the command once in its namespace, made by a thread of
// this process (root) or by a re-executed child (a user namespace, which a
// process with threads cannot enter), and waits for it. A failure to make
// the namespace comes back unwrapped enough for errors.Is.
func start(o Options, s spec, env []string) (int, error) {
	cmd := &exec.Cmd{Args: o.Args, Env: env, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr}
	if cmd.Stdin == nil {
		cmd.Stdin = os.Stdin
	}
	if cmd.Stdout == nil {
		cmd.Stdout = os.Stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	s.warn = cmd.Stderr

	// Pdeathsig follows the thread that started the child; keep it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	sigs := o.Signals
	if sigs == nil {
		sigs = make(chan os.Signal, 4)
		signal.Notify(sigs, Forwarded...)
		defer signal.Stop(sigs)
	}
	select {
	case s := <-sigs: // while rendering
		return 128 + int(s.(syscall.Signal)), fmt.Errorf("interrupted by %v", s)
	default:
	}

	// The namespace, held open until the leftovers are ended: a
	// namespace's inode number is reused as soon as it is freed, and then
	// names another exec's node (QA: one exec ended another's processes).
	var (
		ns  string
		nsf *os.File
	)
	if s.UserNS {
		if err := startChild(o, s, cmd); err != nil {
			return StatusSetup, err
		}
		// In its namespace from the clone on, with its setup to do
		// before the command can run, let alone exit.
		ns, nsf = holdMountNS("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/mnt")
	} else {
		var release func()
		var status int
		var err error
		release, ns, nsf, status, err = startInThread(s, cmd, sigs)
		if err != nil {
			return status, err
		}
		defer release()
	}
	if nsf != nil {
		defer nsf.Close()
	}
	stopGuard := startGuard(o, nsf, o.tmp)
	if s.UserNS && o.Note != nil {
		o.Note("no CAP_SYS_ADMIN: running in a user namespace, where /dev/nvidia* are bind mounts of /dev/null (mknod is not allowed there)")
	}
	done := make(chan struct{})
	defer close(done)
	hadTTY := false
	if tty, err := os.OpenFile("/dev/tty", os.O_RDONLY|unix.O_NOCTTY, 0); err == nil {
		hadTTY = true
		tty.Close()
	}
	go func() {
		for {
			select {
			case s := <-sigs:
				if !fromTerminal(s, hadTTY) {
					_ = cmd.Process.Signal(s)
				}
			case <-done:
				return
			}
		}
	}()
	// Processes the command left running may hold its output open, which
	// Wait waits for: end them once the command has exited, before it is
	// reaped.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != syscall.EINTR {
			break
		}
	}
	var failed []byte
	if s.UserNS {
		failed, _ = os.ReadFile(statusFile(s.Work))
	}
	endLeftovers(ns, o.Note)
	werr := cmd.Wait()
	stopGuard()
	if len(failed) > 0 {
		code, msg, _ := strings.Cut(string(failed), " ")
		n, err := strconv.Atoi(code)
		if err != nil {
			n = StatusSetup
		}
		return n, errors.New(msg)
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return StatusSetup, werr
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ws.ExitStatus(), nil
}

// startChild starts this program again as Child, in a new mount and user
// namespace, to set up the namespace and execute the command in its place
// (cmd then stands for the command). The caller's descriptors reach it,
// and the command, as they are.
func startChild(o Options, s spec, cmd *exec.Cmd) error {
	cmd.Path = o.Self[0]
	js, err := json.Marshal(s)
	if err != nil {
		return err
	}
	cmd.Args = append(append(append([]string{o.Self[0]}, o.Self[1:]...), string(js), "--"), o.Args...)
	uid, gid := os.Geteuid(), os.Getegid()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWNS | syscall.CLONE_NEWUSER,
		Pdeathsig:   syscall.SIGKILL,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		AmbientCaps: []uintptr{capSysAdmin},
	}
	return cmd.Start()
}

// CommandEnv is the command's environment: the overlay's bin directory
// first on PATH, and without the variables that would point the library
// away from the overlay (NVMOCK_SNAPSHOT wins over the driver root's
// snapshot; NVMOCK_DEV_ROOT over /dev; NVMOCK_STATE over its state).
func CommandEnv(env []string, bin string) []string {
	out := make([]string, 0, len(env)+1)
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "NVMOCK_SNAPSHOT", "NVMOCK_DEV_ROOT", "NVMOCK_STATE":
			continue
		case "PATH":
			path = v
			continue
		}
		out = append(out, kv)
	}
	return append(out, "PATH="+bin+":"+path)
}

// NamespaceDriver is where the child shows the overlay's driver root: a
// fixed path, so the loader cache that points at its library can be made
// once and kept (ldconfig takes most of a run's start-up).
const NamespaceDriver = "/dev/.nvmock/driver"

// planLoaderCache says which loader cache the child shows: one that lists
// NamespaceDriver's lib64 before every directory the host's
// /etc/ld.so.conf names, so dlopen("libnvidia-ml.so.1") finds the mock
// first. It is kept (see loaderCacheDir) under a name that changes with the
// host's own cache, and made by the first child that needs it.
func planLoaderCache(work string) (spec, error) {
	conf := NamespaceDriver + "/usr/lib64\n"
	if _, err := os.Stat("/etc/ld.so.conf"); err == nil {
		conf += "include /etc/ld.so.conf\n"
	}
	confPath := filepath.Join(work, "ld.so.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return spec{}, fmt.Errorf("write loader config: %w", err)
	}
	ldconfig, err := findLdconfig()
	if err != nil {
		return spec{}, err
	}
	host, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		return spec{}, fmt.Errorf("loader cache: this system has no /etc/ld.so.cache to stand in for (run ldconfig once as root): %w", err)
	}
	h := sha256.New()
	h.Write(host)
	h.Write([]byte(conf))
	dir, err := loaderCacheDir(work)
	if err != nil {
		return spec{}, err
	}
	cache := filepath.Join(dir, fmt.Sprintf("ld.so.cache-%x", h.Sum(nil)[:8]))
	return spec{Cache: cache, CacheConf: confPath, Ldconfig: ldconfig}, nil
}

// loaderCacheDir is the directory the loader cache is kept in, made here so
// the child only fills it. It is nvmock/ in the user's cache directory; a
// user without a usable one (nobody, whose HOME is /nonexistent) gets
// nvmock-<uid> in the temporary directory, used only while it is this
// user's own with mode 0700, since another user could plant a cache there
// that the command's programs would load libraries by; failing that, a
// private directory in work, which goes with it.
func loaderCacheDir(work string) (string, error) {
	if base, err := os.UserCacheDir(); err == nil {
		if d := filepath.Join(base, "nvmock"); userDir(base) && userDir(d) {
			return d, nil
		}
	}
	if d := filepath.Join(os.TempDir(), fmt.Sprintf("nvmock-%d", os.Geteuid())); privateDir(d) {
		return d, nil
	}
	if work == "" {
		return "", errors.New("no cache directory")
	}
	d := filepath.Join(work, "loader-cache")
	if err := os.Mkdir(d, 0o700); err != nil {
		return "", fmt.Errorf("loader cache: %w", err)
	}
	return d, nil
}

// userDir makes d if its parent exists (never a missing HOME) and says
// whether this user may write in it.
func userDir(d string) bool {
	if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return false
	}
	return unix.Access(d, unix.W_OK|unix.X_OK) == nil
}

// privateDir makes d with mode 0700, or finds it so: a directory (not a
// link) owned by this user that no one else may enter.
func privateDir(d string) bool {
	if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return false
	}
	var st unix.Stat_t
	if err := unix.Lstat(d, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR && int(st.Uid) == os.Geteuid() && st.Mode&0o077 == 0
}

func findLdconfig() (string, error) {
	if p, err := exec.LookPath("ldconfig"); err == nil {
		return p, nil
	}
	// Users' PATH often lacks the sbin directories.
	for _, p := range []string{"/sbin/ldconfig", "/usr/sbin/ldconfig"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("ldconfig not found (install libc-bin): it builds the loader cache that points at the mock library")
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// Cached returns name in this user's nvmock cache (the loader cache's
// directory), having render write it first if it is not there: render gets
// a fresh directory, which then takes name's place atomically, so that
// concurrent runs share one complete copy. Large trees that depend only on
// their inputs (the PCI tree) are cached this way, named by their hash.
func Cached(name string, render func(dir string) error) (string, error) {
	base, err := loaderCacheDir("")
	if err != nil || !filepath.IsAbs(base) {
		return "", fmt.Errorf("no cache directory for %s", name)
	}
	dst := filepath.Join(base, name)
	kind, _, _ := strings.Cut(name, "-")
	// Renders that a killed run left half done.
	Sweep(base, func(n string) bool { return strings.HasPrefix(n, kind+"-") && strings.Contains(n, ".tmp-") })
	if err := use(dst); err != nil {
		return "", err
	}
	if isDir(dst) {
		return dst, nil
	}
	tmp, err := os.MkdirTemp(base, name+".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := Claim(tmp); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := render(filepath.Join(tmp, "t")); err != nil {
		return "", err
	}
	if err := os.Rename(filepath.Join(tmp, "t"), dst); err != nil && !isDir(dst) {
		return "", err
	}
	prune(base, kind)
	return dst, nil
}

func isLink(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}
