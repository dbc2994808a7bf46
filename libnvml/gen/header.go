package gen

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Func is one function declared in nvml.h.
type Func struct {
	Name   string
	Return string  // "nvmlReturn_t" or e.g. "const char*"
	Params []Param // empty for (void)
}

// Param is one parameter of a Func.
type Param struct {
	Type string // e.g. "nvmlDevice_t", "unsigned int *"
	Name string
}

var (
	blockComment = regexp.MustCompile(`(?s)/\*.*?\*/`)
	lineComment  = regexp.MustCompile(`//[^\n]*`)
	declStart    = regexp.MustCompile(`DECLDIR\s*(?:char\s*\*\s*)?(\w+)\s*\(`)
	paramName    = regexp.MustCompile(`^(.*?)(\w+)\s*(\[\s*\w*\s*\])?$`)
	spaces       = regexp.MustCompile(`\s+`)
)

// ParseHeader returns every function nvml.h declares, sorted by name.
// Both sides of NVML_NO_UNVERSIONED_FUNC_DEFS count: the real library
// exports the versioned and the unversioned names.
func ParseHeader(src string) ([]Func, error) {
	src = blockComment.ReplaceAllString(src, " ")
	src = lineComment.ReplaceAllString(src, " ")
	seen := map[string]bool{}
	var funcs []Func
	for _, m := range declStart.FindAllStringSubmatchIndex(src, -1) {
		name := src[m[2]:m[3]]
		if !strings.HasPrefix(name, "nvml") {
			continue
		}
		ret, err := returnType(src[:m[0]])
		if err != nil {
			return nil, fmt.Errorf("nvml.h: %s: %w", name, err)
		}
		end := strings.IndexByte(src[m[1]:], ')')
		if end < 0 {
			return nil, fmt.Errorf("nvml.h: %s: unterminated parameter list", name)
		}
		params, err := parseParams(src[m[1] : m[1]+end])
		if err != nil {
			return nil, fmt.Errorf("nvml.h: %s: %w", name, err)
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		funcs = append(funcs, Func{Name: name, Return: ret, Params: params})
	}
	if len(funcs) == 0 {
		return nil, fmt.Errorf("nvml.h: no function declarations found")
	}
	sort.Slice(funcs, func(i, j int) bool { return funcs[i].Name < funcs[j].Name })
	return funcs, nil
}

// returnType reads the tokens between the previous statement and DECLDIR.
func returnType(before string) (string, error) {
	i := strings.LastIndexAny(before, ";}#")
	if i >= 0 && before[i] == '#' {
		// A preprocessor line ends the previous statement.
		i += strings.IndexByte(before[i:], '\n')
	}
	t := strings.TrimSpace(spaces.ReplaceAllString(before[i+1:], " "))
	t = strings.TrimSpace(regexp.MustCompile(`DEPRECATED\([^)]*\)`).ReplaceAllString(t, ""))
	switch t {
	case "nvmlReturn_t":
		return t, nil
	case "const":
		return "const char*", nil // "const DECLDIR char* nvmlErrorString"
	}
	return "", fmt.Errorf("unexpected return type %q", t)
}

func parseParams(s string) ([]Param, error) {
	s = strings.TrimSpace(spaces.ReplaceAllString(s, " "))
	if s == "void" || s == "" {
		return nil, nil
	}
	var ps []Param
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		m := paramName.FindStringSubmatch(p)
		if m == nil || strings.TrimSpace(m[1]) == "" {
			return nil, fmt.Errorf("cannot parse parameter %q", p)
		}
		typ := strings.TrimSpace(m[1])
		if m[3] != "" {
			typ += " *" // an array parameter is a pointer
		}
		ps = append(ps, Param{Type: typ, Name: m[2]})
	}
	return ps, nil
}
