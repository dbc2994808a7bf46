#!/usr/bin/env bash
# Runs the test suites and ends with one line: N passed, N failed, N skipped
# (also written to $NVMOCK_BUILD/test-summary.txt).
#   hack/test.sh       Go, C and tool tests, then, as root, the e2e suite on a
#                      real containerd and the Kubernetes suite on a real node
#                      (CI must be root: it fails otherwise)
#   hack/test.sh e2e   the e2e suite alone
# The e2e node is always taken down, even when a test fails or on Ctrl-C.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${NVMOCK_BUILD:-$PWD/build}
mkdir -p "$BUILD/bin"
go build -o "$BUILD/bin/testsum" ./hack/testsum || exit 1
tally=$(mktemp)
trap 'rm -f "$tally"' EXIT
sum() { "$BUILD/bin/testsum" -tally "$tally"; }
# fail NAME MESSAGE: count a failure that is not a Go test's.
fail() {
  echo "FAIL: $2"
  printf '{"Action":"fail","Package":"%s","Test":"setup"}\n' "$1" | sum >/dev/null
}
rc=0

if [ "${1:-all}" != e2e ]; then
  go test -json -count=1 -tags integration ./... 2>&1 | sum
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi

if [ "$(id -u)" = 0 ]; then
  trap 'hack/e2e-node.sh down; rm -f "$tally"' EXIT
  trap 'exit 130' INT TERM
  if hack/e2e-node.sh up; then
    go test -json -count=1 -tags e2e ./e2e/ 2>&1 | sum
    [ "${PIPESTATUS[0]}" = 0 ] || { rc=1; echo "e2e: containerd's and the plugin's logs are in $BUILD/e2e-logs"; }
  else
    rc=1
    fail e2e "the e2e node did not come up (hack/e2e-node.sh up, above)"
  fi
  hack/e2e-node.sh down
  trap 'rm -f "$tally"' EXIT
  # The Kubernetes node and its suite (e2e/k8s): k8s-e2e.sh holds the node's
  # lock and always takes it down.
  if [ "${1:-all}" != e2e ]; then
    hack/k8s-e2e.sh -tally "$tally" || { rc=1; echo "k8s: the node's and the suite's logs are in $BUILD/k8s-logs and $BUILD/k8s-e2e"; }
  fi
elif [ "${CI:-}" = true ] || [ "${1:-all}" = e2e ]; then
  rc=1
  fail e2e "the e2e suite needs root (it runs containerd); run as root"
else
  echo "e2e: not run (needs root); make e2e as root runs it"
fi

line=$("$BUILD/bin/testsum" -tally "$tally" -summary) || rc=1
echo "$line" | tee "$BUILD/test-summary.txt"
exit $rc
