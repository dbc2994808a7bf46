package inject

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Validate checks a configuration at start, naming every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.DefaultGPUs != "" {
		if err := ValidateRequest(c.DefaultGPUs); err != nil {
			errs = append(errs, fmt.Errorf("default GPUs: %w", err))
		}
	}
	for i, ns := range c.Namespaces {
		if strings.TrimSpace(ns) == "" {
			errs = append(errs, fmt.Errorf("namespaces[%d]: empty; name a namespace or \"*\"", i))
		}
	}
	if c.LibraryPaths != nil && len(c.LibraryPaths) == 0 {
		errs = append(errs, errors.New("library paths: empty; leave unset for the defaults"))
	}
	for i, p := range c.LibraryPaths {
		// NRI refuses an adjustment with two mounts at one place: every
		// GPU container would fail.
		if j := slices.Index(c.LibraryPaths[:i], p); j >= 0 {
			errs = append(errs, fmt.Errorf("library paths[%d]: %q repeats library paths[%d]", i, p, j))
			continue
		}
		if !strings.HasPrefix(p, "/") || !strings.HasSuffix(p, "/libnvidia-ml.so.1") || strings.Contains(p, "/../") || strings.Contains(p, "/./") || strings.Contains(p, "//") {
			errs = append(errs, fmt.Errorf("library paths[%d]: %q is not a clean absolute path ending in /libnvidia-ml.so.1", i, p))
			continue
		}
		if _, ok := SnapshotPathFor(p); !ok {
			errs = append(errs, fmt.Errorf("library paths[%d]: %q is not in a directory the library finds its snapshot from (%s)", i, p, strings.Join(libDirs[:], ", ")))
		}
	}
	for i, e := range c.Extensions {
		if e.Name == "" || e.Apply == nil {
			errs = append(errs, fmt.Errorf("extensions[%d]: needs a name and an Apply function", i))
		}
	}
	return errors.Join(errs...)
}
