#!/usr/bin/env bash
# Builds the e2e test images without a registry or Docker, from this
# machine's files and this repo's programs, and imports them into the e2e
# node's containerd (k8s.io namespace). hack/e2e-node.sh up runs it.
# Env: W (the node's work dir, with a running containerd), CTR (ctr binary).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
: "${W:?}" "${CTR:?}"

# build_images: the test images, from this machine's files and this repo's
# programs, imported into containerd's k8s.io namespace. No registry.
build_images() {
  local img=$W/img r
  rm -rf "$img" && mkdir -p "$img"
  go build -o "$img/mkimage" "$repo/hack/mkimage"
  CGO_ENABLED=0 go build -o "$img/pause" "$repo/e2e/images/pause"
  CGO_ENABLED=0 go build -o "$img/probe" "$repo/e2e/images/probe"
  CGO_ENABLED=0 go build -o "$img/pciprobe" "$repo/e2e/images/pciprobe"
  go build -o "$img/nvmlprobe" "$repo/e2e/images/nvmlprobe"

  r=$img/rootfs-pause && mkdir -p "$r"/{dev,proc,sys,etc} && cp "$img/pause" "$r/pause"
  mkimage pause '["/pause"]' "$r"

  # glibc: Debian's own binaries and the libraries they load, merged-/usr.
  r=$img/rootfs-glibc && glibc_rootfs "$r"
  mkimage glibc '["/bin/sh","-c"]' "$r"
  r=$img/rootfs-gonvml && glibc_rootfs "$r" && cp "$img/nvmlprobe" "$r/usr/local/bin/nvmlprobe"
  mkimage gonvml '["/usr/local/bin/nvmlprobe"]' "$r"
  # rdma: glibc plus Debian's InfiniBand tools and verbs providers.
  r=$img/rootfs-rdma && rdma_rootfs "$r"
  mkimage rdma '["/bin/sh","-c"]' "$r"

  # busybox: a static binary, relative applet links (absolute ones would point at the host's merged /usr).
  r=$img/rootfs-busybox && mkdir -p "$r"/{bin,dev,proc,sys,etc,tmp}
  cp /bin/busybox "$r/bin/busybox"
  for a in $(/bin/busybox --list); do [ -e "$r/bin/$a" ] || ln -s busybox "$r/bin/$a"; done
  printf 'root:x:0:0:root:/:/bin/sh\n' >"$r/etc/passwd"; printf 'root:x:0:\n' >"$r/etc/group"
  mkimage busybox '["/bin/sh","-c"]' "$r"

  r=$img/rootfs-static && mkdir -p "$r"/{dev,proc,sys,etc} && cp "$img/probe" "$r/probe"
  mkimage static '["/probe"]' "$r"
  # musl: a static musl program listing the PCI devices /sys shows.
  musl-gcc -static -O2 -Wall -Wextra -Werror -o "$img/muslprobe" "$repo/e2e/images/muslprobe/main.c"
  r=$img/rootfs-musl && mkdir -p "$r"/{dev,proc,sys,etc} && cp "$img/muslprobe" "$r/muslprobe"
  mkimage musl '["/muslprobe"]' "$r"
  # pciprobe: static Go with go-nvlib and ghw (which names devices from pci.ids).
  r=$img/rootfs-pciprobe && mkdir -p "$r"/{dev,proc,sys,etc,usr/share/misc} && cp "$img/pciprobe" "$r/pciprobe"
  cp /usr/share/misc/pci.ids "$r/usr/share/misc/pci.ids"
  mkimage pciprobe '["/pciprobe"]' "$r"

  nvidia_image
}

# nvidia_image: NVIDIA's device plugin, GPU feature discovery and the MPS
# control daemon and config manager (v0.18.2, built by
# hack/fetch-nvidia-tools.sh; they use cgo) in a glibc root, laid
# out as NVIDIA's image nvcr.io/nvidia/k8s-device-plugin is (its Dockerfile:
# the binaries in /usr/bin, the same ENV and ENTRYPOINT), so that NVIDIA's
# Helm chart runs it unchanged. Skipped when the tools were not built (make
# deps builds them); the Kubernetes suite (e2e/k8s) says so then.
nvidia_image() {
  local cache=${NVMOCK_CACHE:-$repo/.cache} r=$img/rootfs-nvidia f
  local tools=(nvidia-device-plugin gpu-feature-discovery mps-control-daemon config-manager)
  for f in "${tools[@]}"; do
    [ -x "$cache/bin/$f" ] || { echo "e2e-images: no $cache/bin/$f (make deps builds it): no k8s-device-plugin image" >&2; return 0; }
  done
  glibc_rootfs "$r"
  for f in "${tools[@]}"; do
    # Without the debug info (28 to 68 MB with it): a smaller import.
    objcopy --strip-debug "$cache/bin/$f" "$r/usr/bin/$f"
  done
  # What the MPS daemon's pod runs besides: its mount-shm step unmounts and
  # mounts a tmpfs, and the daemon follows its log with tail.
  for f in mount umount tail; do cp "$(type -P "$f")" "$r/usr/bin/"; done
  copy_libs "$r" "$r"/usr/bin/{mount,umount,tail}
  # Its NVIDIA_DRIVER_CAPABILITIES=compute,utility is left out: mkimage's
  # -env is a comma list, and nvmock does not read the variable.
  "$img/mkimage" -name localhost/nvmock-e2e/k8s-device-plugin:local -entrypoint '["nvidia-device-plugin"]' \
    -env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin,NVIDIA_DISABLE_REQUIRE=true,NVIDIA_VISIBLE_DEVICES=all" \
    -o "$img/k8s-device-plugin.tar" "$r"
  "$CTR" -a "$W/state/containerd.sock" -n k8s.io images import "$img/k8s-device-plugin.tar" >/dev/null 2>>"$W/logs/ctr.log"
}

