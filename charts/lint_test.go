package charts

import (
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// TestLint is helm lint --strict through the SDK: no errors, no warnings.
// It lints the defaults and the two-pool fleet.
func TestLint(t *testing.T) {
	fleet, err := chartutil.ReadValues([]byte(fleetValues))
	if err != nil {
		t.Fatal(err)
	}
	for name, vals := range map[string]map[string]any{"default values": nil, "the fleet": fleet} {
		l := lint.All(chartDir, vals, releaseNS, true)
		for _, m := range l.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("helm lint with %s: %s", name, m)
			} else {
				t.Logf("helm lint with %s: %s", name, m)
			}
		}
	}
}

// Only the chart ships: the loader applies .helmignore as helm package does.
func TestChartShipsOnlyTheChart(t *testing.T) {
	c := loadChart(t)
	var files []string
	for _, f := range c.Raw {
		files = append(files, f.Name)
	}
	for _, f := range files {
		ok := f == "Chart.yaml" || f == "values.yaml" || f == "values.schema.json" || f == ".helmignore" ||
			strings.HasPrefix(f, "templates/") && (filepath.Ext(f) == ".yaml" || filepath.Ext(f) == ".tpl" || f == "templates/NOTES.txt")
		if !ok {
			t.Errorf("the chart would ship %s", f)
		}
	}
	if c.Metadata.APIVersion != "v2" || c.Metadata.Version != "0.1.0" || c.Metadata.AppVersion != "0.1.0" {
		t.Errorf("Chart.yaml: apiVersion %s, version %s, appVersion %s; want v2, 0.1.0, 0.1.0", c.Metadata.APIVersion, c.Metadata.Version, c.Metadata.AppVersion)
	}
}
