package hostprep

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nvmock/nvmock/libnvml/profile"
)

// Labels are what GPU feature discovery would put on a node with these GPUs
// (product and family sanitised as GFD does, memory in MiB); install applies
// them to the node and writes them as NFD's feature file. Profile validation
// has checked that the product's label is one Kubernetes accepts.
func Labels(p *profile.Profile) map[string]string {
	b := p.Board
	return map[string]string{
		"nvidia.com/gpu.present": "true",
		"nvidia.com/gpu.product": profile.ProductLabel(b.ProductName),
		"nvidia.com/gpu.count":   fmt.Sprint(p.GPUs),
		"nvidia.com/gpu.memory":  fmt.Sprint(uint64(b.Memory.Total) >> 20),
		"nvidia.com/gpu.family":  strings.ToLower(profile.ProductLabel(b.Architecture)),
	}
}

// ServiceAccountDir is where Kubernetes mounts a pod's API credentials.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// KubeClient changes node labels through the API server, and reads the
// DaemonSet and node uninstall asks about (Leaving). One PATCH and two GETs
// are all hostprep needs, so it speaks HTTP itself rather than pull in
// client-go.
type KubeClient struct {
	Server string // https://host:port
	Token  string
	HTTP   *http.Client
}

// InClusterClient is the client of the pod this runs in, from the service
// account Kubernetes mounts; ok is false outside a cluster.
func InClusterClient() (c *KubeClient, ok bool, err error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, false, nil
	}
	token, err := os.ReadFile(filepath.Join(ServiceAccountDir, "token"))
	if err != nil {
		return nil, true, fmt.Errorf("in-cluster credentials: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(ServiceAccountDir, "ca.crt"))
	if err != nil {
		return nil, true, fmt.Errorf("in-cluster credentials: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, true, fmt.Errorf("in-cluster credentials: %s/ca.crt holds no certificate", ServiceAccountDir)
	}
	return &KubeClient{
		Server: "https://" + net.JoinHostPort(host, port),
		Token:  strings.TrimSpace(string(token)),
		HTTP:   &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
	}, true, nil
}

// SetLabels sets labels on a node; a nil value removes that label.
func (c *KubeClient) SetLabels(ctx context.Context, node string, labels map[string]*string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, c.Server+"/api/v1/nodes/"+url.PathEscape(node), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("label node %s: %w", node, err)
	}
	req.Header.Set("Content-Type", "application/strategic-merge-patch+json")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("label node %s: %w", node, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("label node %s: API server answered %s: %s", node, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// labelPatch turns labels into a patch that sets them (or, with remove,
// deletes them).
func labelPatch(labels map[string]string, remove bool) map[string]*string {
	out := make(map[string]*string, len(labels))
	for k, v := range labels {
		if remove {
			out[k] = nil
		} else {
			v := v
			out[k] = &v
		}
	}
	return out
}

// ApplyLabels sets (or removes) the profile's labels on the node.
func (c *KubeClient) ApplyLabels(ctx context.Context, node string, p *profile.Profile, remove bool) error {
	return c.SetLabels(ctx, node, labelPatch(Labels(p), remove))
}

// RemoveLabels removes every label install sets, whatever their values.
func (c *KubeClient) RemoveLabels(ctx context.Context, node string) error {
	keys := map[string]*string{}
	for k := range Labels(&profile.Profile{}) {
		keys[k] = nil
	}
	return c.SetLabels(ctx, node, keys)
}

func sortedLines(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, labels[k])
	}
	return b.String()
}
