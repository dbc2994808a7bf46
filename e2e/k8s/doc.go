// Package k8s tests nvmock on a real one-node Kubernetes cluster:
// hack/k8s-node.sh up starts Kubernetes built from source on the e2e
// containerd (NRI and CDI on); the tests (build tag k8s) install the Helm
// chart with the Helm SDK, NVIDIA's device plugin and GPU feature discovery
// with NVIDIA's own chart, drive the cluster through client-go and read what
// unmodified containers print. hack/k8s-e2e.sh runs them, holding the
// machine's cluster lock.
//
// cluster_test.go holds TestMain and the helpers every test file shares.
package k8s
