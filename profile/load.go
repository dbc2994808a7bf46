package profile

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

//go:embed builtin/*.yaml
var builtinFS embed.FS

// Builtins lists the names of the built-in profiles.
func Builtins() []string {
	ents, _ := builtinFS.ReadDir("builtin")
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}

// Builtin returns a built-in profile by name.
func Builtin(name string) (*Profile, error) {
	data, err := builtinFS.ReadFile(path.Join("builtin", name+".yaml"))
	if err != nil {
		return nil, fmt.Errorf("no built-in profile %q; choose one of %s", name, strings.Join(Builtins(), ", "))
	}
	file := "builtin/" + name + ".yaml"
	// A built-in edited since make generate is read from its YAML.
	if g, ok := builtinJSON[name]; ok && g.yamlSum == yamlSum(data) {
		return decodeBuiltin(file, data, g.json)
	}
	return parseBuiltin(file, data)
}

// generated is a built-in profile's JSON (builtin_gen.go) and the
// SHA-256 of the YAML it was made from.
type generated struct{ yamlSum, json string }

func yamlSum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// decodeBuiltin decodes a built-in profile from its JSON (builtin_gen.go,
// TestGeneratedBuiltins): converting the YAML was most of a fresh
// process's profile loading (7-9 ms of a100's, against 1.5 ms).
func decodeBuiltin(file string, data []byte, j string) (*Profile, error) {
	var p Profile
	d := json.NewDecoder(strings.NewReader(j))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		return nil, fmt.Errorf("profile %s: generated JSON: %w (run make generate)", file, err)
	}
	return finishBuiltin(file, data, &p)
}

// parseBuiltin decodes a built-in profile straight into a Profile. Parse's
// checks for users' files (four passes of two YAML libraries, to locate
// each mistake) were most of nvmock exec's profile loading and cannot
// fail on the built-ins; TestBuiltinsDecodeAsParseDoes holds the two to
// the same result.
func parseBuiltin(file string, data []byte) (*Profile, error) {
	var p Profile
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, fmt.Errorf("profile %s: %s", file, DecodeMessage(err))
	}
	return finishBuiltin(file, data, &p)
}

// finishBuiltin completes a decoded built-in profile and checks it.
func finishBuiltin(file string, data []byte, p *Profile) (*Profile, error) {
	p.Driver.resolve()
	if errs := p.Validate(); len(errs) > 0 {
		return nil, located(file, data, errs)
	}
	return p, nil
}

// Load reads a profile by built-in name or from a YAML file. A bare name
// that is a built-in and a file here is refused: either could be meant.
func Load(nameOrFile string) (*Profile, error) {
	if !strings.ContainsAny(nameOrFile, "/.") {
		fi, err := os.Stat(nameOrFile)
		// A compiled snapshot of that name (profile compile gb200 -o gb200)
		// is no profile that could be meant.
		file := err == nil && !fi.IsDir() && !isSnapshot(nameOrFile)
		if !slices.Contains(Builtins(), nameOrFile) && file {
			return LoadFile(nameOrFile)
		}
		if file {
			return nil, fmt.Errorf("profile %s: both a built-in profile and a file here; write ./%s for the file, or run elsewhere for the built-in", nameOrFile, nameOrFile)
		}
		return Builtin(nameOrFile)
	}
	return LoadFile(nameOrFile)
}

// isSnapshot says whether path starts as a compiled snapshot does.
func isSnapshot(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [8]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && string(magic[:]) == "NVMOCKSS"
}

// LoadFile reads a profile from a YAML file, whatever its name.
func LoadFile(nameOrFile string) (*Profile, error) {
	if nameOrFile == "" {
		return nil, errors.New("read profile: the file name is empty")
	}
	data, err := ReadLimited(nameOrFile)
	if err != nil {
		return nil, fmt.Errorf("read profile: %w", err)
	}
	return Parse(nameOrFile, data)
}

// MaxFileSize bounds the files read (profiles, live specs): the largest
// built-in profile is 16 KB; /dev/zero must not fill the memory.
const MaxFileSize = 4 << 20

