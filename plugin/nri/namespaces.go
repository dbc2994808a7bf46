package nri

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/plugin/inject"
)

// optedInSelector selects the namespaces whose pods are injected.
var optedInSelector = inject.InjectLabel + "=" + inject.InjectEnabled

// listOptedIn lists the namespaces labelled nvmock.io/inject=enabled with a
// plain GET, as hostprep labels nodes: one request does not need client-go.
func listOptedIn(ctx context.Context, c *hostprep.KubeClient) (map[string]bool, error) {
	u := c.Server + "/api/v1/namespaces?labelSelector=" + url.QueryEscape(optedInSelector)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("list namespaces: API server answered %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&list); err != nil {
		return nil, fmt.Errorf("list namespaces: decode: %w", err)
	}
	out := make(map[string]bool, len(list.Items))
	for _, it := range list.Items {
		if it.Metadata.Name != "" {
			out[it.Metadata.Name] = true
		}
	}
	return out, nil
}
