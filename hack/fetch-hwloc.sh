#!/usr/bin/env bash
# Build hwloc's lstopo with its NVML plugin into a cache dir, for the test
# that hwloc attaches each NVML GPU to the PCI device pcisim shows for it.
# Debian's hwloc has no NVML plugin (NVML is non-free), so this builds
# Debian's upstream source of the same release (2.9.0, bookworm) with
# --enable-nvml, against go-nvml's nvml.h and the mock library's soname; at
# run time it loads whatever libnvidia-ml.so.1 the process finds.
# Usage: hack/fetch-hwloc.sh CACHE_DIR NVML_H_DIR LIB_DIR
# Result: CACHE_DIR/bin/lstopo-nvml. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/debapt.sh source-path=SCRIPTDIR
. "$here/lib/debapt.sh"

VERSION=2.9.0
# From Debian's hwloc_2.9.0-1.dsc (Checksums-Sha256).
SHA256=b3fb1a43a14d8fbcd8e976de5ede2ea7ce1d768ed173adb33c7ceaaf098dc970

cache=$(mkdir -p "$1" && cd "$1" && pwd) nvml_h=$(cd "$2" && pwd) lib=$(cd "$3" && pwd)
out=$cache/bin/lstopo-nvml stamp=$cache/hwloc/.built-$VERSION
if [ -x "$out" ] && [ -f "$stamp" ]; then
  debapt_log "already present: $out"
  exit 0
fi
[ -f "$nvml_h/nvml.h" ] || debapt_die "no nvml.h in $nvml_h (go-nvml's pkg/nvml)"
[ -e "$lib/libnvidia-ml.so" ] || debapt_die "no libnvidia-ml.so in $lib (run make build first)"
for c in curl make cc; do command -v $c >/dev/null || debapt_die "$c is required"; done

mkdir -p "$cache/hwloc" "$cache/bin"
tarball=$cache/hwloc/hwloc_$VERSION.orig.tar.bz2
debapt_fetch_pool "main/h/hwloc/hwloc_$VERSION.orig.tar.bz2" "$SHA256" "$tarball"
src=$cache/hwloc/hwloc-$VERSION
rm -rf "$src" && tar -xjf "$tarball" -C "$cache/hwloc"
debapt_log "building lstopo with NVML (about 2 minutes; log: $cache/hwloc/build.log)"
# Only what the test needs: the Linux PCI backend and NVML, statically.
(cd "$src" && ./configure --enable-nvml --disable-cairo --disable-libxml2 --disable-opencl --disable-cuda \
    --disable-gl --disable-levelzero --disable-rsmi --disable-libudev --disable-plugin-dlopen \
    --enable-static --disable-shared CPPFLAGS="-I$nvml_h" LDFLAGS="-L$lib" &&
  make -j"$(nproc)" -C hwloc && make -j"$(nproc)" -C utils/hwloc libutils_common.la &&
  make -j"$(nproc)" -C utils/lstopo lstopo-no-graphics) >"$cache/hwloc/build.log" 2>&1 ||
  debapt_die "hwloc build failed: $(tail -n 1 "$cache/hwloc/build.log") (full log: $cache/hwloc/build.log)"
grep -q 'NVML status: *yes' "$cache/hwloc/build.log" || debapt_die "hwloc was configured without NVML (see $cache/hwloc/build.log)"
cp "$src/utils/lstopo/lstopo-no-graphics" "$out.tmp" && mv "$out.tmp" "$out"
rm -rf "$src"
touch "$stamp"
debapt_log "done: $out"