// ReadLimited reads a file of at most MaxFileSize bytes.
func ReadLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s is larger than %d MiB, which no profile or spec needs", path, MaxFileSize>>20)
	}
	return data, nil
}

// NotANumber finds a YAML float that is NaN or infinite, which JSON (and
// so the decoder) cannot hold: its field path and line, or 0.
func NotANumber(data []byte) (string, int) {
	var doc yaml3.Node
	if yaml3.Unmarshal(data, &doc) != nil {
		return "", 0
	}
	var walk func(n *yaml3.Node, path string) (string, int)
	walk = func(n *yaml3.Node, path string) (string, int) {
		switch n.Kind {
		case yaml3.DocumentNode:
			for _, c := range n.Content {
				if f, l := walk(c, path); l > 0 {
					return f, l
				}
			}
		case yaml3.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				if f, l := walk(n.Content[i+1], p); l > 0 {
					return f, l
				}
			}
		case yaml3.SequenceNode:
			for i, c := range n.Content {
				if f, l := walk(c, fmt.Sprintf("%s[%d]", path, i)); l > 0 {
					return f, l
				}
			}
		case yaml3.ScalarNode:
			var v float64
			if n.Tag == "!!float" && n.Decode(&v) == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
				return path, n.Line
			}
		}
		return "", 0
	}
	return walk(&doc, "")
}

// OneLine joins a YAML library's multi-line error ("unmarshal errors:\n
// line 2: ...") into one line.
func OneLine(msg string) string {
	parts := strings.Split(msg, "\n")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return strings.TrimSuffix(strings.Join(parts, " "), " ")
}

// SecondDocument is the line where a second YAML document with content
// starts in data, or 0: readers take the first and would drop the rest.
func SecondDocument(data []byte) int {
	d := yaml3.NewDecoder(bytes.NewReader(data))
	var first, second yaml3.Node
	if d.Decode(&first) != nil || d.Decode(&second) != nil || len(second.Content) == 0 {
		return 0
	}
	if c := second.Content[0]; c.Kind == yaml3.ScalarNode && c.Tag == "!!null" && c.Value == "" {
		return 0 // a closing "---"
	}
	return second.Content[0].Line
}

// badKey is the line of the first mapping key that is no string (null, a
// list, a mapping), and what it is; 0 if none.
func badKey(data []byte) (int, string) {
	var doc yaml3.Node
	if yaml3.Unmarshal(data, &doc) != nil {
		return 0, ""
	}
	var walk func(n *yaml3.Node) (int, string)
	walk = func(n *yaml3.Node) (int, string) {
		for i, c := range n.Content {
			if n.Kind == yaml3.MappingNode && i%2 == 0 {
				switch {
				case c.Kind == yaml3.ScalarNode && c.Tag == "!!null":
					return c.Line, "a null"
				case c.Kind == yaml3.SequenceNode:
					return c.Line, "a list"
				case c.Kind == yaml3.MappingNode:
					return c.Line, "a mapping"
				}
			}
			if line, what := walk(c); line > 0 {
				return line, what
			}
		}
		return 0, ""
	}
	return walk(&doc)
}

var jsonTypeErr = regexp.MustCompile(`cannot unmarshal (\w+)( \S+)? into Go struct field \w+\.(\S+) of type (\S+)`)

// jsonValueErr is the same error for a whole value (a list's entry).
var jsonValueErr = regexp.MustCompile(`cannot unmarshal (\w+)( \S+)? into Go value of type (\S+)`)

