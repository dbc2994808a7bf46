#!/usr/bin/env bash
# A real containerd node for the e2e tests, private to one work dir.
#
#   hack/e2e-node.sh up        install what is missing, start containerd and the plugin
#   hack/e2e-node.sh down      stop all it started, unmount, remove the work dir
#   hack/e2e-node.sh demo      an unmodified container runs nvidia-smi on it
#   hack/e2e-node.sh plugin start|stop|kill
#   hack/e2e-node.sh containerd restart
#   hack/e2e-node.sh peer up|down  a second node beside it (below)
#
# Everything lives in $NVMOCK_E2E_DIR (default /tmp/nvmock-e2e; keep it short,
# unix socket paths are limited to 108 bytes) except what containerd hard-wires:
# shim sockets in /run/containerd/s. Tools come from Debian (runc) and from the
# Go module proxy (containerd, crictl) into $NVMOCK_CACHE/e2e/bin. `up` writes
# $W/e2e.env, which the tests read. Root only. Idempotent: `up` on a running
# node tears it down first; `down` on nothing does nothing.
#
# `peer up` starts a second node, nvmock-e2e-b, in $W-b: its own containerd
# and chart pod in a network namespace of its own (a veth pair, 10.249.0.1
# here, 10.249.0.2 there), its fabric daemon peered with this node's as
# another cluster node's would be. `down` takes it down too.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

CONTAINERD_VERSION=v2.4.2
CRICTL_VERSION=v1.37.0
# Debian 12's runc (1.1.5) runs the node's containers; containerd runs a pod
# with a user namespace of its own only on a runc with idmapped mounts
# (1.2+), so that handler, runc-userns, runs this one.
RUNC_USERNS_VERSION=v1.4.4
W=${NVMOCK_E2E_DIR:-/tmp/nvmock-e2e}
CACHE=${NVMOCK_CACHE:-$repo/.cache}
BUILD=${NVMOCK_BUILD:-$repo/build}
PROFILE=${NVMOCK_E2E_PROFILE:-a100}
PORT=9464 # the chart's metrics port; the plugin pod has the host's network here
CONTAINERD_METRICS_PORT=19465
# Namespaces the plugin injects (the allowlist: no cluster here to label them).
NAMESPACES=nvmock-e2e,nvmock-e2e-2
NODE=nvmock-e2e
IP=127.0.0.1 # where this machine reaches the node's network
NETNS=""     # the node's network namespace; empty: this machine's
PEERS=""     # fabric daemons the node's dials (infiniband.peers)
PEER_OF=${NVMOCK_E2E_PEER_OF:-}
if [ -n "$PEER_OF" ]; then
  NODE=nvmock-e2e-b NETNS=nvmock-e2e-b IP=10.249.0.2 PEERS=10.249.0.1:4791
fi
VETH=nvmock-e2e # this machine's end of the peer's veth pair
bin=$CACHE/e2e/bin
nvmock=$BUILD/bin/nvmock

log() { echo "e2e-node: $*" >&2; }
die() { echo "e2e-node: error: $*" >&2; exit 1; }
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
cri() { "$bin/crictl" --config "$W/etc/crictl.yaml" "$@"; }

