// Package kubetest runs a real etcd and kube-apiserver (the binaries
// hack/k8s-node.sh builds) for a test binary: on free loopback ports, in the
// test's own temporary directory, with the PKI of internal/pki, torn down
// when the test ends. Tests get an admin client, and the in-cluster form of
// a ServiceAccount's credentials (a token file) with the chart's RBAC, so
// that they exercise what a pod of the chart would. It never touches the
// cluster of hack/k8s-node.sh, which uses fixed ports and its own directory.
package kubetest
