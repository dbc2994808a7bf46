// Command mkimage writes a directory as a one-layer OCI image archive (an OCI
// layout in a tar) that `ctr images import` and skopeo take, so
// neither the e2e tests nor make image need a registry or Docker. The image
// is reproducible: entries are sorted, owned by root and dated at the epoch.
// go-containerregistry does the image format.
//
//	mkimage -name localhost/nvmock-e2e/glibc:local -entrypoint '["/bin/sh","-c"]' -o out.tar ROOTFS
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	gcrname "github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() {
	name := flag.String("name", "", "image name, e.g. localhost/nvmock-e2e/pause:local")
	entry := flag.String("entrypoint", "", "entrypoint as a JSON array")
	env := flag.String("env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "comma list of KEY=value")
	out := flag.String("o", "", "output archive")
	flag.Parse()
	if err := run(*name, *entry, *env, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(name, entry, env, out string, args []string) error {
	if name == "" || out == "" || len(args) != 1 {
		return errors.New("usage: mkimage -name NAME [-entrypoint JSON] [-env K=V,...] -o OUT.tar ROOTFS")
	}
	if _, err := gcrname.ParseReference(name); err != nil {
		return fmt.Errorf("-name %q: %v", name, err)
	}
	var ep []string
	if entry != "" {
		if err := json.Unmarshal([]byte(entry), &ep); err != nil {
			return fmt.Errorf("-entrypoint %q: not a JSON array of strings: %v", entry, err)
		}
	}
	data, err := tarDir(args[0])
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Config.Entrypoint, cf.Config.Env = ep, splitEnv(env)
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}

	dir, err := os.MkdirTemp(filepath.Dir(out), ".mkimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	tag := name[strings.LastIndexByte(name, ':')+1:]
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag,
	})); err != nil {
		return err
	}
	archive, err := tarDir(dir)
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, archive, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

func splitEnv(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// tarDir archives root's tree: directories, regular files and symlinks,
// sorted by path, owned by root, dated at the epoch.
func tarDir(root string) ([]byte, error) {
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rootfs %s: %w", root, err)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		fi, err := os.Lstat(p)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, p)
		h := &tar.Header{Name: rel, Mode: int64(fi.Mode().Perm()), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		switch {
		case fi.Mode().IsDir():
			h.Typeflag, h.Name = tar.TypeDir, rel+"/"
		case fi.Mode()&fs.ModeSymlink != 0:
			h.Typeflag = tar.TypeSymlink
			if h.Linkname, err = os.Readlink(p); err != nil {
				return nil, err
			}
		case fi.Mode().IsRegular():
			h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		default:
			return nil, fmt.Errorf("rootfs %s: %s is neither a file, a directory nor a symlink", root, rel)
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			f, err := os.Open(p)
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
