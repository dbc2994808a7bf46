package nri

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/plugin/inject"
)

// DefaultNamespaceLabel selects the namespaces whose pods are injected.
const DefaultNamespaceLabel = inject.InjectLabel + "=" + inject.InjectEnabled

// labelPart is a label key's name or a label value; a key may carry a DNS
// subdomain prefix and a slash.
var (
	labelName   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	labelPrefix = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
)

// ValidateNamespaceLabel checks a KEY=VALUE namespace label.
func ValidateNamespaceLabel(s string) error {
	key, value, ok := strings.Cut(s, "=")
	name := key
	if prefix, n, slash := strings.Cut(key, "/"); slash {
		if !labelPrefix.MatchString(prefix) {
			return fmt.Errorf("namespace label %q: key prefix %q is not a DNS subdomain", s, prefix)
		}
		name = n
	}
	switch {
	case !ok:
		return fmt.Errorf("namespace label %q: want KEY=VALUE, e.g. %s", s, DefaultNamespaceLabel)
	case !labelName.MatchString(name):
		return fmt.Errorf("namespace label %q: key %q is not a label name (letters, digits, -_. inside, 63 at most)", s, key)
	case value != "" && !labelName.MatchString(value):
		return fmt.Errorf("namespace label %q: value %q is not a label value (letters, digits, -_. inside, 63 at most)", s, value)
	}
	return nil
}

// listOptedIn lists the namespaces with the label selector sel (KEY=VALUE)
// with a plain GET, as hostprep labels nodes: a list and a watch do not
// need client-go.
func listOptedIn(ctx context.Context, c *hostprep.KubeClient, sel string) (map[string]bool, error) {
	set, _, err := listOptedInAt(ctx, c, sel)
	return set, err
}

// listOptedInAt also returns the list's resourceVersion, where a watch starts.
func listOptedInAt(ctx context.Context, c *hostprep.KubeClient, sel string) (map[string]bool, string, error) {
	u := c.Server + "/api/v1/namespaces?labelSelector=" + url.QueryEscape(sel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, "", fmt.Errorf("list namespaces: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("list namespaces: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, "", fmt.Errorf("list namespaces: API server answered %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&list); err != nil {
		return nil, "", fmt.Errorf("list namespaces: decode: %w", err)
	}
	out := make(map[string]bool, len(list.Items))
	for _, it := range list.Items {
		if it.Metadata.Name != "" {
			out[it.Metadata.Name] = true
		}
	}
	return out, list.Metadata.ResourceVersion, nil
}

// watchOptedIn follows changes from resourceVersion rv until the stream
// ends or fails, calling update with each namespace that starts (true) or
// stops (false) matching the label. A label-selected watch reports a
// namespace that loses the label as DELETED.
func watchOptedIn(ctx context.Context, c *hostprep.KubeClient, sel, rv string, update func(name string, in bool)) error {
	q := url.Values{"labelSelector": {sel}, "watch": {"1"}, "resourceVersion": {rv}, "timeoutSeconds": {"300"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Server+"/api/v1/namespaces?"+q.Encode(), nil)
	if err != nil {
		return fmt.Errorf("watch namespaces: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	// The stream lives for minutes: no whole-request timeout here.
	resp, err := (&http.Client{Transport: c.HTTP.Transport}).Do(req)
	if err != nil {
		return fmt.Errorf("watch namespaces: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("watch namespaces: API server answered %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // the server ended the watch; list again
			}
			return fmt.Errorf("watch namespaces: %w", err)
		}
		switch ev.Type {
		case "ADDED", "MODIFIED":
			update(ev.Object.Metadata.Name, true)
		case "DELETED":
			update(ev.Object.Metadata.Name, false)
		case "ERROR":
			return fmt.Errorf("watch namespaces: the API server ended the watch with an error (resource version too old?)")
		}
	}
}
