package main

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// rendered is what chartpod needs of the chart: the one pool's DaemonSet
// and the ConfigMaps it mounts.
type rendered struct {
	ds         appsv1.DaemonSet
	configMaps map[string]corev1.ConfigMap
}

// render renders the chart as helm install would (values validated
// against the chart's schema) and picks the DaemonSet out.
func render(chartDir, valuesFile, release, namespace string) (*rendered, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", chartDir, err)
	}
	vals := map[string]any{}
	if valuesFile != "" {
		data, err := os.ReadFile(valuesFile)
		if err != nil {
			return nil, err
		}
		if vals, err = chartutil.ReadValues(data); err != nil {
			return nil, fmt.Errorf("values %s: %w", valuesFile, err)
		}
	}
	rv, err := chartutil.ToRenderValuesWithSchemaValidation(ch, vals,
		chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true}, chartutil.DefaultCapabilities, false)
	if err != nil {
		return nil, fmt.Errorf("values %s: %w", valuesFile, err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return nil, fmt.Errorf("render chart %s: %w", chartDir, err)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	r := &rendered{configMaps: map[string]corev1.ConfigMap{}}
	daemonSets := 0
	for _, n := range names {
		if !strings.HasSuffix(n, ".yaml") {
			continue
		}
		for _, doc := range bytes.Split([]byte(files[n]), []byte("\n---")) {
			var meta struct{ Kind string }
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				return nil, fmt.Errorf("%s: %w", n, err)
			}
			switch meta.Kind {
			case "DaemonSet":
				daemonSets++
				if err := yaml.UnmarshalStrict(doc, &r.ds); err != nil {
					return nil, fmt.Errorf("%s: %w", n, err)
				}
			case "ConfigMap":
				var cm corev1.ConfigMap
				if err := yaml.UnmarshalStrict(doc, &cm); err != nil {
					return nil, fmt.Errorf("%s: %w", n, err)
				}
				r.configMaps[cm.Name] = cm
			}
		}
	}
	if daemonSets != 1 {
		return nil, fmt.Errorf("chart %s rendered %d DaemonSets; chartpod runs one pool", chartDir, daemonSets)
	}
	return r, nil
}
