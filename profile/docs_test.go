package profile

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// Every YAML example of docs/profiles.md loads: whole profiles as they
// are, fragments (a pcie or infiniband block) on a one-GPU h100.
func TestTheDocsExamplesLoad(t *testing.T) {
	data, err := os.ReadFile("../docs/profiles.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	var b strings.Builder
	in, start := false, 0
	for i, line := range strings.Split(string(data), "\n") {
		switch {
		case !in && line == "```yaml":
			in, start = true, i+2
			b.Reset()
		case in && line == "```":
			in = false
			blocks++
			src := b.String()
			if !strings.HasPrefix(src, "base:") && !strings.HasPrefix(src, "name:") {
				src = "base: h100\nname: doc\ngpus: 1\n" + src
			}
			if _, err := Parse(fmt.Sprintf("docs/profiles.md:%d", start), []byte(src)); err != nil {
				t.Errorf("the example at docs/profiles.md:%d does not load: %v", start, err)
			}
		case in:
			b.WriteString(line + "\n")
		}
	}
	if blocks < 3 {
		t.Errorf("%d YAML examples in docs/profiles.md; want the three it had at least", blocks)
	}
}