# wait_for WHAT SECONDS CMD...: poll CMD every 50 ms; die with the log's tail.
wait_for() {
  local what=$1 secs=$2 logf=$3; shift 3
  local end=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$end" ]; then
      tail -n 20 "$logf" >&2 || true
      die "$what not ready after ${secs}s (log above: $logf)"
    fi
    sleep 0.05
  done
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# stop_pid PIDFILE SIGNAL: signal, wait up to 10 s, then SIGKILL.
stop_pid() {
  local f=$1 sig=${2:-TERM} pid i
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -s "$sig" "$pid" 2>/dev/null || true
    for i in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

install_tools() {
  if ! command -v runc >/dev/null; then
    log "installing runc from Debian"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runc >/dev/null 2>&1 ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runc >/dev/null; }
  fi
  if [ -n "$NETNS" ] && ! command -v ip >/dev/null; then
    log "installing iproute2 from Debian (the peer node's network)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 >/dev/null 2>&1 ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 >/dev/null; }
  fi
  mkdir -p "$bin"
  # A stamp per version: a binary from an older pin is rebuilt.
  if [ ! -f "$bin/.containerd-$CONTAINERD_VERSION" ]; then
    log "building containerd $CONTAINERD_VERSION (go install; about 2-5 min the first time)"
    local t; t=$(date +%s%N)
    env -C / GOBIN="$bin" GOWORK=off CGO_ENABLED=0 go install \
      github.com/containerd/containerd/v2/cmd/{containerd,ctr,containerd-shim-runc-v2}@$CONTAINERD_VERSION \
      >"$CACHE/e2e/containerd.build.log" 2>&1 || die "go install containerd failed (log: $CACHE/e2e/containerd.build.log)"
    touch "$bin/.containerd-$CONTAINERD_VERSION"
    log "containerd built in $(ms "$t") ms"
  fi
  if [ ! -f "$bin/.runc-$RUNC_USERNS_VERSION" ]; then
    log "building runc $RUNC_USERNS_VERSION for user-namespaced pods (go install)"
    env -C / GOBIN="$bin/runc-userns" GOWORK=off CGO_ENABLED=1 go install -ldflags "-X main.version=${RUNC_USERNS_VERSION#v}" \
      github.com/opencontainers/runc@$RUNC_USERNS_VERSION \
      >"$CACHE/e2e/runc.build.log" 2>&1 || die "go install runc failed (log: $CACHE/e2e/runc.build.log)"
    touch "$bin/.runc-$RUNC_USERNS_VERSION"
  fi
  if [ ! -f "$bin/.crictl-$CRICTL_VERSION" ]; then
    log "building crictl $CRICTL_VERSION (go install)"
    env -C / GOBIN="$bin" GOWORK=off CGO_ENABLED=0 go install sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION \
      >"$CACHE/e2e/crictl.build.log" 2>&1 || die "go install crictl failed (log: $CACHE/e2e/crictl.build.log)"
    touch "$bin/.crictl-$CRICTL_VERSION"
  fi
}

# nvidia_runtime DIR: NVIDIA's container runtime (make deps builds it) in CDI
# mode, as the GPU operator configures it: its config and a wrapper that
# points it there, under DIR; prints containerd's runtime section for it,
# handler "nvidia". It applies DIR/cdi's nvidia.com/gpu spec to containers
# with NVIDIA_VISIBLE_DEVICES and then runs runc.
nvidia_runtime() {
  local dir=$1 runc
  runc=$(command -v runc)
  mkdir -p "$dir/bin" "$dir/etc" "$dir/logs"
  cat >"$dir/etc/nvidia-container-runtime.toml" <<EOF
[nvidia-container-runtime]
log-level = "info"
debug = "$dir/logs/nvidia-container-runtime.log"
mode = "cdi"
runtimes = ["$runc"]
[nvidia-container-runtime.modes.cdi]
default-kind = "nvidia.com/gpu"
spec-dirs = ["$dir/cdi"]
annotation-prefixes = ["cdi.k8s.io/"]
[nvidia-ctk]
path = "$CACHE/bin/nvidia-ctk"
EOF
  printf '#!/bin/sh\nNVIDIA_CTK_CONFIG_FILE_PATH=%s exec %s "$@"\n' \
    "$dir/etc/nvidia-container-runtime.toml" "$CACHE/bin/nvidia-container-runtime" >"$dir/bin/nvidia-container-runtime"
  chmod 0755 "$dir/bin/nvidia-container-runtime"
  cat <<EOF
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
      BinaryName = '$dir/bin/nvidia-container-runtime'
      Root = '$dir/state/runc'
      SystemdCgroup = false
EOF
}

write_config() {
  local nvidia
  nvidia=$(nvidia_runtime "$W")
  cat >"$W/etc/config.toml" <<EOF
version = 3
root = '$W/root'
state = '$W/state'
[grpc]
  address = '$W/state/containerd.sock'
[ttrpc]
  address = '$W/state/containerd.sock.ttrpc'
[metrics]
  # containerd's own NRI figures (plugin latency per operation) for make bench.
  address = '$IP:$CONTAINERD_METRICS_PORT'
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = 'localhost/nvmock-e2e/pause:local'
[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = ['$W/cdi']
  # Root here lacks CAP_SYS_RESOURCE; runc fails on CRI's oom_score_adj -998.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = '$(command -v runc)'
      Root = '$W/state/runc'
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc-userns]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc-userns.options]
      BinaryName = '$bin/runc-userns/runc'
      Root = '$W/state/runc-userns'
      SystemdCgroup = false
$nvidia
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['$W/cni/bin']
    conf_dir = '$W/cni/net.d'
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = '$W/nri/nri.sock'
  plugin_path = '$W/nri/plugins'
  plugin_config_path = '$W/nri/conf.d'
  # containerd's own validator (2.2+): a pod annotated
  # required-plugins.noderesource.dev: '["nvmock"]' is refused while the
  # plugin is down (docs/kubernetes.md). It rejects nothing else here.
  [plugins.'io.containerd.nri.v1.nri'.default_validator]
    enable = true
EOF
  cat >"$W/etc/crictl.yaml" <<EOF
runtime-endpoint: unix://$W/state/containerd.sock
image-endpoint: unix://$W/state/containerd.sock
timeout: 20
pull-image-on-create: false
disable-pull-on-run: true
EOF
}

