#!/usr/bin/env bash
# Build the kernel-less libibverbs provider for mock InfiniBand HCAs.
# Usage: ibshim/verbs/build.sh CACHE_DIR OUT_DIR
#   CACHE_DIR: where hack/fetch-rdma-core.sh put rdma-core's private headers
#   OUT_DIR:   gets libnvmock-rdmav34.so (libibverbs appends "-rdmav34.so"
#              to the "driver /path/libnvmock" it is given)
# Rebuilds only when the source or the headers are newer than the output,
# and always when EXTRA_CFLAGS adds compiler flags (the sanitizer tests).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "${0##*/}: error: $*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: $0 CACHE_DIR OUT_DIR"
inc=$1/rdma-core/include
[ -f "$inc/infiniband/driver.h" ] || die "no rdma-core headers in $inc (run hack/fetch-rdma-core.sh $1)"
[ -f /usr/include/infiniband/verbs.h ] || die "no <infiniband/verbs.h> (install libibverbs-dev)"
mkdir -p "$2"
out=$(cd "$2" && pwd)/libnvmock-rdmav34.so
srcs=("$here"/provider.c "$here"/objects.c "$here"/post.c "$here"/engine.c "$here"/requester.c "$here"/responder.c "$here"/srq.c "$here"/uc.c "$here"/mcast.c "$here"/xrc.c "$here"/cqex.c "$here"/dm.c "$here"/change.c "$here"/mw.c "$here"/domain.c)

fresh=1
for f in "${srcs[@]}" "$here/provider.h" "$here/datapath.h" "$here/../umad/proto.h" "$0" "$inc/infiniband/driver.h"; do
  [ -f "$out" ] && [ "$out" -nt "$f" ] || fresh=0
done
[ $fresh = 1 ] && [ -z "${EXTRA_CFLAGS:-}" ] && exit 0
# -isystem: rdma-core's own headers are not -Wextra clean; ours must be.
# Public verbs.h comes from libibverbs-dev, i.e. the libibverbs we run with.
${CC:-gcc} -std=gnu11 -O2 -fPIC -shared -pthread -Wall -Wextra -Werror -fvisibility=hidden ${EXTRA_CFLAGS:-} \
  -isystem "$inc" -Wl,-z,defs -Wl,--no-undefined \
  -o "$out.tmp" "${srcs[@]}" -libverbs
mv "$out.tmp" "$out"
echo "${0##*/}: built $out" >&2
