#!/bin/sh
# build.sh OUT_DIR CACHE_DIR: build OUT_DIR/libnvmock-umad.so, the LD_PRELOAD
# shim that connects /dev/infiniband/umadN to the fabric daemon (umad.c) and
# keeps other libibverbs providers off the mock HCAs (providers.c), and
# makes completion channels for the mock HCAs (channels.c); the last two
# build against rdma-core's headers that hack/fetch-rdma-core.sh put in
# CACHE_DIR. EXTRA_CFLAGS, when set, adds compiler flags (the sanitizer
# tests build with it).
set -eu
out=${1:?usage: build.sh OUT_DIR CACHE_DIR}
inc=${2:?usage: build.sh OUT_DIR CACHE_DIR}/rdma-core/include
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$inc/infiniband/driver.h" ] || { echo "build.sh: no rdma-core headers in $inc (run hack/fetch-rdma-core.sh)" >&2; exit 1; }
mkdir -p "$out"
# -z defs: every symbol resolved at link time; -z now: no lazy binding inside
# the consumer's process. libdl.so.2 stays NEEDED (glibc >= 2.34 links dlsym
# from libc.so.6 and would drop it) so that dlsym@GLIBC_2.2.5 (umad.c binds
# that version) resolves in a process of glibc < 2.34 too, where dlsym lives
# in libdl. The version script gives verbs_register_driver_34 libibverbs'
# version, which providers ask for. The temporary name makes the install
# atomic.
${CC:-gcc} -std=gnu11 -O2 -fPIC -shared -Wall -Wextra -Werror -fvisibility=hidden ${EXTRA_CFLAGS:-} \
	-isystem "$inc" \
	-Wl,-soname,libnvmock-umad.so -Wl,-z,defs -Wl,-z,now \
	-Wl,--version-script="$here/shim.map" \
	-o "$out/libnvmock-umad.so.tmp" "$here/umad.c" "$here/providers.c" "$here/channels.c" \
	-Wl,--push-state,--no-as-needed -l:libdl.so.2 -Wl,--pop-state -ldl
mv "$out/libnvmock-umad.so.tmp" "$out/libnvmock-umad.so"