containerd_start() {
  local netns=()
  [ -z "$NETNS" ] || netns=(nsenter "--net=/run/netns/$NETNS")
  rm -f "$W/nri/nri.sock"
  [ -d /run/containerd ] || { mkdir -p /run/containerd && touch "$W/made-run-containerd"; }
  # In the node's network namespace, containerd's shims, containers and
  # host-network pods are too.
  PATH=$bin:$PATH "${netns[@]}" setsid "$bin/containerd" --config "$W/etc/config.toml" >>"$W/logs/containerd.log" 2>&1 </dev/null &
  echo $! >"$W/containerd.pid"
  wait_for containerd 60 "$W/logs/containerd.log" cri version
  wait_for "containerd's NRI socket" 30 "$W/logs/containerd.log" test -S "$W/nri/nri.sock"
}

# ready: the plugin's /readyz answers 200 (registered with the runtime).
# Bash's /dev/tcp, so that no HTTP client needs installing.
ready() {
  local status
  exec 3<>"/dev/tcp/$IP/$PORT" || return 1
  printf 'GET /readyz HTTP/1.0\r\nHost: %s\r\n\r\n' "$IP" >&3
  read -r -t 1 status <&3
  exec 3<&-
  [[ $status == "HTTP/1."?" 200"* ]]
}

# chartpod runs the chart's pod from the image through CRI, as the kubelet
# would: the tested plugin is the shipped one.
chartpod() {
  "$BUILD/bin/chartpod" -cri "$W/state/containerd.sock" -chart "$repo/charts/nvmock" \
    -values "$W/etc/values.yaml" -node "$NODE" -dir "$W/chartpod" "$@"
}

# net_up: the peer node's network namespace, cabled to this machine.
net_up() {
  net_down
  ip netns add "$NETNS"
  ip link add "$VETH" type veth peer name eth0 netns "$NETNS"
  ip addr add 10.249.0.1/30 dev "$VETH" && ip link set "$VETH" up
  ip -n "$NETNS" addr add "$IP/30" dev eth0
  ip -n "$NETNS" link set eth0 up && ip -n "$NETNS" link set lo up
}

net_down() {
  [ -n "$NETNS" ] || return 0
  ip link del "$VETH" 2>/dev/null || true
  ip netns del "$NETNS" 2>/dev/null || true
}

# peer up|down: the second node, this script again with its settings.
peer() {
  [ -z "$PEER_OF" ] || die "the peer node has no peer of its own"
  case ${1:-} in
    up) alive "$W/containerd.pid" || die "no node running: hack/e2e-node.sh up first" ;;
    down) ;;
    *) die "usage: $0 peer up|down" ;;
  esac
  NVMOCK_E2E_PEER_OF=$W NVMOCK_E2E_DIR=$W-b "$0" "$1"
}

