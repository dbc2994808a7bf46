#!/usr/bin/env bash
# Assembles the nvmock image as an OCI archive, with no Docker: the static
# nvmock binary and the driver tree hostprep installs (the mock library and
# Debian's nvidia-smi). The Dockerfile builds the same root for those who
# have Docker.
# Usage: hack/image.sh BUILD_DIR IMAGE_NAME   -> BUILD_DIR/nvmock-image.tar
set -euo pipefail
build=$1 name=$2
root=$build/image-root
[ -x "$build/bin/nvmock" ] && [ -x "$build/driver/usr/bin/nvidia-smi" ] || {
  echo "image: no $build/bin/nvmock or $build/driver: run make driver" >&2; exit 1; }
file "$build/bin/nvmock" 2>/dev/null | grep -q 'statically linked' || [ ! -x /usr/bin/file ] || {
  echo "image: $build/bin/nvmock is not static; the image has no libc" >&2; exit 1; }
rm -rf "$root"
mkdir -p "$root/opt/nvmock/bin" "$root/tmp"
chmod 1777 "$root/tmp"
cp "$build/bin/nvmock" "$build/bin/nvmock-hook" "$root/opt/nvmock/bin/"
# hostprep's default assets: ../driver beside the executable.
cp -a "$build/driver" "$root/opt/nvmock/driver"
go build -o "$build/bin/mkimage" ./hack/mkimage
"$build/bin/mkimage" -name "$name" -entrypoint '["/opt/nvmock/bin/nvmock"]' -env "PATH=/opt/nvmock/bin" \
  -o "$build/nvmock-image.tar" "$root"
echo "image: $name in $build/nvmock-image.tar ($(du -h "$build/nvmock-image.tar" | cut -f1)); load it with ctr -n k8s.io images import, or push it with skopeo copy oci-archive:..."
