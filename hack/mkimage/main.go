// Command mkimage writes a directory as a one-layer OCI image archive (an OCI
// layout in a tar) that `ctr images import` takes, so the e2e tests need no
// registry and no Docker. The archive is reproducible: entries are sorted,
// owned by root and dated at the epoch.
//
//	mkimage -name localhost/nvmock-e2e/glibc:local -entrypoint '["/bin/sh","-c"]' -o out.tar ROOTFS
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
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
	var ep []string
	if entry != "" {
		if err := json.Unmarshal([]byte(entry), &ep); err != nil {
			return fmt.Errorf("-entrypoint %q: not a JSON array of strings: %v", entry, err)
		}
	}
	layer, err := tarDir(args[0])
	if err != nil {
		return err
	}
	blobs := map[string][]byte{}
	add := func(b []byte) (string, int) {
		d := digest(b)
		blobs[d] = b
		return d, len(b)
	}
	ld, lsize := add(layer)
	cfg, _ := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": ep, "Env": splitEnv(env)},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{ld}},
	})
	cd, csize := add(cfg)
	man, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": csize},
		"layers":        []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ld, "size": lsize}},
	})
	md, msize := add(man)
	tag := name[strings.LastIndexByte(name, ':')+1:]
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": msize,
			"annotations": map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag},
		}},
	})

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	file := func(p string, b []byte) {
		_ = tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg})
		_, _ = tw.Write(b)
	}
	file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	file("index.json", index)
	keys := make([]string, 0, len(blobs))
	for k := range blobs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		file("blobs/sha256/"+strings.TrimPrefix(k, "sha256:"), blobs[k])
	}
	if err := tw.Close(); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
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

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
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