mkimage() {
  "$W/img/mkimage" -name "localhost/nvmock-e2e/$1:local" -entrypoint "$2" -o "$W/img/$1.tar" "$3"
  "$CTR" -a "$W/state/containerd.sock" -n k8s.io images import "$W/img/$1.tar" >/dev/null 2>>"$W/logs/ctr.log"
}

# glibc_rootfs DIR: a merged-/usr Debian-like root: all of libc6's libraries
# (as the package installs them), a few of Debian's tools and what they load.
glibc_rootfs() {
  local r=$1 f l
  mkdir -p "$r"/usr/{bin,sbin,lib/x86_64-linux-gnu,lib64,local/bin} "$r"/{dev,proc,sys,tmp,etc/ld.so.conf.d,root}
  for l in bin sbin lib lib64; do ln -s "usr/$l" "$r/$l"; done
  for f in sh dash bash env cat ls sleep grep head tr wc readlink id true lspci lstopo-no-graphics; do cp "$(type -P "$f")" "$r/usr/bin/"; done
  mkdir -p "$r/usr/share/misc" && cp /usr/share/misc/pci.ids "$r/usr/share/misc/pci.ids"
  cp /sbin/ldconfig "$r/usr/sbin/ldconfig"
  cp /etc/ld.so.conf "$r/etc/" && cp /etc/ld.so.conf.d/x86_64-linux-gnu.conf "$r/etc/ld.so.conf.d/"
  for l in $(dpkg -L libc6 | grep -E '^/lib/x86_64-linux-gnu/[^/]*\.so[.0-9]*$'); do
    cp -L "$l" "$r/usr/lib/x86_64-linux-gnu/"
  done
  cp -L /lib64/ld-linux-x86-64.so.2 "$r/usr/lib64/ld-linux-x86-64.so.2"
  copy_libs "$r" "$r"/usr/{bin,sbin}/*
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$r/etc/passwd"; printf 'root:x:0:\n' >"$r/etc/group"
}

# rdma_rootfs DIR: glibc_rootfs plus Debian's InfiniBand tools
# (infiniband-diags, ibverbs-utils, perftest's ib_write_bw, UCX's
# ucx_perftest), what their scripts run, and
# libibverbs' providers with their driver files, as ibverbs-providers
# installs them: a real image's mlx5 setup.
rdma_rootfs() {
  local r=$1 f
  glibc_rootfs "$r"
  for f in ibstat ibstatus ibnetdiscover iblinkinfo ibswitches ibhosts smpquery saquery perfquery sminfo ibping ibroute; do
    cp "/usr/sbin/$f" "$r/usr/sbin/"
  done
  # ibstatus runs sed; ibhosts and ibswitches awk (mawk); all basename.
  # ibv_rc_pingpong, ibv_uc_pingpong, ibv_xsrq_pingpong and perftest's ib_write_bw move data; ib_write_bw links libmlx5 itself.
  # UCX's ucx_perftest, with the transports it dlopens (libucx0's ucx/);
  # ibv_asyncwatch, line-buffered by stdbuf (with its preload library).
  for f in ibv_devices ibv_devinfo ibv_rc_pingpong ibv_uc_pingpong ibv_xsrq_pingpong ibv_asyncwatch ib_write_bw ucx_perftest stdbuf sed awk basename; do cp "$(type -P "$f")" "$r/usr/bin/"; done
  mkdir -p "$r/usr/libexec/coreutils" && cp /usr/libexec/coreutils/libstdbuf.so "$r/usr/libexec/coreutils/"
  mkdir -p "$r/etc/infiniband-diags" && cp /etc/infiniband-diags/* "$r/etc/infiniband-diags/"
  for f in $(dpkg -L ibverbs-providers libucx0 | grep -E '^/(etc|usr/lib)/'); do
    if [ -d "$f" ] && [ ! -L "$f" ]; then mkdir -p "$r$f"; else cp -P "$f" "$r$f"; fi
  done
  copy_libs "$r" "$r"/usr/{bin,sbin}/* "$r"/usr/lib/x86_64-linux-gnu/libibverbs/*.so "$r"/usr/lib/x86_64-linux-gnu/ucx/*.so
}

# copy_libs ROOT FILE...: the libraries FILEs load, from this machine into
# ROOT's merged /usr (the loader is glibc_rootfs's).
copy_libs() {
  local r=$1 l
  shift
  for l in $(ldd "$@" 2>/dev/null | sed -n 's|.*=> \(/[^ ]*\) .*|\1|p' | sort -u); do
    [ -e "$r/usr/lib/x86_64-linux-gnu/${l##*/}" ] || cp -L "$l" "$r/usr/lib/x86_64-linux-gnu/"
  done
}

# Sourced (hack/k8s/dra-images.sh), it only defines the functions.
[ "${BASH_SOURCE[0]}" != "$0" ] || build_images
