package nsexec

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nvmock/nvmock/pcisim/expose"
)

const (
	prCapAmbient         = 47 // PR_CAP_AMBIENT
	prCapAmbientClearAll = 4  // PR_CAP_AMBIENT_CLEAR_ALL
)

// Child is the re-executed half of Run for a user namespace (root's runs
// do this in a thread: startInThread), already in its new namespaces: it
// makes the overlay appear and executes the command in place of itself, so
// signals and the exit status are the command's own. It returns only if it
// was not started by Run; any other failure is reported to Run and ends
// the process.
func Child(args []string) error {
	if len(args) > 0 && args[0] == guardArg {
		return guard(args[1:])
	}
	if len(args) < 2 || args[1] != "--" {
		return errors.New("nsexec: child started without a specification (it is run by nvmock exec)")
	}
	var s spec
	if err := json.Unmarshal([]byte(args[0]), &s); err != nil {
		return fmt.Errorf("nsexec: bad child specification: %w", err)
	}
	// A setup failure is reported in the work directory, which Run reads
	// once this process has ended.
	if !isDir(s.Work) {
		return errors.New("nsexec: child started without its work directory (it is run by nvmock exec)")
	}
	fail := func(code int, err error) {
		_ = os.WriteFile(statusFile(s.Work), []byte(fmt.Sprintf("%d %v", code, err)), 0o600)
		os.Exit(code)
	}
	// The nodes and directories made keep the overlay's modes; the
	// command gets the caller's umask back.
	umask := syscall.Umask(0)
	s.warn = os.Stderr
	if err := setup(s); err != nil {
		fail(StatusSetup, err)
	}
	syscall.Umask(umask)
	argv := args[2:]
	path, code, err := lookPath(argv[0], os.Getenv("PATH"))
	if err != nil {
		fail(code, err)
	}
	if s.UserNS {
		// The command runs without the capability the setup needed.
		if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prCapAmbient, prCapAmbientClearAll, 0, 0, 0, 0); e != 0 {
			fail(StatusSetup, fmt.Errorf("drop ambient capabilities: %w", e))
		}
	}
	err = syscall.Exec(path, argv, os.Environ())
	code = StatusNotRunnable
	if errors.Is(err, syscall.ENOENT) {
		code = StatusNotFound
	}
	fail(code, fmt.Errorf("%s: %w", argv[0], err))
	return nil
}

// lookPath finds the command as a shell does: a name without a slash on
// pathList (an entry "." or "" included, which Go's LookPath refuses; and
// the command's PATH, which need not be this process's), with the shell's
// statuses and words for what it cannot run.
func lookPath(name, pathList string) (string, int, error) {
	if !strings.Contains(name, "/") {
		for _, dir := range filepath.SplitList(pathList) {
			if dir == "" {
				dir = "."
			}
			if p := filepath.Join(dir, name); executable(p) {
				return p, 0, nil
			}
		}
		return "", StatusNotFound, fmt.Errorf("%s: command not found", name)
	}
	if executable(name) {
		return name, 0, nil
	}
	fi, serr := os.Stat(name)
	switch {
	case serr != nil && errors.Is(serr, os.ErrNotExist):
		return "", StatusNotFound, fmt.Errorf("%s: no such file or directory", name)
	case serr == nil && fi.IsDir():
		return "", StatusNotRunnable, fmt.Errorf("%s: is a directory", name)
	case serr == nil:
		return "", StatusNotRunnable, fmt.Errorf("%s: permission denied", name)
	}
	return "", StatusNotRunnable, fmt.Errorf("%s: %w", name, serr)
}

// executable says whether this process may execute file p, as Go's
// LookPath decides it.
func executable(p string) bool {
	fi, err := os.Stat(p)
	if err != nil || fi.IsDir() {
		return false
	}
	err = unix.Faccessat(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS)
	if err == nil || (err != syscall.ENOSYS && err != syscall.EPERM) {
		return err == nil
	}
	return fi.Mode()&0o111 != 0
}

