// Package pki makes the certificates, keys and kubeconfigs of a test
// cluster: a CA, the API server's and the kubelet's serving certificates, a
// client certificate per component (embedded in its kubeconfig), and the
// service-account signing key. hack/k8s-node.sh (through hack/k8s/pki) and
// internal/kubetest both use it, so the two clusters trust the same way.
package pki
