#!/usr/bin/env bash
# Put the real nvidia-smi into the built driver tree, patched to find the mock
# library next to it without LD_LIBRARY_PATH: BUILD_DIR/driver/usr/bin/nvidia-smi
# with DT_RPATH $ORIGIN/../lib64.
# - DT_RPATH, not DT_RUNPATH (--force-rpath): nvidia-smi dlopens
#   "libnvidia-ml.so.1", and glibc searches the executable's DT_RPATH for a
#   dlopen too (a DT_RUNPATH is searched only for the object's own needs).
# - hostprep.SMIRPath holds the same string and Render checks it.
# Beside it, as a driver installs them, the MPS control daemon and server
# found next to NVIDIA_SMI (hack/fetch-nvidia-smi.sh puts them there); they
# load no NVML and are copied as they are.
# Usage: hack/package-driver.sh BUILD_DIR NVIDIA_SMI
set -euo pipefail
rpath='$ORIGIN/../lib64'
die() { echo "package-driver: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: hack/package-driver.sh BUILD_DIR NVIDIA_SMI"
build=$1 smi=$2
[ -f "$smi" ] || die "no nvidia-smi at $smi; run make deps"
command -v patchelf >/dev/null || die "patchelf not found; apt-get install patchelf (hack/install-deps.sh)"
[ -e "$build/driver/usr/lib64/libnvidia-ml.so.1" ] || die "no $build/driver/usr/lib64/libnvidia-ml.so.1; run make build"
bin=$build/driver/usr/bin
mkdir -p "$bin"
# tmp + mv: a running copy keeps its inode, readers never see half a file.
cp "$smi" "$bin/nvidia-smi.tmp"
patchelf --force-rpath --set-rpath "$rpath" "$bin/nvidia-smi.tmp"
got=$(patchelf --print-rpath "$bin/nvidia-smi.tmp")
[ "$got" = "$rpath" ] || die "patchelf left RPATH '$got', want '$rpath'"
chmod 0755 "$bin/nvidia-smi.tmp"
mv "$bin/nvidia-smi.tmp" "$bin/nvidia-smi"
for f in nvidia-cuda-mps-control nvidia-cuda-mps-server; do
  src=$(dirname "$smi")/$f
  [ -f "$src" ] || die "no $f at $src; run make deps"
  cp "$src" "$bin/$f.tmp"
  chmod 0755 "$bin/$f.tmp"
  mv "$bin/$f.tmp" "$bin/$f"
done
