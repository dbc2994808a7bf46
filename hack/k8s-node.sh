#!/usr/bin/env bash
# A one-node Kubernetes cluster on this machine, built from source: no Docker,
# no kind, no registry.
#
#   hack/k8s-node.sh build     build etcd, Kubernetes, kubectl and the CNI plugins (once per version)
#   hack/k8s-node.sh up        build what is missing, start the cluster, wait for the node to be Ready
#   hack/k8s-node.sh smoke     a pod of the glibc test image runs to completion; kubectl logs
#   hack/k8s-node.sh kubectl ARGS...   kubectl with the cluster's admin kubeconfig
#   hack/k8s-node.sh down      stop all it started, undo its host changes, remove the dir
#
# Everything lives in $NVMOCK_K8S_DIR (default /tmp/nvmock-k8s; keep it short,
# unix socket paths are limited to 108 bytes): PKI, etcd, containerd (the e2e
# node's build, hack/e2e-node.sh) with NRI and CDI, the kubelet's root (DRA
# plugins register in $W/kubelet/plugins_registry), pod logs, CNI IPAM. Host
# state outside it that the components hard-wire, `up` records and `down`
# restores: shim sockets in /run/containerd/s, /var/log/containers links,
# /var/lib/cni/results, the kubelet's device plugin socket in
# /var/lib/kubelet/device-plugins, the bridge nvk8s0, iptables chains and
# nfacct counters, sysctls and the /nvmock-k8s cgroups. The test images
# (hack/e2e-images.sh) are imported: pods use them with imagePullPolicy: Never.
# Binaries are built from the Go module proxy into $NVMOCK_CACHE/k8s. `up`
# writes $W/k8s.env. Root only, one cluster per machine (fixed ports); the
# node's IP is the default route's source, or $NVMOCK_K8S_NODE_IP. Idempotent:
# `up` on a running cluster tears it down first; `down` on nothing does
# nothing; a failed or interrupted `up` tears down what it started. Logs
# outlive the cluster in $NVMOCK_BUILD/k8s-logs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

# The pins. containerd, crictl and runc are the e2e node's (hack/e2e-node.sh).
KUBERNETES_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
CNI_PLUGINS_VERSION=v1.10.0
CNI_PLUGINS="main/bridge main/loopback ipam/host-local meta/portmap"

W=${NVMOCK_K8S_DIR:-/tmp/nvmock-k8s}
CACHE=${NVMOCK_CACHE:-$repo/.cache}
BUILD=${NVMOCK_BUILD:-$repo/build}
NODE=nvmock-k8s
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
API_SERVICE_IP=10.96.0.1
BRIDGE=nvk8s0
CNI_NET=nvmock-k8s
CGROUP=nvmock-k8s # the kubelet's cgroupRoot, /nvmock-k8s in each v1 hierarchy
# Ports on 127.0.0.1 unless said: etcd client and peer, API server (all
# addresses), kubelet (node IP) and its healthz, kube-proxy metrics and healthz,
# controller-manager, scheduler.
PORTS="2379 2380 6443 10250 10248 10249 10256 10257 10259"
# What the kubelet (kernel and vm), kube-proxy (conntrack, route_localnet)
# and the bridge plugin (ip_forward) may set; up saves them, down restores them.
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward
net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables
net.bridge.bridge-nf-call-ip6tables net.netfilter.nf_conntrack_max
net.netfilter.nf_conntrack_tcp_timeout_established net.netfilter.nf_conntrack_tcp_timeout_close_wait"
# Host paths the components create if missing; down removes the ones up
# created, if empty. The kubelet's device plugin socket is hard-wired in
# /var/lib/kubelet/device-plugins, whatever its root dir. The last line:
# hostPaths that NVIDIA's device plugin chart hard-wires (its CDI and MPS
# dirs, GPU feature discovery's features.d), which the kubelet or
# containerd create when the Kubernetes suite (e2e/k8s) installs it.
HOST_DIRS="/run/containerd /run/containerd/s /run/containerd/fifo /var/log/containers /var/lib/cni
/var/lib/cni/results /var/lib/kubelet /var/lib/kubelet/device-plugins
/var/run/cdi /run/nvidia /run/nvidia/mps /run/nvidia/mps/shm /etc/kubernetes /etc/kubernetes/node-feature-discovery /etc/kubernetes/node-feature-discovery/features.d"
DEVICE_PLUGINS=/var/lib/kubelet/device-plugins

kbin=$CACHE/k8s/bin
cnibin=$CACHE/k8s/cni/bin
# The e2e node's tool dir (containerd, ctr, the shim, crictl).
ebin=$(source "$here/e2e-node.sh" && echo "$bin")
sock=$W/state/containerd.sock

