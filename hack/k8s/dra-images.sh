#!/usr/bin/env bash
# The image of NVIDIA's DRA driver for GPUs (v0.4.0, built by
# hack/fetch-dra-driver.sh), without a registry or Docker, imported into the
# one-node cluster's containerd (hack/k8s-node.sh up).
#
#   hack/k8s/dra-images.sh            build the archive if stale, import it
#   hack/k8s/dra-images.sh build      build the archive only (no cluster needed)
#
# Laid out as upstream's image (deployments/container/Dockerfile): the five
# binaries and nvidia-cdi-hook in /usr/bin, the scripts its chart runs
# (kubelet-plugin-prestart.sh, bind/unbind_from_driver.sh) beside them, the
# templates in /templates, its ENV; on the Debian-glibc root of the e2e
# images (the binaries use cgo; the init container runs the driver root's
# nvidia-smi) plus busybox for the tools upstream's image takes from busybox
# (ln, find, date, basename, mount, ...). The archive is cached in
# $NVMOCK_CACHE/dra/image-$DRA_VERSION.tar, rebuilt when the binaries are newer.
# Image: localhost/nvmock-e2e/dra-driver-nvidia-gpu:$DRA_VERSION, for
# imagePullPolicy: Never. Env: NVMOCK_K8S_DIR (the cluster, default
# /tmp/nvmock-k8s), NVMOCK_CACHE, CTR (default: the e2e node's ctr).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

DRA_VERSION=v0.4.0
IMAGE=localhost/nvmock-e2e/dra-driver-nvidia-gpu:$DRA_VERSION

log() { echo "dra-images: $*" >&2; }
die() { echo "dra-images: error: $*" >&2; exit 1; }

cache=${NVMOCK_CACHE:-$repo/.cache}
dra=$cache/dra
src=$dra/src/$DRA_VERSION
stamp=$dra/bin/.dra-driver-$DRA_VERSION
archive=$dra/image-$DRA_VERSION.tar
K=${NVMOCK_K8S_DIR:-/tmp/nvmock-k8s}
ctr=${CTR:-$(source "$repo/hack/e2e-node.sh" && echo "$bin/ctr")}

[ -f "$stamp" ] && [ -f "$src/go.mod" ] || die "no DRA driver build in $dra; run hack/fetch-dra-driver.sh first"

# build_archive: the rootfs, then the OCI archive (hack/mkimage).
build_archive() {
  local r f a
  work=$(mktemp -d "$dra/.image-XXXXXX") # global: the EXIT trap removes it
  trap 'rm -rf "$work"' EXIT
  # The e2e images' glibc root (glibc_rootfs); sourced, the script only
  # defines its functions. It sets repo from $0: set ours again.
  W=$work CTR=$ctr source "$here/../e2e-images.sh"
  repo=$(cd "$here/../.." && pwd)
  r=$work/rootfs
  glibc_rootfs "$r"
  cp /bin/busybox "$r/usr/bin/busybox"
  for a in $(/bin/busybox --list); do
    [ -e "$r/usr/bin/$a" ] || [ -e "$r/usr/sbin/$a" ] || ln -s busybox "$r/usr/bin/$a"
  done
  for f in gpu-kubelet-plugin compute-domain-kubelet-plugin compute-domain-controller compute-domain-daemon webhook nvidia-cdi-hook; do
    cp "$dra/bin/$f" "$r/usr/bin/$f"
  done
  for f in scripts/bind_to_driver.sh scripts/unbind_from_driver.sh hack/kubelet-plugin-prestart.sh; do
    install -m 0755 "$src/$f" "$r/usr/bin/${f##*/}"
  done
  cp -r "$src/templates" "$r/templates"
  cp "$src/LICENSE" "$r/LICENSE"
  go build -o "$work/mkimage" "$repo/hack/mkimage"
  # As upstream's ENV; no entrypoint: the chart gives every container its command.
  "$work/mkimage" -name "$IMAGE" -entrypoint "" \
    -env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin,NVIDIA_DISABLE_REQUIRE=true,NVIDIA_VISIBLE_DEVICES=all,NVIDIA_DRIVER_CAPABILITIES=utility" \
    -o "$archive.tmp" "$r"
  mv "$archive.tmp" "$archive"
}

if [ ! -f "$archive" ] || [ "$stamp" -nt "$archive" ] || [ "$0" -nt "$archive" ]; then
  t=$(date +%s%N)
  log "building $IMAGE"
  renice -n 10 -p $$ >/dev/null
  build_archive
  log "built $archive ($(du -m "$archive" | cut -f1) MiB) in $(( ($(date +%s%N) - t) / 1000000 )) ms"
fi
[ "${1:-}" = build ] && exit 0

sock=$K/state/containerd.sock
[ -S "$sock" ] || die "no cluster containerd at $sock; hack/k8s-node.sh up first (or set NVMOCK_K8S_DIR)"
t=$(date +%s%N)
"$ctr" -a "$sock" -n k8s.io images import "$archive" >/dev/null
log "imported $IMAGE in $(( ($(date +%s%N) - t) / 1000000 )) ms"