// setup makes the overlay appear at the standard places in this namespace.
func setup(s spec) error {
	// Nothing mounted below may reach the host.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		if s.UserNS && errors.Is(err, syscall.EPERM) {
			// Ubuntu 23.10 and later make such namespaces powerless.
			return fmt.Errorf("make mounts private: %w: this user namespace may not mount (AppArmor's kernel.apparmor_restrict_unprivileged_userns=1?); run as root", err)
		}
		return fmt.Errorf("make mounts private: %w", err)
	}
	devs, err := os.ReadDir(filepath.Join(s.Driver, "dev"))
	if err != nil {
		return fmt.Errorf("overlay dev nodes: %w", err)
	}
	// Bound from the mirror's copy: the work directory may be under /dev
	// (/dev/shm), hidden while the mirror is made.
	nullDev := "/dev/null"
	own := map[string]bool{}
	for _, d := range devs {
		own[d.Name()] = true
	}
	err = mirror("/dev", filepath.Join(s.Work, "stage", "dev"), !s.UserNS, false, own, func() error {
		for _, d := range devs {
			if err := devNode(filepath.Join(s.Driver, "dev", d.Name()), filepath.Join("/dev", d.Name()), nullDev, s.UserNS); err != nil {
				return err
			}
		}
		if caps := filepath.Join(s.MIG, "dev", "nvidia-caps"); s.MIG != "" && isDir(caps) {
			if err := bindNodes(caps, "/dev/nvidia-caps"); err != nil {
				return err
			}
		}
		// The assets over their empty files, where nvidia-smi on PATH
		// runs from too; the driver root's bind below carries them.
		for _, b := range s.Binds {
			if err := bind(b.Src, filepath.Join(s.Driver, b.Dst), true); err != nil {
				return err
			}
		}
		// The driver root at a fixed place, for the loader cache.
		if err := os.MkdirAll(NamespaceDriver, 0o755); err != nil {
			return err
		}
		if err := bind(s.Driver, NamespaceDriver, true); err != nil {
			return err
		}
		// The live state stays writable: nvmock ctl changes it from inside.
		// (An installed node's is a hard link to the root's state file.)
		// So do its live InfiniBand ports (nvmock ctl ib).
		state := filepath.Join("etc", "nvmock", "state")
		if fi, err := os.Lstat(filepath.Join(s.Driver, state)); err == nil && fi.Mode().IsRegular() {
			if err := bind(filepath.Join(s.Driver, state), filepath.Join(NamespaceDriver, state), false); err != nil {
				return err
			}
		}
		if ib := filepath.Join("etc", "nvmock", "ib"); isDir(filepath.Join(s.Driver, ib)) {
			return bind(filepath.Join(s.Driver, ib), filepath.Join(NamespaceDriver, ib), false)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("/dev: %w", err)
	}
	if err := loaderCache(s); err != nil {
		return fmt.Errorf("loader cache: %w", err)
	}
	err = mirror("/proc/driver", filepath.Join(s.Work, "stage", "proc"), false, true, nil, func() error {
		for _, name := range []string{"nvidia", "nvidia-caps"} {
			src := filepath.Join(s.Driver, "proc", "driver", name)
			if s.MIG != "" && name == "nvidia-caps" {
				src = filepath.Join(s.MIG, "proc", "driver", name)
			}
			if _, err := os.Stat(src); err != nil && name != "nvidia" {
				continue // MIG's, on MIG boards only
			}
			if err := os.Mkdir(filepath.Join("/proc/driver", name), 0o555); err != nil {
				return err
			}
			if err := bind(src, filepath.Join("/proc/driver", name), true); err != nil {
				return err
			}
		}
		if s.MIG == "" {
			return nil
		}
		caps := filepath.Join("proc", "driver", "nvidia", "capabilities")
		return bind(filepath.Join(s.MIG, caps), filepath.Join("/", caps), true)
	})
	if err != nil {
		return fmt.Errorf("/proc/driver: %w", err)
	}
	if err := procDevices(s); err != nil {
		return fmt.Errorf("/proc/devices: %w", err)
	}
	if s.Sys != "" && !isSysfs("/sys") {
		fmt.Fprintln(s.warn, "nvmock: exec: /sys is not the kernel's sysfs here: the mock PCI tree is not shown there")
	} else if s.Sys != "" {
		if err := expose.Expose("/sys", s.Sys); err != nil {
			return fmt.Errorf("/sys: %w", err)
		}
		// The live InfiniBand ports beside the state (hostprep.IBLiveDir).
		if live := filepath.Join(s.Driver, "etc", "nvmock", "ib"); isDir(live) {
			if err := expose.LivePorts("/sys", s.Sys, live); err != nil {
				return fmt.Errorf("/sys: %w", err)
			}
		}
	}
	return nil
}

// procDevices shows the overlay's majors in /proc/devices, merged into the
// kernel's (mergeDevices), as a file of the work directory bound over it.
func procDevices(s spec) error {
	ours, err := os.ReadFile(filepath.Join(s.Driver, "proc", "devices"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	kernel, err := os.ReadFile("/proc/devices")
	if err != nil {
		return err
	}
	merged, err := mergeDevices(string(kernel), string(ours))
	if err != nil {
		return err
	}
	f := filepath.Join(s.Work, "proc-devices")
	if err := os.WriteFile(f, []byte(merged), 0o444); err != nil {
		return err
	}
	return bind(f, "/proc/devices", true)
}

// isSysfs says whether dir is a sysfs mount.
func isSysfs(dir string) bool {
	var st syscall.Statfs_t
	return syscall.Statfs(dir, &st) == nil && st.Type == 0x62656572 // SYSFS_MAGIC
}

// mirror covers dir with a tmpfs holding the same entries (bind mounts of
// the originals, symlinks copied) except the NVIDIA ones and those named
// in own (the overlay's: a real RDMA host's infiniband), then lets add put
// the overlay's in. stage is an empty directory to reach the original
// through meanwhile. The rest of dir keeps working: /dev/null, /dev/pts,
// /dev/shm are the host's. devices allows device nodes on the tmpfs;
// readonly remounts it read-only when done.
func mirror(dir, stage string, devices, readonly bool, own map[string]bool, add func() error) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if err := syscall.Mount(dir, stage, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("reach the original: %w", err)
	}
	// The original is reached through a descriptor: stage itself may be
	// below dir (a work directory in /dev/shm), and so hidden by the
	// tmpfs until the mirror brings its directory back.
	fd, err := syscall.Open(stage, unix.O_PATH|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		syscall.Unmount(stage, syscall.MNT_DETACH)
		return fmt.Errorf("reach the original: %w", err)
	}
	orig := fmt.Sprintf("/proc/self/fd/%d", fd)
	defer syscall.Close(fd)
	defer syscall.Unmount(orig, syscall.MNT_DETACH)
	flags := uintptr(syscall.MS_NOSUID | syscall.MS_NOEXEC)
	if !devices {
		flags |= syscall.MS_NODEV
	}
	// Writable by its maker until filled: an unprivileged child has no
	// CAP_DAC_OVERRIDE.
	opts := fmt.Sprintf("mode=%o,size=1m", st.Mode().Perm()|0o700)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", flags, opts); err != nil {
		return fmt.Errorf("mount tmpfs: %w", err)
	}
	ents, err := os.ReadDir(orig)
	if err != nil {
		return err
	}
	for _, e := range ents {
		// The overlay defines the NVIDIA set: a real node's extra GPUs
		// must not show through.
		if strings.HasPrefix(e.Name(), "nvidia") || own[e.Name()] {
			continue
		}
		if err := copyEntry(filepath.Join(orig, e.Name()), filepath.Join(dir, e.Name()), devices); err != nil {
			return fmt.Errorf("%s: %w", e.Name(), err)
		}
	}
	if err := add(); err != nil {
		return err
	}
	if err := os.Chmod(dir, st.Mode().Perm()); err != nil {
		return err
	}
	if !readonly {
		return nil
	}
	return syscall.Mount("", dir, "", syscall.MS_REMOUNT|flags|syscall.MS_RDONLY, opts)
}

func copyEntry(src, dst string, devices bool) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch m := fi.Mode(); {
	case m&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case m.IsDir():
		if err := os.Mkdir(dst, m.Perm()); err != nil {
			return err
		}
		return bind(src, dst, false)
	case m&os.ModeCharDevice != 0 && filepath.Base(src) == "ptmx":
		// Opening a bind-mounted ptmx fails (the kernel looks for pts/
		// beside the node it opened), so make a node of our own here, or
		// point at the devpts one as containers do.
		st := fi.Sys().(*syscall.Stat_t)
		if devices && syscall.Mknod(dst, st.Mode, int(st.Rdev)) == nil {
			return os.Lchown(dst, int(st.Uid), int(st.Gid))
		}
		return os.Symlink("pts/ptmx", dst)
	}
	if err := touch(dst); err != nil {
		return err
	}
	return bind(src, dst, false)
}

