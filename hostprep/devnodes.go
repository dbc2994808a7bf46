package hostprep

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// DevNode is one character device of the overlay's dev directory.
type DevNode struct {
	Name         string // under dev/: nvidia0, nvidiactl, ...
	Major, Minor uint32
	Control      bool // a control node every container with a GPU needs
}

// Numbers of the inert default: /dev/null's, so that opening a node does
// nothing harmful on a machine without NVIDIA hardware.
const (
	nullMajor = 1
	nullMinor = 3
)

// NVIDIA's numbers, for --real-device-numbers. 195 is the registered major of
// nvidia<N>, nvidiactl (255) and nvidia-modeset (254) (Linux
// Documentation/admin-guide/devices.txt). nvidia-uvm has no registered
// major: the kernel hands out a dynamic one at module load (read from
// /proc/devices); 511 is the first the kernel allocates from the top of the
// dynamic range and is what such a node most often shows.
const (
	nvidiaMajor   = 195
	ctlMinor      = 255
	modesetMinor  = 254
	uvmMajor      = 511
	uvmMinor      = 0
	uvmToolsMinor = 1
)

// DevNodes lists a node's device nodes: nvidia<minor> per GPU (the mock gives
// GPU i minor i, as snapshot.Compile does), then the control nodes.
func DevNodes(gpus int, real bool) []DevNode {
	var nodes []DevNode
	add := func(name string, major, minor uint32, control bool) {
		if !real {
			major, minor = nullMajor, nullMinor
		}
		nodes = append(nodes, DevNode{Name: name, Major: major, Minor: minor, Control: control})
	}
	for i := 0; i < gpus; i++ {
		add(fmt.Sprintf("nvidia%d", i), nvidiaMajor, uint32(i), false)
	}
	add("nvidiactl", nvidiaMajor, ctlMinor, true)
	add("nvidia-uvm", uvmMajor, uvmMinor, true)
	add("nvidia-uvm-tools", uvmMajor, uvmToolsMinor, true)
	add("nvidia-modeset", nvidiaMajor, modesetMinor, true) // nvidia-ctk looks for it
	return nodes
}

// makeDevNode creates a node crw-rw-rw-, as the NVIDIA driver does.
func makeDevNode(p string, n DevNode, plain bool) error {
	if plain {
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			return err
		}
		return os.Chmod(p, 0o666)
	}
	err := syscall.Mknod(p, syscall.S_IFCHR|0o666, mkdev(n.Major, n.Minor))
	if err == nil {
		err = os.Chmod(p, 0o666) // the umask narrowed it
	}
	if errors.Is(err, syscall.EPERM) {
		return fmt.Errorf("mknod %s: %w (needs root with CAP_MKNOD)", p, err)
	}
	if err != nil {
		return fmt.Errorf("mknod %s: %w", p, err)
	}
	return nil
}

func checkDevNode(p string, fi os.FileInfo, n DevNode, plain bool) error {
	if plain {
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s: not a plain file", p)
		}
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&os.ModeCharDevice == 0 || !ok || st.Rdev != uint64(mkdev(n.Major, n.Minor)) || fi.Mode().Perm() != 0o666 {
		return fmt.Errorf("%s: not character device %d:%d", p, n.Major, n.Minor)
	}
	return nil
}

// mkdev packs a device number as glibc's makedev does.
func mkdev(major, minor uint32) int {
	return int(uint64(minor&0xff) | uint64(major&0xfff)<<8 | uint64(minor&^0xff)<<12 | uint64(major&^0xfff)<<32)
}
