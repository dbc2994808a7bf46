// Package e2e tests nvmock on a real containerd: hack/e2e-node.sh up starts
// containerd 2.4 with NRI and CDI, runc, the plugin (nvmock nri) and locally
// built images; the tests (build tag e2e) drive it through the CRI API and
// read what unmodified containers print. make e2e runs them; make test does
// too when run as root.
package e2e