// devNode makes one of the overlay's device nodes at dst: the same node
// when allowed to make nodes, else a bind mount of /dev/null (its inert
// numbers), else a plain file, which is all the library checks for. A node
// with other numbers (--real-device-numbers) is made as it is, or refused.
func devNode(src, dst, null string, userns bool) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if fi.IsDir() { // dev/infiniband
		ents, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
		for _, e := range ents {
			if err := devNode(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), null, userns); err != nil {
				return err
			}
		}
		return nil
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode()&os.ModeCharDevice != 0 {
		major, minor := unix.Major(st.Rdev), unix.Minor(st.Rdev)
		inert := major == 1 && minor == 3
		if userns && !inert {
			return fmt.Errorf("%s: a user namespace cannot make device %d:%d (exec makes nodes only with root's CAP_SYS_ADMIN)", dst, major, minor)
		}
		if !userns {
			err := syscall.Mknod(dst, st.Mode, int(st.Rdev))
			if err == nil {
				return nil
			}
			if !inert {
				return fmt.Errorf("mknod %s %d:%d: %w (needs CAP_MKNOD)", dst, major, minor, err)
			}
		}
	}
	if err := touch(dst); err != nil {
		return err
	}
	_ = bind(null, dst, false) // a plain file still counts as present
	return nil
}

