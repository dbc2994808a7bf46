// Package expose shows a rendered PCI tree (pcisim) at a sysfs mount
// through mounts, for nvmock exec. The runtime hook does the same for
// containers, in C (pcisim/hook/hook.c), because it runs once per container
// creation; the exec and e2e tests check both with the same tools.
package expose

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nvmock/nvmock/ibshim/sysfs"
)

// Expose shows the tree rendered at tree (a sysfs root as Render writes it)
// at the sysfs mounted at sys, in the caller's mount namespace, which must
// be private to it: "/sys" for nvmock exec, a container's rootfs/sys in a
// runtime hook. Afterwards
//   - sys/bus/pci is the tree's: the node's PCI devices are the mock ones,
//     and the host's are not listed;
//   - sys/devices holds the tree's host bridges beside the host's other
//     entries (system, virtual, platform, and host bridges the tree does not
//     replace, so that links such as /sys/class/net/* still resolve);
//   - sys/kernel/iommu_groups is the tree's;
//   - sys/class holds the tree's classes (pci_bus, and infiniband,
//     infiniband_mad, infiniband_verbs) beside the host's others.
//
// Everything shown is read-only. Programs need no preload to see it, so
// statically linked ones (Go) do too.
func Expose(sys, tree string) error {
	roots, err := rootDirs(tree)
	if err != nil {
		return err
	}
	// Nothing mounted below may reach another namespace, whatever the
	// caller's propagation.
	if err := unix.Mount("", sys, "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make %s private: %w", sys, err)
	}
	devices := filepath.Join(sys, "devices")
	if err := cover(devices, roots, func() error {
		for _, r := range roots {
			dst := filepath.Join(devices, r)
			if err := os.Mkdir(dst, 0o755); err != nil {
				return err
			}
			if err := bindRO(filepath.Join(tree, "devices", r), dst); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("%s: %w", devices, err)
	}
	if err := bindRO(filepath.Join(tree, "bus", "pci"), filepath.Join(sys, "bus", "pci")); err != nil {
		return err
	}
	if err := exposeClasses(sys, tree); err != nil {
		return err
	}
	groups := filepath.Join(sys, "kernel", "iommu_groups")
	if _, err := os.Stat(groups); err == nil {
		if err := bindRO(filepath.Join(tree, "kernel", "iommu_groups"), groups); err != nil {
			return err
		}
	} // else a kernel without an IOMMU: sysfs has no directory to show them at
	return nil
}

// LivePorts shows each <hca>/ports directory of live (the node's live
// InfiniBand port state, hostprep.IBLiveDir) over that HCA's ports in sys,
// which Expose showed from tree: a fault set while programs run reaches
// them. A table directory left empty there (sysfs.Tables) shows the
// tree's again.
func LivePorts(sys, tree, live string) error {
	ents, err := os.ReadDir(live)
	if err != nil {
		return err
	}
	for _, e := range ents {
		src := filepath.Join(live, e.Name(), "ports")
		if !e.IsDir() || !isDir(src) {
			continue
		}
		// Through the class link, which resolves into the bound tree.
		dst := filepath.Join(sys, "class", "infiniband", e.Name(), "ports")
		orig, err := filepath.EvalSymlinks(filepath.Join(tree, "class", "infiniband", e.Name(), "ports"))
		if err != nil {
			return err
		}
		if err := bindRO(src, dst); err != nil {
			return err
		}
		for _, t := range sysfs.Tables {
			if ents, err := os.ReadDir(filepath.Join(src, "1", t)); err == nil && len(ents) == 0 {
				if err := bindRO(filepath.Join(orig, "1", t), filepath.Join(dst, "1", t)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// allDirs says whether every name is a directory in dir.
func allDirs(dir string, names []string) bool {
	for _, n := range names {
		if !isDir(filepath.Join(dir, n)) {
			return false
		}
	}
	return true
}

// exposeClasses shows the tree's device classes (class/infiniband, ...)
// in sys/class beside the host's others, replacing a host's own.
func exposeClasses(sys, tree string) error {
	ents, err := os.ReadDir(filepath.Join(tree, "class"))
	if errors.Is(err, os.ErrNotExist) {
		return nil // a tree rendered before it had pci_bus
	}
	if err != nil {
		return err
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() { // as the runtime hook takes them
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil
	}
	class := filepath.Join(sys, "class")
	// Classes the kernel has already (pci_bus) take a bind each; a new one
	// (an HCA's on a host without RDMA) needs a directory, so a cover.
	if allDirs(class, names) {
		for _, n := range names {
			if err := bindRO(filepath.Join(tree, "class", n), filepath.Join(class, n)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := cover(class, names, func() error {
		for _, n := range names {
			dst := filepath.Join(class, n)
			if err := os.Mkdir(dst, 0o755); err != nil {
				return err
			}
			if err := bindRO(filepath.Join(tree, "class", n), dst); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("%s: %w", class, err)
	}
	return nil
}

// rootDirs lists the host bridges (pciDDDD:BB) a tree renders.
func rootDirs(tree string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(tree, "devices"))
	if err != nil {
		return nil, fmt.Errorf("rendered PCI tree: %w", err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "pci") {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("rendered PCI tree %s has no host bridges", tree)
	}
	return out, nil
}

// cover puts a tmpfs over dir holding dir's entries again (recursive binds
// of the originals, reached through a descriptor of the covered
// directory), less those named in replace, lets add put in the new ones,
// and makes the tmpfs read-only. sysfs refuses mkdir, so a new host bridge
// can only appear on a tmpfs.
func cover(dir string, replace []string, add func() error) error {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, "mode=755,size=64k"); err != nil {
		return fmt.Errorf("mount tmpfs: %w", err)
	}
	skip := map[string]bool{}
	for _, r := range replace {
		skip[r] = true
	}
	for _, e := range ents {
		if skip[e.Name()] {
			continue
		}
		dst := filepath.Join(dir, e.Name())
		if e.IsDir() {
			err = os.Mkdir(dst, 0o755)
		} else {
			err = os.WriteFile(dst, nil, 0o444)
		}
		if err != nil {
			return err
		}
		src := fmt.Sprintf("/proc/self/fd/%d/%s", fd, e.Name())
		if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("keep %s: %w", e.Name(), err)
		}
	}
	if err := add(); err != nil {
		return err
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, "mode=755,size=64k"); err != nil {
		return fmt.Errorf("make read-only: %w", err)
	}
	return nil
}

// bindRO binds src at dst read-only.
func bindRO(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s at %s: %w", src, dst, err)
	}
	err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	if errors.Is(err, unix.EPERM) {
		// In a user namespace, flags locked by the mount bound must be
		// kept; read-only is what matters.
		err = unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, "")
	}
	if err != nil {
		return fmt.Errorf("make %s read-only: %w", dst, err)
	}
	return nil
}
