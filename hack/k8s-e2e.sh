#!/usr/bin/env bash
# Runs the Kubernetes suite (e2e/k8s, build tag k8s) on this machine's
# one-node cluster: holding the cluster lock (one cluster per machine, fixed
# ports), it brings the node up (hack/k8s-node.sh up), runs the suite, and
# takes the node down, also on failure or Ctrl-C.
#
#   hack/k8s-e2e.sh [-tally FILE] [TEST FLAGS...]    e.g. -run 'TestGFD|TestJob'
#
# Before taking the lock it builds what needs no cluster: the nvmock image
# (make image) and the test binary. Results in $NVMOCK_BUILD/k8s-e2e:
# test.json (go test -json), up.log, helm.log, pod-startup.txt, memory.txt;
# the cluster's own logs in $NVMOCK_BUILD/k8s-logs. The results go through
# hack/testsum: with -tally FILE they add to hack/test.sh's tally, else the
# script ends with testsum's "N passed, N failed, N skipped". Root only.
# Env: NVMOCK_K8S_LOCK (default /tmp/nvmock-k8s.lock); NVMOCK_K8S_BENCH_PODS
# (pods per side in the pod startup figures, default 10).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
BUILD=${NVMOCK_BUILD:-$repo/build}
W=${NVMOCK_K8S_DIR:-/tmp/nvmock-k8s}
LOCK=${NVMOCK_K8S_LOCK:-/tmp/nvmock-k8s.lock}
out=$BUILD/k8s-e2e
pkg=github.com/nvmock/nvmock/e2e/k8s

log() { echo "k8s-e2e: $*" >&2; }
die() { echo "k8s-e2e: error: $*" >&2; exit 1; }
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

tally=""
if [ "${1:-}" = -tally ]; then
  tally=$2
  shift 2
fi
# go test's flags, for the test binary: -run X is -test.run X.
args=()
for a in "$@"; do
  [[ $a =~ ^-(run|skip|count|timeout|v|failfast|shuffle)(=|$) ]] && a=-test.${a#-}
  args+=("$a")
done
[ "$(id -u)" = 0 ] || die "needs root (hack/k8s-node.sh runs containerd and the kubelet)"

# memory WHEN: the resident memory of the cluster's processes (k8s-node.sh
# records each one's pid and binary in $W/pids), a line each and the sums.
memory() {
  local f pid exe rss cp=0 node=0 name
  echo "$1:"
  for f in "$W"/pids/*; do
    [ -f "$f" ] || continue
    read -r pid exe <"$f"
    name=$(basename "$f")
    rss=$(awk '/^VmRSS:/ {print int($2 / 1024)}' "/proc/$pid/status" 2>/dev/null) || continue
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$exe" ] || continue
    printf '  %-24s %5d MiB\n' "$name" "$rss"
    case $name in
      etcd | kube-apiserver | kube-controller-manager | kube-scheduler) cp=$((cp + rss)) ;;
      *) node=$((node + rss)) ;;
    esac
  done
  printf '  %-24s %5d MiB\n  %-24s %5d MiB\n' "control plane" "$cp" "node (kubelet, proxy, containerd)" "$node"
}

# times: each test's result and time, from go test -json.
times() {
  sed -n 's/.*"Action":"\(pass\|fail\|skip\)","Package":"[^"]*","Test":"\([^"/]*\)","Elapsed":\([0-9.]*\).*/  \1 \3 s \2/p' "$1"
}

mkdir -p "$out" "$BUILD/bin"
rm -f "$out"/*.json "$out"/*.txt "$out"/*.log
t=$(date +%s%N)
log "building the nvmock image and the suite (no lock needed)"
make -C "$repo" image >"$out/build.log" 2>&1 || { tail -n 20 "$out/build.log" >&2; die "make image failed (log: $out/build.log)"; }
(cd "$repo" && go build -o "$BUILD/bin/testsum" ./hack/testsum && go test -c -tags k8s -o "$out/k8s.test" ./e2e/k8s/) >>"$out/build.log" 2>&1 ||
  { tail -n 20 "$out/build.log" >&2; die "building the suite failed (log: $out/build.log)"; }
log "built in $(ms "$t") ms"

own=""
if [ -z "$tally" ]; then
  own=$(mktemp) && tally=$own
fi

# The lock: held by this shell (fd 9) until it exits.
exec 9>>"$LOCK"
if ! flock -n 9; then
  log "waiting for the cluster lock $LOCK (another run holds it)"
  flock 9
fi
t=$(date +%s%N)
trap '"$here/k8s-node.sh" down >>"$out/down.log" 2>&1; [ -z "$own" ] || rm -f "$own"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
rc=0
if "$here/k8s-node.sh" up >"$out/up.log" 2>&1; then
  log "node up in $(ms "$t") ms"
  memory "idle, after up" >"$out/memory.txt"
  ts=$(date +%s%N)
  (cd "$repo/e2e/k8s" && go tool test2json -t -p "$pkg" "$out/k8s.test" -test.v=test2json -test.count=1 -test.timeout=30m "${args[@]}") \
    >"$out/test.json" 2>&1
  [ $? = 0 ] || rc=1
  suite=$(ms "$ts")
  memory "after the suite" >>"$out/memory.txt"
  "$BUILD/bin/testsum" -tally "$tally" <"$out/test.json"
  log "suite in $suite ms; each test:"
  times "$out/test.json" >&2
  [ ! -f "$out/pod-startup.txt" ] || cat "$out/pod-startup.txt" >&2
  cat "$out/memory.txt" >&2
else
  rc=1
  tail -n 20 "$out/up.log" >&2
  log "the node did not come up (log: $out/up.log)"
  printf '{"Action":"fail","Package":"%s","Test":"setup"}\n' "$pkg" | "$BUILD/bin/testsum" -tally "$tally" >/dev/null
fi
"$here/k8s-node.sh" down >>"$out/down.log" 2>&1
trap '[ -z "$own" ] || rm -f "$own"' EXIT
flock -u 9
log "cluster held for $(ms "$t") ms, now down (cluster logs in $BUILD/k8s-logs, the suite's in $out)"
if [ -n "$own" ]; then
  "$BUILD/bin/testsum" -tally "$own" -summary || rc=1
fi
exit $rc