// Parse decodes and validates a profile; file names the source in errors,
// which carry the line of the field where it can be found.
func Parse(file string, data []byte) (*Profile, error) {
	switch {
	case bytes.HasPrefix(data, []byte("NVMOCKSS")):
		return nil, fmt.Errorf("profile %s: a compiled snapshot, not a profile; give the profile it was compiled from", file)
	case bytes.HasPrefix(data, []byte{0x1f, 0x8b}):
		return nil, fmt.Errorf("profile %s: compressed (gzip); give the YAML itself", file)
	}
	var raw any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		if field, line := NotANumber(data); line > 0 {
			return nil, fmt.Errorf("profile %s:%d: %s: not a number (.nan and .inf are not values)", file, line, field)
		}
		if line, what := badKey(data); line > 0 {
			// Review: the library's words printed Go's %!s(<nil>).
			return nil, fmt.Errorf("profile %s:%d: %s as a key; keys are field names", file, line, what)
		}
		return nil, fmt.Errorf("profile %s: not valid YAML: %s", file, OneLine(strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")))
	}
	top, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("profile %s: not a profile: the file must be a mapping of fields such as name, gpus and board", file)
	}
	var doc yaml3.Node
	if err := yaml3.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("profile %s: not valid YAML: %s", file, OneLine(strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	if line := SecondDocument(data); line > 0 {
		return nil, fmt.Errorf("profile %s:%d: a second YAML document; a profile is one", file, line)
	}
	if len(doc.Content) > 0 {
		if errs := checkTree(reflect.TypeOf(Profile{}), doc.Content[0], ""); len(errs) > 0 {
			return nil, located(file, data, errs)
		}
	}
	// An override without an index would silently be GPU 0's.
	if ds, ok := top["devices"].([]any); ok {
		var errs []error
		for i, d := range ds {
			if m, ok := d.(map[string]any); ok && m["index"] == nil {
				errs = append(errs, fmt.Errorf("devices[%d]: gives no index, the GPU it changes", i))
			}
		}
		if len(errs) > 0 {
			return nil, located(file, data, errs)
		}
	}
	if _, based := top["base"]; !based {
		// Else every field of the board would be an error of its own.
		var missing []string
		for _, k := range []string{"gpus", "driver", "board"} {
			if _, ok := top[k]; !ok {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("profile %s: no %s; start from a built-in board with base: NAME (nvmock profile list), or give them", file, strings.Join(missing, ", "))
		}
	}
	if b, ok := top["base"]; ok {
		merged, err := onBase(b, top)
		if err != nil {
			return nil, located(file, data, []error{err})
		}
		top = merged
	}
	merged, err := json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", file, err)
	}
	var p Profile
	if err := yaml.UnmarshalStrict(merged, &p); err != nil {
		return nil, located(file, data, []error{errors.New(DecodeMessage(err))})
	}
	p.Driver.resolve()
	if errs := p.Validate(); len(errs) > 0 {
		return nil, located(file, data, errs)
	}
	return &p, nil
}

// onBase lays a profile over the built-in it names: maps merge key by key,
// anything else (lists included) replaces the base's value. The driver
// block is replaced whole: a profile naming another driver version takes the
// CUDA and NVML versions of that driver, not the base's.
func onBase(name any, top map[string]any) (map[string]any, error) {
	n, ok := name.(string)
	if !ok {
		return nil, fmt.Errorf("base: expected the name of a built-in profile, got %v", name)
	}
	data, err := builtinFS.ReadFile(path.Join("builtin", n+".yaml"))
	if err != nil {
		return nil, fmt.Errorf("base: no built-in profile %q; choose one of %s", n, strings.Join(Builtins(), ", "))
	}
	var base map[string]any
	if err := yaml.Unmarshal(data, &base); err != nil {
		return nil, fmt.Errorf("base: built-in %s: %w", n, err)
	}
	if d, ok := top["driver"]; ok {
		if m, ok := d.(map[string]any); ok && m["version"] == nil {
			bv, _ := base["driver"].(map[string]any)
			return nil, fmt.Errorf("driver: gives no version; a driver block takes the place of the base's (%v) whole, so give version too", bv["version"])
		}
		base["driver"] = d
	}
	// The base's PCIe tree names the base's addresses: a profile that moves
	// its GPUs or NVSwitches and gives no tree of its own gets the default.
	// That has no NVSwitches, so the base's go with its tree: NVML must not
	// name switches lspci lacks.
	if t, ok := top["topology"].(map[string]any); ok && top["pcie"] == nil {
		_, movedGPUs := t["busIds"]
		_, movedSwitches := t["nvswitches"]
		if movedGPUs || movedSwitches {
			delete(base, "pcie")
		}
		if bt, ok := base["topology"].(map[string]any); ok && movedGPUs && !movedSwitches {
			delete(bt, "nvswitches")
			if _, own := t["linksPerSwitch"]; !own {
				delete(bt, "linksPerSwitch")
			}
		}
	}
	// Likewise its InfiniBand names the base's NICs: a profile with NICs of
	// its own, or no tree, gives its own or has none.
	if _, own := top["infiniband"]; !own {
		x, given := top["pcie"]
		if m, ok := x.(map[string]any); ok {
			_, given = m["nics"]
		}
		if _, kept := base["pcie"]; given || !kept {
			delete(base, "infiniband")
		}
	}
	return mergeMaps(base, top), nil
}

func mergeMaps(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		bm, ok1 := out[k].(map[string]any)
		om, ok2 := v.(map[string]any)
		if ok1 && ok2 {
			out[k] = mergeMaps(bm, om)
		} else {
			out[k] = v
		}
	}
	return out
}

// Located reports err at field of the profile read from nameOrFile, as
// Parse reports its own problems: "profile FILE:LINE: field: err".
func Located(nameOrFile, field string, err error) error {
	var data []byte
	if !strings.ContainsAny(nameOrFile, "/.") {
		data, _ = builtinFS.ReadFile(path.Join("builtin", nameOrFile+".yaml"))
	} else {
		data, _ = os.ReadFile(nameOrFile)
	}
	return located(nameOrFile, data, []error{fmt.Errorf("%s: %w", field, err)})
}

// located prefixes each error with file and, where the field's path is
// found in the source, its line: "profile h100.yaml:12: board.memory...".
func located(file string, data []byte, errs []error) error {
	out := make([]error, len(errs))
	for i, e := range errs {
		field, _, _ := strings.Cut(e.Error(), ":")
		if line := lineOf(data, field); line > 0 {
			out[i] = fmt.Errorf("profile %s:%d: %w", file, line, e)
		} else {
			out[i] = fmt.Errorf("profile %s: %w", file, e)
		}
	}
	return errors.Join(out...)
}

// DecodeMessage says what a strict decode of YAML into a Go struct found,
// for people: "gpus: expected a whole number, got string", or the
// decoder's own words without its prefixes.
func DecodeMessage(err error) string {
	msg := err.Error()
	if m := jsonTypeErr.FindStringSubmatch(msg); m != nil {
		// A number that does not fit says which: "got number -3".
		return fmt.Sprintf("%s: expected %s, got %s%s", m[3], kindName(m[4]), m[1], m[2])
	}
	if m := jsonValueErr.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("expected %s, got %s%s", kindName(m[3]), m[1], m[2])
	}
	if i := strings.LastIndex(msg, "json: "); i >= 0 {
		return msg[i+len("json: "):]
	}
	return msg
}