write_values() {
  cat >"$W/etc/values.yaml" <<EOF
pools:
  - name: e2e
    profile: $PROFILE
injection:
  namespaces: [${NAMESPACES//,/, }]
  acceptVolumeMounts: true
nri:
  socketPath: $W/nri/nri.sock
# Port faults on the storage HCAs, which the e2e InfiniBand tests of the
# compute fabric do not use (e2e/infiniband_test.go).
infiniband:
  faults:
    nvmock-e2e: [mlx5_10=down, "mlx5_4=symbol_error:5,link_downed:1"]
  slots: {nvmock-e2e: 0, nvmock-e2e-b: 1}
  peers: [$PEERS]
overlayRoot: $W/overlay
cdiDir: $W/cdi
nfdDir: $W/nfd
logLevel: info
EOF
}

plugin_start() {
  chartpod start >>"$W/logs/chartpod.log" 2>&1 || { tail -5 "$W/logs/chartpod.log" >&2; die "chartpod start failed"; }
  wait_for "the plugin container" 30 "$W/chartpod/logs/nri.log" ready
}

write_env() {
  cat >"$W/e2e.env.tmp" <<EOF
NVMOCK_E2E_DIR=$W
CONTAINERD_SOCK=$W/state/containerd.sock
STATE_DIR=$W/state
NRI_SOCK=$W/nri/nri.sock
OVERLAY_ROOT=$W/overlay
CDI_DIR=$W/cdi
POD_LOG_DIR=$W/podlogs
PLUGIN_LOG=$W/chartpod/logs/nri.log
PLUGIN_URL=http://$IP:$PORT
CONTAINERD_METRICS_URL=http://$IP:$CONTAINERD_METRICS_PORT/v1/metrics
NODE_NAME=$NODE
NAMESPACES=$NAMESPACES
PROFILE=$PROFILE
NODE_SCRIPT=$here/e2e-node.sh
NVIDIA_SMI=$W/overlay/driver/usr/bin/nvidia-smi
IMAGE_PREFIX=localhost/nvmock-e2e/
EOF
  mv "$W/e2e.env.tmp" "$W/e2e.env"
}

up() {
  [ "$(id -u)" = 0 ] || die "needs root (it runs containerd)"
  [ -x "$nvmock" ] && [ -f "$BUILD/nvmock-image.tar" ] || die "no $nvmock or $BUILD/nvmock-image.tar: run make image first"
  [ -e "$W" ] && down
  [ -n "$PEER_OF" ] || rm -rf "$BUILD/e2e-logs"
  local t0; t0=$(date +%s%N)
  install_tools
  mkdir -p "$W"/{etc,logs,podlogs,cdi,nfd,nri/plugins,nri/conf.d,cni/bin,cni/net.d}
  [ -z "$NETNS" ] || net_up
  go build -o "$BUILD/bin/chartpod" "$repo/hack/chartpod"
  write_config
  write_values
  local t; t=$(date +%s%N)
  containerd_start
  log "containerd up in $(ms "$t") ms"
  t=$(date +%s%N)
  local img
  if [ -n "$PEER_OF" ]; then
    # The first node's images, those the peer tests run.
    for img in pause glibc rdma; do
      "$bin/ctr" -a "$W/state/containerd.sock" -n k8s.io images import "$PEER_OF/img/$img.tar" >/dev/null 2>>"$W/logs/ctr.log" ||
        die "importing $PEER_OF/img/$img.tar failed (log: $W/logs/ctr.log)"
    done
  else
    W=$W CTR="$bin/ctr" "$here/e2e-images.sh" || die "building the test images failed"
  fi
  "$bin/ctr" -a "$W/state/containerd.sock" -n k8s.io images import "$BUILD/nvmock-image.tar" >/dev/null 2>>"$W/logs/ctr.log"
  log "test images and the nvmock image imported in $(ms "$t") ms"
  t=$(date +%s%N)
  log "running the chart's pod on $NODE: hostprep install ($PROFILE), then the plugin"
  chartpod up >"$W/logs/chartpod.log" 2>&1 || { cat "$W/logs/chartpod.log" >&2; die "the chart's pod did not start"; }
  wait_for "the plugin container" 30 "$W/chartpod/logs/nri.log" ready
  log "chart pod up in $(ms "$t") ms"
  write_env
  log "node up in $(ms "$t0") ms: CRI at $W/state/containerd.sock, env in $W/e2e.env"
}

down() {
  [ -n "$PEER_OF" ] || [ ! -e "$W-b" ] || peer down
  [ -e "$W" ] || { net_down; return 0; }
  set +e
  local failed=""
  if [ -S "$W/state/containerd.sock" ] && alive "$W/containerd.pid"; then
    # The chart's pod first, as a pod deletion: its preStop hook uninstalls.
    if [ -f "$W/chartpod/chartpod.json" ]; then
      chartpod down >>"$W/logs/chartpod.log" 2>&1 || failed="the chart pod's removal failed (log: $BUILD/e2e-logs/chartpod.log)"
      if [ -z "$failed" ] && [ -e "$W/overlay/driver" -o -e "$W/cdi/nvmock.io-gpu.yaml" ]; then
        failed="the chart's preStop hook left the overlay or its CDI spec behind"
      fi
    fi
    for p in $(cri pods -q 2>/dev/null); do cri stopp "$p"; cri rmp -f "$p"; done >/dev/null 2>&1
  fi
  stop_pid "$W/containerd.pid" TERM
  # Shims outlive containerd by design; ours are the ones on our socket.
  local p
  for p in /proc/[0-9]*; do
    { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -q "containerd-shim-runc-v2 .*$W/state/containerd.sock" && kill -9 "${p#/proc/}" 2>/dev/null
  done
  grep -o " $W/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null
  [ -x "$nvmock" ] && [ -d "$W/overlay" ] && "$nvmock" hostprep uninstall --root "$W/overlay" >/dev/null 2>&1
  if [ -f "$W/made-run-containerd" ]; then rmdir /run/containerd/s /run/containerd 2>/dev/null; fi
  # Logs outlive the node, in the build dir, for a failed run's post-mortem.
  # The peer's go to e2e-logs/nvmock-e2e-b.
  local logs=$BUILD/e2e-logs${PEER_OF:+/$NODE}
  mkdir -p "$logs" && rm -f "$logs"/*.log && cp "$W"/logs/*.log "$W"/chartpod/logs/*.log "$logs/" 2>/dev/null
  rm -rf "$W"
  net_down
  set -e
  [ -z "$failed" ] || die "$failed"
  log "down"
}

# demo: an unmodified container in an opted-in namespace runs nvidia-smi.
demo() {
  alive "$W/containerd.pid" || die "no node running: hack/e2e-node.sh up first"
  cat >"$W/etc/demo-pod.json" <<EOF
{"metadata": {"name": "demo", "namespace": "nvmock-e2e", "uid": "demo-uid"},
 "log_directory": "$W/podlogs/demo",
 "linux": {"security_context": {"namespace_options": {"network": 2}}}}
EOF
  cat >"$W/etc/demo-ctr.json" <<EOF
{"metadata": {"name": "smi"}, "image": {"image": "localhost/nvmock-e2e/glibc:local"},
 "command": ["nvidia-smi"], "log_path": "smi.log", "linux": {}}
EOF
  echo '$ crictl run demo-ctr.json demo-pod.json   # an unmodified Debian-glibc image in namespace nvmock-e2e; its command: nvidia-smi'
  local id i
  id=$(cri run "$W/etc/demo-ctr.json" "$W/etc/demo-pod.json" 2>>"$W/logs/crictl.log") ||
    die "crictl run failed (log: $W/logs/crictl.log)"
  for i in $(seq 200); do
    [ "$(cri inspect -o go-template --template '{{.status.state}}' "$id" 2>/dev/null)" = CONTAINER_EXITED ] && break
    sleep 0.05
  done
  cri logs "$id" 2>&1
}

# hack/k8s-node.sh sources this file for the pins and install_tools: define only.
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

case ${1:-} in
  up) up ;;
  demo) demo ;;
  down) down ;;
  plugin)
    case ${2:-} in
      start) plugin_start ;;
      stop|kill) chartpod "$2" >>"$W/logs/chartpod.log" 2>&1 || die "chartpod $2 failed (log: $W/logs/chartpod.log)" ;;
      *) die "usage: $0 plugin start|stop|kill" ;;
    esac ;;
  containerd)
    [ "${2:-}" = restart ] || die "usage: $0 containerd restart"
    stop_pid "$W/containerd.pid" TERM
    containerd_start ;;
  peer) peer "${2:-}" ;;
  *) die "usage: $0 up|down|demo|plugin start|stop|kill|containerd restart|peer up|down" ;;
esac