func touch(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// bindNodes shows the directory of device nodes src at dst (made here),
// read-only, with its nodes usable where it may: src is in a cache that
// may be on a nodev file system, whose flag root may clear (in a user
// namespace the nodes still count as present).
func bindNodes(src, dst string) error {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", src, dst, err)
	}
	err := syscall.Mount("", dst, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NOEXEC, "")
	if errors.Is(err, syscall.EPERM) {
		return bindReadOnly(dst)
	}
	if err != nil {
		return fmt.Errorf("make %s read-only: %w", dst, err)
	}
	return nil
}

// bind mounts src on dst (recursively), read-only if asked.
func bind(src, dst string, ro bool) error {
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", src, dst, err)
	}
	if !ro {
		return nil
	}
	return bindReadOnly(dst)
}

// bindReadOnly makes the bind mount at dst read-only.
func bindReadOnly(dst string) error {
	// A user namespace may not clear the flags of the mount it binds
	// from (a /dev/shm with nosuid,nodev): keep them. (statfs's ST_
	// flags have the MS_ values.)
	var st syscall.Statfs_t
	if err := syscall.Statfs(dst, &st); err != nil {
		return fmt.Errorf("make %s read-only: %w", dst, err)
	}
	keep := uintptr(st.Flags) & (syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC)
	if err := syscall.Mount("", dst, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|keep, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", dst, err)
	}
	return nil
}

// loaderCache shows s.Cache as /etc/ld.so.cache, making it first if no
// earlier run has: ldconfig must see the library at NamespaceDriver, which
// exists only in here.
func loaderCache(s spec) error {
	if _, err := os.Stat(s.Cache); err != nil {
		if err := os.MkdirAll(filepath.Dir(s.Cache), 0o755); err != nil {
			return err
		}
		tmp := fmt.Sprintf("%s.%d.%d", s.Cache, os.Getpid(), unix.Gettid())
		// -X: leave the library directories' links alone.
		if out, err := exec.Command(s.Ldconfig, "-X", "-C", tmp, "-f", s.CacheConf).CombinedOutput(); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("%s: %w: %s", s.Ldconfig, err, strings.TrimSpace(string(out)))
		}
		if err := os.Rename(tmp, s.Cache); err != nil { // atomic: concurrent runs make the same file
			return err
		}
	}
	return bind(s.Cache, "/etc/ld.so.cache", true)
}