func kindName(goType string) string {
	// A sized type says its range: 5000000000 is 0 or more, yet no uint32.
	switch goType {
	case "uint8", "uint16", "uint32":
		bits, _ := strconv.Atoi(goType[4:])
		return fmt.Sprintf("a whole number from 0 to %d", uint64(1)<<bits-1)
	case "int8", "int16", "int32":
		bits, _ := strconv.Atoi(goType[3:])
		return fmt.Sprintf("a whole number from %d to %d", -(int64(1) << (bits - 1)), int64(1)<<(bits-1)-1)
	}
	switch {
	case strings.HasPrefix(goType, "uint"):
		return "a whole number of 0 or more"
	case strings.Contains(goType, "int"):
		return "a whole number"
	case strings.Contains(goType, "float"):
		return "a number"
	case goType == "bool":
		return "true or false"
	case goType == "string":
		return "a string"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	}
	return "an object"
}

// join names key k under path at; a key over lines, or with other
// unprintable characters, is quoted: an error is one line.
func join(at, k string) string {
	if strings.IndexFunc(k, notPrint) >= 0 {
		k = strconv.Quote(k)
	}
	if at == "" {
		return k
	}
	return at + "." + k
}

// YAML renders a profile the way users write it.
func (p *Profile) YAML() ([]byte, error) {
	j, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(j)
}
