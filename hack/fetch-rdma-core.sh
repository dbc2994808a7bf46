#!/usr/bin/env bash
# Fetch the rdma-core headers the kernel-less libibverbs provider
# (ibshim/verbs) is built against: libibverbs' private provider ABI
# (driver.h and what it includes), which libibverbs-dev does not ship.
#
# Source: Debian's rdma-core_56.1.orig.tar.gz (trixie). Bookworm's own
# rdma-core_44.0.orig.tar.gz is listed in bookworm's Sources but the pool
# answers 404 for it, so 56.1 it is. Both are provider ABI 34
# (IBVERBS_PRIVATE_34, lib*-rdmav34.so) and the structs the provider touches
# are laid out identically: verbs_set_ops() compiled from 56.1's dummy_ops.c
# against these headers is instruction for instruction the one in Debian's
# libibverbs.so.1.14.44.0, and the 44.0 binary allocates and indexes
# verbs_sysfs_dev with 56.1's sizes and offsets (0x3e0, abi_ver at 0x3c8).
#
# Usage: hack/fetch-rdma-core.sh CACHE_DIR
# Result: CACHE_DIR/rdma-core/include (for -isystem). Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/debapt.sh source-path=SCRIPTDIR
. "$here/lib/debapt.sh"

VERSION=56.1
# From the Checksums-Sha256 of Debian's rdma-core_56.1-1.dsc (as listed in
# trixie's main Sources index).
SHA256=63ce7f2baa7242c2dbc76375dac957c420187dd27f8c5e148efc07971ee522a8

[ $# -eq 1 ] || debapt_die "usage: $0 CACHE_DIR"
cache=$(mkdir -p "$1" && cd "$1" && pwd)
dir=$cache/rdma-core inc=$cache/rdma-core/include stamp=$cache/rdma-core/.extracted-$VERSION
if [ -f "$inc/infiniband/driver.h" ] && [ -f "$stamp" ]; then
  debapt_log "already present: $inc"
  exit 0
fi
for c in curl tar python3; do command -v $c >/dev/null || debapt_die "$c is required"; done

mkdir -p "$dir"
tarball=$dir/rdma-core_$VERSION.orig.tar.gz
debapt_fetch_pool "main/r/rdma-core/rdma-core_$VERSION.orig.tar.gz" "$SHA256" "$tarball"

# Only what driver.h includes (gcc -H), plus the generator of kernel-abi/.
src=$dir/rdma-core-$VERSION
rm -rf "$src" "$inc.tmp" && mkdir -p "$inc.tmp"/{infiniband,ccan,util,rdma,kernel-abi}
tar -xzf "$tarball" -C "$dir" \
  "rdma-core-$VERSION/libibverbs/driver.h" "rdma-core-$VERSION/libibverbs/kern-abi.h" \
  "rdma-core-$VERSION/libibverbs/cmd_ioctl.h" "rdma-core-$VERSION/ccan" \
  "rdma-core-$VERSION/util/compiler.h" "rdma-core-$VERSION/kernel-headers/rdma" \
  "rdma-core-$VERSION/buildlib/make_abi_structs.py" ||
  debapt_die "extracting headers from ${tarball##*/} failed"
cp "$src"/libibverbs/{driver.h,kern-abi.h,cmd_ioctl.h} "$inc.tmp/infiniband/"
cp "$src"/ccan/*.h "$inc.tmp/ccan/"
cp "$src/util/compiler.h" "$inc.tmp/util/"
cp "$src"/kernel-headers/rdma/*.h "$inc.tmp/rdma/"
# What rdma-core's CMake does for kernel-headers/: the ABI structs as macros.
python3 "$src/buildlib/make_abi_structs.py" "$src/kernel-headers/rdma/ib_user_verbs.h" \
  "$inc.tmp/kernel-abi/ib_user_verbs.h" || debapt_die "make_abi_structs.py failed"
# The part of CMake's config.h that these headers read.
cat >"$inc.tmp/config.h" <<'EOF'
/* Written by hack/fetch-rdma-core.sh: what rdma-core's CMake would define
 * for driver.h and ccan on Linux/gcc. */
#ifndef NVMOCK_RDMA_CONFIG_H
#define NVMOCK_RDMA_CONFIG_H
#define HAVE_STATEMENT_EXPR 1
#define HAVE_BUILTIN_TYPES_COMPATIBLE_P 1
#define HAVE_TYPEOF 1
#define HAVE_ISBLANK 1
#define HAVE_BUILTIN_CLZ 1
#define HAVE_BUILTIN_CLZL 1
#define IBVERBS_PABI_VERSION 34
#define VERBS_PROVIDER_SUFFIX "-rdmav34.so"
#endif
EOF
rm -rf "$src" "$inc"
mv "$inc.tmp" "$inc"
touch "$stamp"
debapt_log "done: $inc"
