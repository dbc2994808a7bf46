package nsexec

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// mergeDevices is the kernel's /proc/devices with the character devices of
// ours (the overlay's proc/devices) added in the kernel's order, by major
// and after the kernel's of the same major, as the kernel prints the file
// with NVIDIA's modules loaded. A name the kernel already has (a real
// driver's) keeps the kernel's line. The runtime hook (pcisim/hook) does
// the same for containers.
func mergeDevices(kernel, ours string) (string, error) {
	kdevs, rest, err := chrdevs(kernel)
	if err != nil {
		return "", fmt.Errorf("the kernel's /proc/devices: %w", err)
	}
	odevs, _, err := chrdevs(ours)
	if err != nil {
		return "", fmt.Errorf("the overlay's proc/devices: %w", err)
	}
	known := map[string]bool{}
	for _, d := range kdevs {
		known[d.name] = true
	}
	all := kdevs
	for _, d := range odevs {
		if !known[d.name] {
			all = append(all, d)
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].major < all[j].major })
	var b strings.Builder
	b.WriteString("Character devices:\n")
	for _, d := range all {
		fmt.Fprintf(&b, "%3d %s\n", d.major, d.name)
	}
	b.WriteString(rest)
	return b.String(), nil
}

type chrdev struct {
	major int
	name  string
}

// chrdevs reads the character section of a /proc/devices text, and
// returns what follows it (the blank line and the block devices).
func chrdevs(text string) ([]chrdev, string, error) {
	body, ok := strings.CutPrefix(text, "Character devices:\n")
	if !ok {
		return nil, "", errors.New("no character devices section")
	}
	var out []chrdev
	for body != "" && !strings.HasPrefix(body, "\n") {
		line, next, ok := strings.Cut(body, "\n")
		if !ok {
			return nil, "", errors.New("cut off in its character devices")
		}
		var d chrdev
		if n, err := fmt.Sscanf(line, "%d %s", &d.major, &d.name); n != 2 || err != nil {
			return nil, "", fmt.Errorf("line %q is not MAJOR NAME", line)
		}
		out = append(out, d)
		body = next
	}
	return out, body, nil
}
