#!/usr/bin/env bash
# make demo: the real nvidia-smi on mock GPUs, from the library alone to an
# unmodified container on a real containerd. A script rather than make
# recipes, so the narration is plain text and not shell quoting.
#   hack/demo.sh BUILD NVIDIA_SMI
set -euo pipefail
build=$1 smi=$2
here=$(cd "$(dirname "$0")" && pwd)
nvmock=$build/bin/nvmock
lib=$build/driver/usr/lib64

say() { printf '\n$ %s\n' "$*"; }

say "nvidia-smi        # the real binary from Debian, the mock libnvidia-ml (8 x A100, the default)"
LD_LIBRARY_PATH=$lib "$smi"
say "nvidia-smi -L"
LD_LIBRARY_PATH=$lib "$smi" -L
say "nvmock exec --profile h100 -- nvidia-smi          # a private mock node: no env vars, /dev/nvidia*"
"$nvmock" exec --profile h100 -- nvidia-smi
say "nvmock exec --profile h100 -- nvidia-smi topo -m"
"$nvmock" exec --profile h100 -- nvidia-smi topo -m
go build -o "$build/bin/nvml-list" "$here/nvml-list"
say "nvmock exec --profile h100 -- nvml-list             # a go-nvml program, unmodified"
"$nvmock" exec --profile h100 -- "$build/bin/nvml-list"
say "nvmock exec -- sh -c '...'   # live GPUs: a load, an ECC error and a lost GPU, seen by nvidia-smi"
"$nvmock" exec -- sh -c "
  set -e
  echo '# nvmock ctl load all 80 --jitter 5; nvmock ctl xid 3 48; nvmock ctl proc add 0 \$\$ --memory 20GiB --name train.py'
  '$nvmock' ctl load all 80 --jitter 5
  '$nvmock' ctl xid 3 48
  '$nvmock' ctl proc add 0 \$\$ --memory 20GiB --name train.py
  nvidia-smi --query-gpu=index,utilization.gpu,power.draw,ecc.errors.uncorrected.volatile.total,memory.used --format=csv
  nvidia-smi | tail -5
  echo '# nvmock ctl xid 5 79      (GPU 5 falls off the bus)'
  '$nvmock' ctl xid 5 79
  nvidia-smi -L || true
"
say "nvmock exec --profile h100 -- sh -c '...'   # InfiniBand: the node's ConnectX-7s in a modelled 32-node fabric, Debian's tools"
"$nvmock" exec --profile h100 -- sh -c '
  ibstat mlx5_0 | head -14
  echo "# ibswitches | wc -l; ibhosts | wc -l"
  ibswitches -C mlx5_0 | wc -l; ibhosts -C mlx5_0 | wc -l
  echo "# ibping -C mlx5_0 -c 1 40     (a modelled node)"
  ibping -C mlx5_0 -c 1 40 | head -1
'

if [ "$(id -u)" != 0 ]; then
  echo "(as root, make demo ends with a real container on a real containerd)"
  exit 0
fi
say "NVMOCK_E2E_PROFILE=h100 hack/e2e-node.sh up   # a private containerd 2.4 with NRI and CDI, runc, and the Helm chart's pod from make image (2-5 min the first time)"
trap '"$here/e2e-node.sh" down 2>/dev/null' EXIT
if ! NVMOCK_E2E_PROFILE=h100 "$here/e2e-node.sh" up 2>"$build/e2e-up.log"; then
  cat "$build/e2e-up.log" >&2
  exit 1
fi
"$here/e2e-node.sh" demo
