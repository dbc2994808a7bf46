package profile

import (
	"regexp"
	"strconv"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
)

var (
	pathPart = regexp.MustCompile(`^([^.\[\]]+)((?:\[\d+\])*)$`)
	mapKey   = regexp.MustCompile(`\["([^".]*)"\]`)
)

// lineOf finds the line of a field path such as "board.memory.total" or
// "topology.busIds[2]" in YAML source, or 0. sigs.k8s.io/yaml decodes
// through JSON and keeps no positions, so errors look the line up here.
// A field the source leaves out (one that is required) is at the line of
// the nearest part of its path that is there, below the top.
func lineOf(data []byte, field string) int {
	var doc yaml3.Node
	if field == "" || yaml3.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return 0
	}
	n := doc.Content[0]
	line := 0
	// A map's key, adapters["0x101b"], is one more step down.
	field = mapKey.ReplaceAllString(field, ".$1")
	for _, part := range strings.Split(field, ".") {
		m := pathPart.FindStringSubmatch(part)
		if m == nil || n.Kind != yaml3.MappingNode {
			return 0
		}
		found := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == m[1] {
				line, n, found = n.Content[i].Line, n.Content[i+1], true
				break
			}
		}
		if !found {
			return line
		}
		for _, idx := range regexp.MustCompile(`\d+`).FindAllString(m[2], -1) {
			k, _ := strconv.Atoi(idx)
			if n.Kind != yaml3.SequenceNode || k >= len(n.Content) {
				return line
			}
			n = n.Content[k]
			line = n.Line
		}
	}
	return line
}
