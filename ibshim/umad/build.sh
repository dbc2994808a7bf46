#!/bin/sh
# build.sh OUT_DIR: build OUT_DIR/libnvmock-umad.so, the LD_PRELOAD shim that
# connects /dev/infiniband/umadN to the fabric daemon (see umad.c).
set -eu
out=${1:?usage: build.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
# -z defs: every symbol resolved at link time; -z now: no lazy binding inside
# the consumer's process. libdl.so.2 stays NEEDED (glibc >= 2.34 links dlsym
# from libc.so.6 and would drop it) so that dlsym@GLIBC_2.2.5 (umad.c binds
# that version) resolves in a process of glibc < 2.34 too, where dlsym lives
# in libdl. The temporary name makes the install atomic.
${CC:-gcc} -std=gnu11 -O2 -fPIC -shared -Wall -Wextra -Werror -fvisibility=hidden \
	-Wl,-soname,libnvmock-umad.so -Wl,-z,defs -Wl,-z,now \
	-o "$out/libnvmock-umad.so.tmp" "$here/umad.c" \
	-Wl,--push-state,--no-as-needed -l:libdl.so.2 -Wl,--pop-state -ldl
mv "$out/libnvmock-umad.so.tmp" "$out/libnvmock-umad.so"
