package hostprep

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// InUseFile lists, one a line, the overlays (their names under overlays/)
// that running containers were given, beside the live state at statePath.
// The NRI plugin keeps it; install keeps those overlays when it switches to
// a new one: the containers' bind mounts (the PCI tree, /proc/driver, the
// InfiniBand device nodes) are of those directories, and removing them
// would empty what the containers see. The next install removes them once
// no container uses them.
func InUseFile(statePath string) string {
	return filepath.Join(filepath.Dir(statePath), "overlays-in-use")
}

var hashName = regexp.MustCompile(`^[0-9a-f]{16}$`)

// OverlayOf is the overlay a host path is in (its name under overlays/),
// or "".
func OverlayOf(path string) string {
	_, rest, ok := strings.Cut(path, string(filepath.Separator)+"overlays"+string(filepath.Separator))
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, string(filepath.Separator))
	if !hashName.MatchString(name) {
		return ""
	}
	return name
}

// WriteInUse replaces the in-use list (InUseFile) with names, in one
// rename. Unchanged content is not written.
func WriteInUse(statePath string, names []string) error {
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	data := []byte(strings.Join(names, "\n"))
	if len(names) > 0 {
		data = append(data, '\n')
	}
	path := InUseFile(statePath)
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readInUse reads the in-use list; none when there is no file.
func readInUse(statePath string) map[string]bool {
	data, err := os.ReadFile(InUseFile(statePath))
	if err != nil {
		return nil
	}
	in := map[string]bool{}
	for _, l := range strings.Split(string(data), "\n") {
		if hashName.MatchString(l) {
			in[l] = true
		}
	}
	return in
}
