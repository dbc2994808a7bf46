#!/usr/bin/env bash
# Installs the Debian packages the build and tests need, only those missing,
# so a second run is quick and touches nothing.
set -euo pipefail
# iptables and conntrack: the kubelet and kube-proxy of hack/k8s-node.sh; nftables and
# nfacct: its down removes the nf_tables tables iptables made, and kube-proxy's counters.
# pciutils and hwloc-nox: lspci and lstopo read the pcisim tree in the tests; musl-tools:
# the e2e musl image. python3-blessed, -psutil, -six, -pkg-resources: what gpustat imports.
# infiniband-diags, ibverbs-utils, ibverbs-providers: the real tools the InfiniBand planes
# are tested with (and mlx5's provider, which must not claim the mock HCAs); perftest and
# ucx-utils: traffic through the verbs provider; valgrind: a test that no freed verbs
# object is touched; libibverbs-dev and curl: building the verbs provider against
# rdma-core's source; python3-pyverbs: rdma-core's own verbs test suite, which it ships.
pkgs=(gcc libc6-dev binutils make python3 ca-certificates patchelf busybox-static iptables conntrack nftables nfacct pciutils hwloc-nox musl-tools python3-blessed python3-psutil python3-six python3-pkg-resources infiniband-diags ibverbs-utils ibverbs-providers perftest ucx-utils valgrind libibverbs-dev curl python3-pyverbs)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "install-deps: missing Debian packages: ${missing[*]}; run as root or install them" >&2
	exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
