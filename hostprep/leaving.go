package hostprep

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
)

// Leaving says whether node leaves DaemonSet namespace/name's pool, so that
// a pod's preStop hook uninstalls only then. A rolling update, a pod delete
// or a drain stops the pod but not the DaemonSet, whose next pod installs
// the same overlay over the kept one; uninstalling there would delete the
// directory NVIDIA's device plugin has bind-mounted.
//
// The node leaves when the DaemonSet is gone or being deleted (helm
// uninstall) or no longer selects the node. On an error leave is true too,
// with err set: the caller uninstalls as before rather than leave a stale
// overlay because the API server was briefly unreachable.
func (c *KubeClient) Leaving(ctx context.Context, namespace, name, node string) (leave bool, reason string, err error) {
	dsName := namespace + "/" + name
	var ds struct {
		Metadata struct {
			DeletionTimestamp *string `json:"deletionTimestamp"`
		} `json:"metadata"`
		Spec struct {
			Template struct {
				Spec struct {
					NodeSelector map[string]string `json:"nodeSelector"`
					Affinity     *struct {
						NodeAffinity json.RawMessage `json:"nodeAffinity"`
					} `json:"affinity"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	found, err := c.get(ctx, "/apis/apps/v1/namespaces/"+url.PathEscape(namespace)+"/daemonsets/"+url.PathEscape(name), &ds)
	if err != nil {
		return true, "", fmt.Errorf("get DaemonSet %s: %w", dsName, err)
	}
	if !found {
		return true, fmt.Sprintf("DaemonSet %s is gone", dsName), nil
	}
	if ds.Metadata.DeletionTimestamp != nil {
		return true, fmt.Sprintf("DaemonSet %s is being deleted", dsName), nil
	}
	pod := ds.Spec.Template.Spec
	if len(pod.NodeSelector) > 0 {
		if node == "" {
			return true, "", fmt.Errorf("DaemonSet %s has a nodeSelector and the node has no name; pass --node-name or set NODE_NAME", dsName)
		}
		var n struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		found, err := c.get(ctx, "/api/v1/nodes/"+url.PathEscape(node), &n)
		if err != nil {
			return true, "", fmt.Errorf("get node %s: %w", node, err)
		}
		if !found {
			return true, fmt.Sprintf("node %s is gone", node), nil
		}
		keys := make([]string, 0, len(pod.NodeSelector))
		for k := range pod.NodeSelector {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if v, ok := n.Metadata.Labels[k]; !ok || v != pod.NodeSelector[k] {
				return true, fmt.Sprintf("DaemonSet %s no longer selects node %s: it wants %s=%s", dsName, node, k, pod.NodeSelector[k]), nil
			}
		}
	}
	// The chart places pods by nodeSelector alone. Node affinity someone
	// added by hand is not evaluated here: it counts as selecting, so the
	// overlay is kept (the mistake that costs least: a stale overlay on a
	// node the pool left, rather than a deleted one under a running device
	// plugin).
	if pod.Affinity != nil && len(pod.Affinity.NodeAffinity) > 0 && string(pod.Affinity.NodeAffinity) != "null" {
		return false, fmt.Sprintf("DaemonSet %s selects node %s by nodeSelector; its node affinity is not evaluated", dsName, node), nil
	}
	return false, fmt.Sprintf("DaemonSet %s selects node %s", dsName, node), nil
}

// get reads one object into v; found is false on 404.
func (c *KubeClient) get(ctx context.Context, path string, v any) (found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Server+path, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return false, nil
	}
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return false, fmt.Errorf("API server answered %s: %s", resp.Status, bytes.Join(bytes.Fields(msg), []byte(" ")))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return false, fmt.Errorf("decode %s: %w", path, err)
	}
	return true, nil
}