log() { echo "k8s-node: $*" >&2; }
die() { echo "k8s-node: error: $*" >&2; exit 1; }
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
kc() { KUBECACHEDIR=$W/kubectl-cache "$kbin/kubectl" --kubeconfig "$W/admin.kubeconfig" "$@"; }
cri() { "$ebin/crictl" --config "$W/etc/crictl.yaml" "$@"; }

# check_dir: down removes $W, so it must be a dir of ours (up marks it) or none.
check_dir() {
  [[ $W =~ ^/[^/]+/[^/]+ ]] || die "NVMOCK_K8S_DIR=$W: want an absolute path two levels deep at least, like /tmp/nvmock-k8s"
  [ ${#sock} -lt 90 ] || die "NVMOCK_K8S_DIR=$W is too long for containerd's socket paths; use a short one"
  [ ! -e "$W" ] || [ -f "$W/.nvmock-k8s" ] || die "$W exists and is not this script's: choose another NVMOCK_K8S_DIR"
}

# ---------------------------------------------------------------- build

# wrapper DIR "PKG..." "MODULE VERSION"...: a module in DIR that requires
# the modules and imports the main packages (in a tools.go), so that `go
# build` can build those. `go install PKG@VERSION` cannot: Kubernetes' and
# etcd's go.mod replace their own modules with local paths. Generated into
# the cache: the repo keeps its one go.mod.
wrapper() {
  local dir=$1 imports=$2; shift 2
  rm -rf "$dir" && mkdir -p "$dir"
  {
    echo "module nvmock.local/$(basename "$dir")"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//')"
    echo
    echo "require ("
    printf '\t%s\n' "$@"
    echo ")"
  } >"$dir/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport (\n%s\n)\n' "$(printf '\t_ "%s"\n' $imports)" >"$dir/tools.go"
}

# timed NAME VERSION LOG CMD...: run CMD (output to LOG), report its wall and
# CPU time (the machine may be busy) in $CACHE/k8s/build-times.txt.
timed() {
  local name=$1 version=$2 logf=$3 tm TIMEFORMAT='%R %U %S'; shift 3
  tm=$( { time "$@" >"$logf" 2>&1; } 2>&1 ) || die "building $name failed (log: $logf)"
  set -- $tm
  tm="$1 s ($(awk -v u="$2" -v s="$3" 'BEGIN {printf "%.1f", u + s}') s CPU)"
  log "$name built in $tm"
  echo "$(date -u +%FT%TZ) $name $version $tm, load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$CACHE/k8s/build-times.txt"
}

# gobuild NAME PKG DIR LDFLAGS VERSION: one binary into $kbin, unless its stamp is there.
gobuild() {
  local name=$1 pkg=$2 dir=$3 ldflags=$4 version=$5
  [ -f "$kbin/.$name-$version" ] && return 0
  log "building $name $version"
  timed "$name" "$version" "$CACHE/k8s/logs/$name.build.log" env -C "$dir" GOWORK=off CGO_ENABLED=0 \
    go build -trimpath -ldflags "-s -w $ldflags" -o "$kbin/$name.tmp" "$pkg"
  mv "$kbin/$name.tmp" "$kbin/$name"
  rm -f "$kbin/.$name-"* && touch "$kbin/.$name-$version"
}

build_etcd() {
  local dir=$CACHE/k8s/src/etcd-$ETCD_VERSION
  [ -f "$kbin/.etcd-$ETCD_VERSION" ] && return 0
  wrapper "$dir" go.etcd.io/etcd/server/v3 "go.etcd.io/etcd/server/v3 $ETCD_VERSION"
  (cd "$dir" && GOWORK=off go mod tidy) >"$CACHE/k8s/logs/etcd.mod.log" 2>&1 ||
    die "go mod tidy for etcd failed (log: $CACHE/k8s/logs/etcd.mod.log)"
  gobuild etcd go.etcd.io/etcd/server/v3 "$dir" "" "$ETCD_VERSION"
}

# Kubernetes' staging modules (k8s.io/api, client-go...) are published as
# v0.MINOR.PATCH; its go.mod points them at ./staging, the wrapper at those.
build_kubernetes() {
  local v=$KUBERNETES_VERSION dir=$CACHE/k8s/src/kubernetes-$KUBERNETES_VERSION
  local staging=v0.${v#v1.} minor=${v#v1.} n all=1 ldflags="" kmod
  minor=${minor%%.*}
  for n in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    [ -f "$kbin/.$n-$v" ] || all=0
  done
  [ $all = 1 ] && return 0
  if [ ! -f "$dir/go.sum" ] || ! grep -q "k8s.io/kubernetes $v" "$dir/go.mod"; then
    kmod=$(cd / && GOWORK=off go mod download -json "k8s.io/kubernetes@$v" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p') ||
      die "go mod download k8s.io/kubernetes@$v failed"
    wrapper "$dir" "$(printf 'k8s.io/kubernetes/cmd/%s ' kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)" \
      "k8s.io/kubernetes $v"
    { echo; echo "replace ("
      awk -v s="$staging" '$2 == "=>" && $3 ~ /^\.\/staging\// {print "\t" $1 " => " $1 " " s}' "$kmod"
      echo ")"; } >>"$dir/go.mod"
    log "resolving Kubernetes $v's modules (go mod tidy)"
    (cd "$dir" && GOWORK=off go mod tidy) >"$CACHE/k8s/logs/kubernetes.mod.log" 2>&1 ||
      die "go mod tidy for Kubernetes failed (log: $CACHE/k8s/logs/kubernetes.mod.log)"
  fi
  # As Kubernetes' own build stamps its version (hack/lib/version.sh).
  for n in gitVersion=$v gitMajor=1 gitMinor=$minor gitTreeState=clean; do
    ldflags+=" -X k8s.io/component-base/version.$n -X k8s.io/client-go/pkg/version.$n"
  done
  for n in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    gobuild "$n" "k8s.io/kubernetes/cmd/$n" "$dir" "$ldflags" "$v"
  done
}

build_cni() {
  [ -f "$cnibin/.cni-plugins-$CNI_PLUGINS_VERSION" ] && return 0
  local p pkgs=()
  for p in $CNI_PLUGINS; do pkgs+=("github.com/containernetworking/plugins/plugins/$p@$CNI_PLUGINS_VERSION"); done
  log "building the CNI plugins $CNI_PLUGINS_VERSION"
  mkdir -p "$cnibin"
  timed cni-plugins "$CNI_PLUGINS_VERSION" "$CACHE/k8s/logs/cni-plugins.build.log" \
    env -C / GOBIN="$cnibin" GOWORK=off CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "${pkgs[@]}"
  rm -f "$cnibin"/.cni-plugins-* && touch "$cnibin/.cni-plugins-$CNI_PLUGINS_VERSION"
}

# build: all binaries, each once per version, at low priority (the machine
# is shared). They use the machine's Go build cache, so a fresh clone on a
# machine that built them before (CI with a warm cache) rebuilds in minutes,
# not the half hour of a cold build.
build() {
  mkdir -p "$kbin" "$CACHE/k8s/logs"
  renice -n 10 -p $BASHPID >/dev/null
  build_etcd
  build_kubernetes
  build_cni
  # containerd, its shim, ctr, crictl and runc: the e2e node's pins and build.
  (source "$here/e2e-node.sh" && install_tools)
}

# ---------------------------------------------------------------- processes

# start NAME BIN ARGS...: a daemon in its own session (Ctrl-C in the terminal
# does not reach it), its pid and binary in $W/pids/NAME.
start() {
  local name=$1 exe=$2; shift 2
  setsid "$exe" "$@" >>"$W/logs/$name.log" 2>&1 </dev/null &
  echo "$! $(realpath -m "$exe")" >"$W/pids/$name"
}

# ours PID EXE: PID still runs EXE. pid_max is 32768 here and pids wrap
# within minutes during builds: a recorded pid may be somebody else's now.
# /proc/PID/exe has symlinks resolved: a cache reached through one (a git
# worktree's .cache) left the control plane running after down.
ours() {
  local exe want
  exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
  want=$(realpath -m "$2")
  [ "$exe" = "$want" ] || [ "$exe" = "$want (deleted)" ]
}

running() {
  local pid exe
  [ -f "$W/pids/$1" ] && read -r pid exe <"$W/pids/$1" && ours "$pid" "$exe"
}

# stop NAME: SIGTERM, up to 10 s, then SIGKILL; only while the pid is ours.
stop() {
  local f=$W/pids/$1 pid exe i
  [ -f "$f" ] || return 0
  read -r pid exe <"$f"
  if ours "$pid" "$exe"; then
    kill "$pid" 2>/dev/null
    for i in $(seq 200); do ours "$pid" "$exe" || break; sleep 0.05; done
    ours "$pid" "$exe" && kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$f"
}

# wait_for WHAT SECONDS LOG CMD...: poll CMD every 100 ms; die with the log's tail.
wait_for() {
  local what=$1 secs=$2 logf=$3; shift 3
  local end=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$end" ]; then
      tail -n 20 "$logf" >&2 || true
      die "$what not ready after ${secs}s (log above: $logf)"
    fi
    sleep 0.1
  done
}

# http_ok PORT PATH: a plain-HTTP GET on 127.0.0.1 answers 200 (bash's
# /dev/tcp, so that no HTTP client needs installing).
http_ok() {
  local status
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
  read -r -t 2 status <&3
  exec 3<&-
  [[ $status == "HTTP/1."?" 200"* ]]
}

# ---------------------------------------------------------------- host state

node_ip() {
  local ip=${NVMOCK_K8S_NODE_IP:-}
  [ -n "$ip" ] || ip=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
  [ -n "$ip" ] || ip=$(ip -4 -o addr show scope global | awk '{sub(/\/.*/, "", $4); print $4; exit}')
  [ -n "$ip" ] || die "no IPv4 address for the node; set NVMOCK_K8S_NODE_IP"
  echo "$ip"
}

cgroup2() { [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; }

# The cgroups under the kubelet's cgroupRoot, in every hierarchy (on cgroup
# v1 also the hybrid unified one, where runc mirrors them).
cgroup_dirs() { ls -d /sys/fs/cgroup/$CGROUP /sys/fs/cgroup/*/$CGROUP 2>/dev/null || true; }

# preflight: what would make the cluster fight with something else here.
preflight() {
  local p owner
  for p in $PORTS; do
    owner=$(ss -Hltnp "( sport = :$p )" 2>/dev/null | head -n 1)
    [ -z "$owner" ] || die "port $p is taken: $owner"
  done
  ! ip link show "$BRIDGE" >/dev/null 2>&1 ||
    die "the bridge $BRIDGE exists (a cluster that was not taken down?); remove it: ip link del $BRIDGE"
  [ -z "$(cgroup_dirs)" ] ||
    die "cgroups of a cluster that was not taken down exist; remove them: find $(cgroup_dirs | xargs) -depth -type d -exec rmdir {} +"
  ! ss -Hxl | grep -q " $DEVICE_PLUGINS/kubelet.sock " ||
    die "another kubelet serves $DEVICE_PLUGINS/kubelet.sock; take it down first"
  # down removes the KUBE-* chains, and kube-proxy --cleanup its rules: only right if none were here.
  ! { iptables-save; ip6tables-save; } 2>/dev/null | grep -q '^:KUBE-' ||
    die "iptables has KUBE-* chains of another Kubernetes node (iptables-save | grep KUBE-); take it down first"
}

# save_host_state: what down restores. Before anything is started.
save_host_state() {
  local d
  mkdir -p "$W/host"
  for d in $HOST_DIRS; do [ -e "$d" ] && echo "$d"; done >"$W/host/dirs" || true
  # shellcheck disable=SC2086
  sysctl -e $SYSCTLS >"$W/host/sysctl" 2>/dev/null || true
  iptables-save >"$W/host/iptables" 2>/dev/null || true
  ip6tables-save >"$W/host/ip6tables" 2>/dev/null || true
  nfacct_names >"$W/host/nfacct"
}

# kube-proxy's packet counters (nfacct objects), which its --cleanup leaves.
nfacct_names() { nfacct list 2>/dev/null | sed -n 's/.*} = \(.*\);$/\1/p' || true; }
nfacct_restore() {
  local n
  for n in $(nfacct_names); do
    grep -qxF "$n" "$W/host/nfacct" 2>/dev/null || { nfacct delete "$n" && echo "removed the nfacct counter $n"; }
  done
}

# iptables_restore: remove the KUBE-* and CNI-* chains that were not there at
# up, and the rules elsewhere that jump to them (kube-proxy --cleanup has
# removed its own by then; the bridge plugin's go with each pod's CNI DEL).
# With iptables' nf_tables backend, then the tables that iptables created
# for us and that are empty again.
iptables_restore() {
  local ipt fam t new alt rule c
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for t in $("$ipt-save" 2>/dev/null | sed -n 's/^\*//p'); do
      new=$("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE|CNI)-/ {print $2}' |
        grep -vxF -f <(sed -n "/^\*$t\$/,/^COMMIT/s/^:\([^ ]*\) .*/\1/p" "$W/host/$ipt" 2>/dev/null; echo '') || true)
      [ -n "$new" ] || continue
      alt=$(echo $new | tr ' ' '|')
      # Jumps into the new chains from chains that stay (quoted comments: eval).
      "$ipt" -t "$t" -S | grep -E -- "^-A .* -j ($alt)( |\$)" | grep -vE "^-A ($alt) " |
        while read -r rule; do eval "\"\$ipt\" -t \"\$t\" -D ${rule#-A }"; done
      for c in $new; do "$ipt" -t "$t" -F "$c"; done
      for c in $new; do "$ipt" -t "$t" -X "$c" && echo "removed $ipt $t chain $c"; done
    done
    [[ $("$ipt" --version) == *nf_tables* ]] && command -v nft >/dev/null || continue
    fam=ip && [ "$ipt" = ip6tables ] && fam=ip6
    for t in $("$ipt-save" 2>/dev/null | sed -n 's/^\*//p'); do
      grep -qx "\*$t" "$W/host/$ipt" 2>/dev/null && continue
      [ -z "$("$ipt" -t "$t" -S | grep -v '^-P [A-Z]* ACCEPT$')" ] && nft delete table "$fam" "$t" &&
        echo "removed the nf_tables table $fam $t"
    done
  done
}

# shim_sockets: containerd's shims listen on /run/containerd/s/<sha256 of
# "<containerd address>/<namespace>/<id>">, whatever containerd's state dir
# (containerd's pkg/shim SocketAddress). Ours are those on our address;
# another containerd (the e2e node's) may have its own there.
shim_sockets() {
  local p args id ns
  for p in /proc/[0-9]*; do
    args=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    [[ $args == *containerd-shim-runc-v2\ *"-address $sock "* ]] || continue
    id=$(sed -n 's/.* -id \([^ ]*\).*/\1/p' <<<"$args")
    ns=$(sed -n 's/.* -namespace \([^ ]*\).*/\1/p' <<<"$args")
    echo "${p#/proc/} /run/containerd/s/$(printf '%s' "$sock/$ns/$id" | sha256sum | cut -d' ' -f1)"
  done
}

# ---------------------------------------------------------------- config

write_config() {
  local ip=$1
  cat >"$W/etc/containerd.toml" <<EOF
version = 3
root = '$W/root'
state = '$W/state'
[grpc]
  address = '$sock'
[ttrpc]
  address = '$sock.ttrpc'
[plugins.'io.containerd.internal.v1.opt']
  # Default /opt/containerd.
  path = '$W/opt'
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    # No registry: the e2e pause image, imported.
    sandbox = 'localhost/nvmock-e2e/pause:local'
[plugins.'io.containerd.cri.v1.runtime']
  # CDI is always on in containerd 2.x (its enable_cdi key is gone).
  cdi_spec_dirs = ['$W/cdi']
  # Root here lacks CAP_SYS_RESOURCE; runc fails on CRI's oom_score_adj -998.
  restrict_oom_score_adj = true
  # Pod network namespaces under $W/state, not /run/netns.
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = '$(command -v runc)'
      Root = '$W/state/runc'
      SystemdCgroup = false
  # NVIDIA's runtime in CDI mode (nvidia_runtime in hack/e2e-node.sh).
$(w=$W && source "$here/e2e-node.sh" && nvidia_runtime "$w")
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['$cnibin']
    conf_dir = '$W/cni/net.d'
[plugins.'io.containerd.nri.v1.nri']
  # For the nvmock NRI plugin (hack/e2e-node.sh runs it the same way).
  disable = false
  socket_path = '$W/nri/nri.sock'
  plugin_path = '$W/nri/plugins'
  plugin_config_path = '$W/nri/conf.d'
  # As on the e2e node: pods may require the plugin (docs/kubernetes.md).
  [plugins.'io.containerd.nri.v1.nri'.default_validator]
    enable = true
EOF
  cat >"$W/etc/crictl.yaml" <<EOF
runtime-endpoint: unix://$sock
image-endpoint: unix://$sock
timeout: 20
# No registry: the images are imported.
pull-image-on-create: false
disable-pull-on-run: true
EOF
  cat >"$W/cni/net.d/10-$CNI_NET.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "$CNI_NET", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$W/cni/ipam",
            "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
  cat >"$W/etc/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $W/pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $W/pki/kubelet-serving.crt
tlsPrivateKeyFile: $W/pki/kubelet-serving.key
containerRuntimeEndpoint: unix://$sock
# cgroup v1 (deprecated since 1.35, refused unless failCgroupV1: false),
# no systemd: cgroupfs under our own root, made by up in every hierarchy.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP
failSwapOn: false
podLogsDir: $W/podlogs
volumePluginDir: $W/kubelet/volume-plugins
# No iptables chains of the kubelet's own (KUBE-FIREWALL guards route_localnet,
# which kube-proxy leaves alone here).
makeIPTablesUtilChains: false
# A test node on a shared disk: no evictions, no image garbage collection.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
EOF
}

# ---------------------------------------------------------------- up, down

up() {
  check_dir
  [ "$(id -u)" = 0 ] || die "needs root (it runs containerd and the kubelet)"
  [ -e "$W" ] && down
  "$here/install-deps.sh"
  local t0 t ip
  t=$(date +%s%N)
  (build)
  log "tools ready in $(ms "$t") ms"
  preflight
  ip=$(node_ip)

  t0=$(date +%s%N)
  # From here on, a failure or Ctrl-C takes down what was started.
  trap 'rc=$?; set +e; trap - EXIT; [ $rc = 0 ] || { log "up failed; taking down what it started"; stop_images; down; }; exit $rc' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  mkdir -p "$W" && touch "$W/.nvmock-k8s"
  # Volumes with mountPropagation (NVIDIA's DRA driver: its driver root
  # HostToContainer, its plugins dir Bidirectional) need their host path on a
  # shared or slave mount, as / is under systemd; here / may be private.
  mount --bind "$W" "$W" && mount --make-shared "$W"
  mkdir -p "$W"/{etc,logs,pids,podlogs,cdi,nri/plugins,nri/conf.d,cni/net.d,cni/ipam,kubelet}
  save_host_state
  go build -o "$BUILD/bin/k8s-pki" "$here/k8s/pki"
  "$BUILD/bin/k8s-pki" -dir "$W/pki" -node "$NODE" -node-ip "$ip" -service-ip "$API_SERVICE_IP" -server "https://127.0.0.1:6443"
  ln -s pki/admin.kubeconfig "$W/admin.kubeconfig"
  write_config "$ip"
  if cgroup2; then
    mkdir -p "/sys/fs/cgroup/$CGROUP"
  else
    local h
    for h in /sys/fs/cgroup/*/; do [ "$h" = /sys/fs/cgroup/unified/ ] || mkdir -p "$h$CGROUP"; done
    cp /sys/fs/cgroup/cpuset/cpuset.cpus "/sys/fs/cgroup/cpuset/$CGROUP/cpuset.cpus"
    cp /sys/fs/cgroup/cpuset/cpuset.mems "/sys/fs/cgroup/cpuset/$CGROUP/cpuset.mems"
  fi

  start etcd "$kbin/etcd" --name "$NODE" --data-dir "$W/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$NODE=http://127.0.0.1:2380"
  PATH=$ebin:$PATH start containerd "$ebin/containerd" --config "$W/etc/containerd.toml"
  wait_for etcd 60 "$W/logs/etcd.log" http_ok 2379 /health
  start kube-apiserver "$kbin/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=0.0.0.0 --secure-port=6443 --advertise-address="$ip" \
    --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --cert-dir="$W/pki/apiserver" --client-ca-file="$W/pki/ca.crt" \
    --tls-cert-file="$W/pki/apiserver.crt" --tls-private-key-file="$W/pki/apiserver.key" \
    --kubelet-client-certificate="$W/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$W/pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$W/pki/ca.crt" \
    --kubelet-preferred-address-types=InternalIP,Hostname \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$W/pki/sa.pub" --service-account-signing-key-file="$W/pki/sa.key"
  wait_for containerd 60 "$W/logs/containerd.log" cri version
  # The test images, while the API server starts; in a process group of
  # their own, so that a failed up can stop the builds.
  W=$W CTR=$ebin/ctr setsid "$here/e2e-images.sh" >"$W/logs/images.log" 2>&1 </dev/null &
  images=$!
  wait_for kube-apiserver 120 "$W/logs/kube-apiserver.log" kc get --raw /readyz
  log "API server ready at $(ms "$t0") ms"
  start kube-controller-manager "$kbin/kube-controller-manager" \
    --kubeconfig="$W/pki/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$W/pki/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$W/pki/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --cert-dir="$W/pki/controller-manager" --leader-elect=false \
    --use-service-account-credentials=true --service-account-private-key-file="$W/pki/sa.key" \
    --root-ca-file="$W/pki/ca.crt" --cluster-signing-cert-file="$W/pki/ca.crt" \
    --cluster-signing-key-file="$W/pki/ca.key" --service-cluster-ip-range="$SERVICE_CIDR" \
    --flex-volume-plugin-dir="$W/kcm-volume-plugins"
  start kube-scheduler "$kbin/kube-scheduler" --kubeconfig="$W/pki/scheduler.kubeconfig" \
    --authentication-kubeconfig="$W/pki/scheduler.kubeconfig" \
    --authorization-kubeconfig="$W/pki/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --cert-dir="$W/pki/scheduler" --leader-elect=false
  start kubelet "$kbin/kubelet" --config="$W/etc/kubelet.yaml" --kubeconfig="$W/pki/kubelet.kubeconfig" \
    --root-dir="$W/kubelet" --cert-dir="$W/kubelet/pki" --hostname-override="$NODE" --node-ip="$ip"
  # iptables mode; route_localnet and the conntrack sysctls stay as they are.
  start kube-proxy "$kbin/kube-proxy" --kubeconfig="$W/pki/kube-proxy.kubeconfig" \
    --hostname-override="$NODE" --proxy-mode=iptables --cluster-cidr="$POD_CIDR" \
    --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 \
    --iptables-localhost-nodeports=false --conntrack-max-per-core=0 \
    --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0
  kc wait --for=create "node/$NODE" --timeout=120s >/dev/null ||
    { tail -n 20 "$W/logs/kubelet.log" >&2; die "the kubelet did not register the node (log: $W/logs/kubelet.log)"; }
  kc wait --for=condition=Ready "node/$NODE" --timeout=120s >/dev/null ||
    { tail -n 20 "$W/logs/kubelet.log" >&2; die "the node is not Ready (log: $W/logs/kubelet.log)"; }
  log "node $NODE Ready at $(ms "$t0") ms"
  # Pods need their namespace's service account, which the controller-manager makes.
  kc wait --for=create serviceaccount/default --timeout=60s >/dev/null ||
    die "no default service account (log: $W/logs/kube-controller-manager.log)"
  log "default service account at $(ms "$t0") ms"
  wait "$images" || { images=""; tail -n 20 "$W/logs/images.log" >&2; die "building the test images failed (log: $W/logs/images.log)"; }
  images=""
  log "test images imported at $(ms "$t0") ms"
  write_env "$ip"
  trap - EXIT INT TERM
  log "up in $(ms "$t0") ms: KUBECONFIG=$W/admin.kubeconfig (or hack/k8s-node.sh kubectl ...), env in $W/k8s.env"
}

# stop_images: the image builds of a failed up (their process group).
images=""
stop_images() {
  [ -n "$images" ] && kill -0 "$images" 2>/dev/null || return 0
  kill -TERM -- "-$images" 2>/dev/null
  wait "$images" 2>/dev/null || true
  images=""
}

write_env() {
  cat >"$W/k8s.env.tmp" <<EOF
NVMOCK_K8S_DIR=$W
KUBECONFIG=$W/admin.kubeconfig
KUBECTL=$kbin/kubectl
KUBERNETES_VERSION=$KUBERNETES_VERSION
NODE_NAME=$NODE
NODE_IP=$1
CONTAINERD_SOCK=$sock
NRI_SOCK=$W/nri/nri.sock
CDI_DIR=$W/cdi
KUBELET_ROOT=$W/kubelet
POD_LOG_DIR=$W/podlogs
IMAGE_PREFIX=localhost/nvmock-e2e/
NODE_SCRIPT=$here/k8s-node.sh
CTR=$ebin/ctr
CRICTL=$ebin/crictl
LOG_DIR=$W/logs
EOF
  mv "$W/k8s.env.tmp" "$W/k8s.env"
}

down() {
  [ -e "$W" ] || return 0
  check_dir
  set +e
  local t p s d pid
  t=$(date +%s%N)
  stop kubelet
  stop kube-proxy
  # Each pod's sandbox stop runs CNI DEL: its veth, its IP, its masquerade rules.
  if running containerd; then
    for p in $(cri pods -q 2>/dev/null); do cri stopp "$p"; cri rmp -f "$p"; done >>"$W/logs/down.log" 2>&1
  fi
  stop kube-controller-manager
  stop kube-scheduler
  stop kube-apiserver
  stop etcd
  stop containerd
  # What outlives containerd: shims (by design), and containers if a pod
  # could not be removed. Ours are on our socket, and in our cgroups.
  shim_sockets | while read -r pid s; do
    ours "$pid" "$ebin/containerd-shim-runc-v2" && kill -9 "$pid"
    rm -f "$s"
  done
  for d in $(cgroup_dirs); do
    find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -9 2>/dev/null
  done
  for p in 1 2 3; do
    awk -v w="$W/" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null
  done
  [ -x "$kbin/kube-proxy" ] && "$kbin/kube-proxy" --cleanup >>"$W/logs/down.log" 2>&1
  iptables_restore >>"$W/logs/down.log" 2>&1
  nfacct_restore >>"$W/logs/down.log" 2>&1
  ip link del "$BRIDGE" 2>/dev/null
  for d in $(cgroup_dirs); do
    for p in 1 2 3 4 5; do find "$d" -depth -type d -exec rmdir {} + 2>/dev/null; [ -e "$d" ] || break; sleep 0.2; done
  done
  find /var/log/containers -maxdepth 1 -type l -lname "$W/*" -delete 2>/dev/null
  # libcni's result cache: <network>-<sandbox>-<interface>, ours and the loopback's.
  for s in /var/lib/cni/results/"$CNI_NET"-*; do
    [ -e "$s" ] || continue
    p=${s#*/"$CNI_NET"-} && rm -f "$s" "/var/lib/cni/results/cni-loopback-${p%-*}-lo"
  done
  # No record: up stopped before it started anything.
  if [ -f "$W/host/dirs" ]; then
    # The device plugin dir: all ours if up made it (with the sockets of the
    # device plugins that ran in the cluster), else the kubelet's own files.
    if grep -qxF "$DEVICE_PLUGINS" "$W/host/dirs"; then
      rm -f "$DEVICE_PLUGINS/kubelet.sock" "$DEVICE_PLUGINS/kubelet_internal_checkpoint"
    else
      rm -rf "$DEVICE_PLUGINS"
    fi
    for d in $(echo $HOST_DIRS | tr ' ' '\n' | tac); do
      grep -qxF "$d" "$W/host/dirs" || rmdir "$d" 2>/dev/null
    done
  fi
  [ -f "$W/host/sysctl" ] && sysctl -q -p "$W/host/sysctl" >/dev/null 2>>"$W/logs/down.log"
  # Logs outlive the cluster, in the build dir, for a failed run's post-mortem.
  rm -rf "$BUILD/k8s-logs" && mkdir -p "$BUILD/k8s-logs" && cp "$W"/logs/*.log "$BUILD/k8s-logs/" 2>/dev/null
  # up's shared bind of $W onto itself (the same files: nothing moves).
  awk -v w="$W" '$2 == w {found = 1} END {exit !found}' /proc/self/mounts && umount -l "$W"
  rm -rf "$W"
  # Anything left is a bug of this script: say so.
  for d in $(cgroup_dirs); do log "warning: cgroup $d is left"; done
  ip link show "$BRIDGE" >/dev/null 2>&1 && log "warning: the bridge $BRIDGE is left"
  set -e
  log "down in $(ms "$t") ms (logs in $BUILD/k8s-logs)"
}

# smoke: a pod of the glibc test image, on the pod network, runs to
# completion; it reads its service-account token's namespace and reaches the
# API server through the kubernetes Service (kube-proxy).
smoke() {
  [ -f "$W/k8s.env" ] || die "no cluster: hack/k8s-node.sh up first"
  local t out
  t=$(date +%s%N)
  kc delete pod nvmock-smoke --ignore-not-found --wait=true >/dev/null
  kc apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: nvmock-smoke}
spec:
  restartPolicy: Never
  containers:
  - name: smoke
    image: localhost/nvmock-e2e/glibc:local
    imagePullPolicy: Never
    command: [/bin/bash, -c]
    args:
    - |
      echo "smoke: $(id -un) in namespace $(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)"
      (exec 3<>/dev/tcp/$KUBERNETES_SERVICE_HOST/$KUBERNETES_SERVICE_PORT) && echo "smoke: API server reachable at $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"
EOF
  kc wait --for=jsonpath='{.status.phase}'=Succeeded pod/nvmock-smoke --timeout=60s >/dev/null ||
    { kc describe pod nvmock-smoke >&2; die "the smoke pod did not succeed"; }
  out=$(kc logs nvmock-smoke)
  echo "$out"
  echo "pod IP: $(kc get pod nvmock-smoke -o jsonpath='{.status.podIP}')"
  grep -q "API server reachable" <<<"$out" || die "the smoke pod did not reach the API server"
  kc delete pod nvmock-smoke --wait=false >/dev/null
  log "smoke passed in $(ms "$t") ms"
}

main() {
  case ${1:-} in
    build) check_dir; (build) ;;
    up) up ;;
    down) down ;;
    smoke) smoke ;;
    kubectl)
      shift
      [ -f "$W/admin.kubeconfig" ] || die "no cluster: hack/k8s-node.sh up first"
      kc "$@" ;;
    *) die "usage: $0 build|up|down|smoke|kubectl ARGS..." ;;
  esac
}

# One line: the script may be edited while it runs.
main "$@"; exit $?
