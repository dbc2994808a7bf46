package pcisim

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Write writes files into dir, which must not exist yet. A tree has
// thousands of small files nested ten directories deep: each is made
// relative to its directory's descriptor, not through its whole path. On a
// disk each creation waits on the file system's journal, so a large tree's
// files are made after the directories, by a few workers at once (InRuns).
func Write(files []File, dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	t, err := openTree(dir, true)
	if err != nil {
		return err
	}
	defer t.close()
	old := unix.Umask(0)
	unix.Umask(old)
	narrowed := Mode&^old != Mode
	if err := t.makeDirs(files); err != nil {
		return err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		if fds[i], err = t.dir(path.Dir(f.Path)); err != nil {
			return err
		}
	}
	return InRuns(len(files), func(i int) error {
		return writeFile(fds[i], files[i], narrowed)
	})
}

// InRuns calls do for 0 to n-1 and returns the first error of the lowest
// index that failed. Creating a file on a disk waits on the file system's
// journal, and several creations at once share a wait: from parallelFrom
// on, writeWorkers each take their own run of the indexes.
func InRuns(n int, do func(i int) error) error {
	workers := 1
	if n >= parallelFrom {
		workers = writeWorkers
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * n / workers; i < (w+1)*n/workers; i++ {
				if errs[w] = do(i); errs[w] != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// From parallelFrom items on, writeWorkers: more add nothing on two cores.
const (
	parallelFrom = 64
	writeWorkers = 4
)

func writeFile(dirfd int, f File, chmod bool) error {
	name := path.Base(f.Path)
	if f.Link != "" {
		if err := unix.Symlinkat(f.Link, dirfd, name); err != nil {
			return fmt.Errorf("write %s: %w", f.Path, err)
		}
		return nil
	}
	if err := writeAt(dirfd, name, f.Data, chmod); err != nil {
		return fmt.Errorf("write %s: %w", f.Path, err)
	}
	return nil
}

func writeAt(dirfd int, name string, data []byte, chmod bool) error {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, Mode)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if err != nil {
			return err
		}
		data = data[n:]
	}
	if chmod { // the umask took bits other users need
		return unix.Fchmod(fd, Mode)
	}
	return nil
}

// Verify checks that dir holds files as Write wrote them (extra entries
// are not looked for).
func Verify(files []File, dir string) error {
	t, err := openTree(dir, false)
	if err != nil {
		return err
	}
	defer t.close()
	buf := make([]byte, configSize+1)
	for _, f := range files {
		fd, err := t.dir(path.Dir(f.Path))
		if err != nil {
			return err
		}
		name := path.Base(f.Path)
		if f.Link != "" {
			n, err := unix.Readlinkat(fd, name, buf)
			if err != nil || string(buf[:n]) != f.Link {
				return fmt.Errorf("%s: not a link to %s", filepath.Join(dir, f.Path), f.Link)
			}
			continue
		}
		if err := sameFile(fd, name, f.Data, buf); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(dir, f.Path), err)
		}
	}
	return nil
}

func sameFile(dirfd int, name string, want, buf []byte) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o777 != Mode || st.Size != int64(len(want)) {
		return fmt.Errorf("mode %o or size %d differs", st.Mode, st.Size)
	}
	n, err := unix.Read(fd, buf)
	if err != nil || !bytes.Equal(buf[:n], want) {
		return fmt.Errorf("content differs")
	}
	return nil
}

// tree keeps a descriptor per directory of a tree being written or read.
type tree struct {
	root   string
	make   bool
	fds    map[string]int
	rootFD int
}

func openTree(root string, make bool) (*tree, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &tree{root: root, make: make, fds: map[string]int{".": fd}, rootFD: fd}, nil
}

// dir is the descriptor of rel, made (with its parents) when writing.
func (t *tree) dir(rel string) (int, error) {
	if fd, ok := t.fds[rel]; ok {
		return fd, nil
	}
	parent, err := t.dir(path.Dir(rel))
	if err != nil {
		return -1, err
	}
	name := path.Base(rel)
	if t.make {
		if err := unix.Mkdirat(parent, name, 0o755); err != nil && err != unix.EEXIST {
			return -1, fmt.Errorf("mkdir %s: %w", filepath.Join(t.root, rel), err)
		}
	}
	fd, err := unix.Openat(parent, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%s: %w", filepath.Join(t.root, rel), err)
	}
	t.fds[rel] = fd
	return fd, nil
}

// makeDirs makes the files' directories level by level, each level's at
// once, and keeps their descriptors.
func (t *tree) makeDirs(files []File) error {
	for _, ds := range DirLevels(len(files), func(i int) string { return files[i].Path }) {
		fds := make([]int, len(ds))
		for i := range fds {
			fds[i] = -1
		}
		err := InRuns(len(ds), func(i int) error {
			parent, name := t.fds[path.Dir(ds[i])], path.Base(ds[i])
			if err := unix.Mkdirat(parent, name, 0o755); err != nil {
				return fmt.Errorf("mkdir %s: %w", filepath.Join(t.root, ds[i]), err)
			}
			fd, err := unix.Openat(parent, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(t.root, ds[i]), err)
			}
			fds[i] = fd
			return nil
		})
		for i, fd := range fds {
			if fd >= 0 {
				t.fds[ds[i]] = fd
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// DirLevels lists the directories that n relative paths lie in (parents
// included, "." not), by depth: each level's parents are in the ones
// before.
func DirLevels(n int, pathOf func(i int) string) [][]string {
	var levels [][]string
	seen := map[string]bool{".": true}
	for i := range n {
		for d := path.Dir(pathOf(i)); !seen[d]; d = path.Dir(d) {
			seen[d] = true
			depth := strings.Count(d, "/")
			for len(levels) <= depth {
				levels = append(levels, nil)
			}
			levels[depth] = append(levels[depth], d)
		}
	}
	return levels
}

func (t *tree) close() {
	for _, fd := range t.fds {
		unix.Close(fd)
	}
}
