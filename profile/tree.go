package profile

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"

	yaml3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

var (
	unmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
	octal       = regexp.MustCompile(`^[-+]?0[0-7_]+$`)
)

// checkTree walks a profile's YAML against the struct's json tags before it
// is decoded, so each problem is reported with its full path (list indices
// included), which located turns into a line:
//   - unknown or misspelt keys, and keys given twice;
//   - scalars that YAML 1.1, which the decoder follows, reads as something
//     other than what was written: `name: y` is true, `serialPrefix: 0165`
//     is the octal 117, `version: 570.10` the number 570.1; a string field
//     would silently get "true", "117" or "570.1";
//   - numbers out of their field's range, and sizes or hex values their
//     own parsers refuse.
//
// Type mismatches between a mapping, a list and a scalar are left to the
// decoder, which names them.
func checkTree(t reflect.Type, n *yaml3.Node, at string) []error {
	return walker{}.tree(t, n, at)
}

// walker remembers the anchored nodes it checked, and against which type:
// an alias of one is not checked again, so its problems are told once, at
// the anchor.
type walker map[walked]bool

type walked struct {
	n *yaml3.Node
	t reflect.Type
}

func (w walker) tree(t reflect.Type, n *yaml3.Node, at string) []error {
	// A null takes away the base's optional block or list; anywhere else it
	// would read as zero (a whole board gone without a word).
	if n.Kind == yaml3.ScalarNode && n.Tag == "!!null" && at != "" {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
			return nil
		}
		return []error{fmt.Errorf("%s: null; give a value, or leave the field out", at)}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeOf(BoardPatch{}) {
		t = reflect.TypeOf(Board{})
	}
	if n.Kind == yaml3.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Anchor != "" {
		if w[walked{n, t}] {
			return nil
		}
		w[walked{n, t}] = true
	}
	switch n.Kind {
	case yaml3.MappingNode:
		return w.mapping(t, n, at)
	case yaml3.SequenceNode:
		if t.Kind() != reflect.Slice {
			return nil
		}
		var errs []error
		for i, e := range n.Content {
			errs = append(errs, w.tree(t.Elem(), e, fmt.Sprintf("%s[%d]", at, i))...)
		}
		return errs
	case yaml3.ScalarNode:
		if err := checkScalar(t, n); err != nil {
			return []error{fmt.Errorf("%s: %w", at, err)}
		}
	}
	return nil
}

func (w walker) mapping(t reflect.Type, n *yaml3.Node, at string) []error {
	var errs []error
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" && k.Tag == "!!merge" {
			errs = append(errs, w.tree(t, v, at)...)
			continue
		}
		if line, ok := seen[k.Value]; ok {
			errs = append(errs, fmt.Errorf("%s: given twice (lines %d and %d); keep one", join(at, k.Value), line, k.Line))
			continue
		}
		seen[k.Value] = k.Line
	}
	switch t.Kind() {
	case reflect.Map:
		for i := 0; i+1 < len(n.Content); i += 2 {
			errs = append(errs, w.tree(t.Elem(), n.Content[i+1], join(at, n.Content[i].Value))...)
		}
		return errs
	case reflect.Struct:
	default:
		return errs // a type error; the decoder reports it
	}
	fields := map[string]reflect.Type{}
	var known []string
	// VisibleFields flattens embedded structs, as encoding/json does.
	for _, f := range reflect.VisibleFields(t) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous || name == "" || name == "-" {
			continue
		}
		fields[name] = f.Type
		known = append(known, name)
	}
	var unknown []error
	told := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i].Value
		if k == "<<" && n.Content[i].Tag == "!!merge" {
			continue
		}
		ft, ok := fields[k]
		if !ok {
			if !told[k] { // once, however often it is given
				unknown = append(unknown, fmt.Errorf("%s: unknown field; known fields here: %s", join(at, k), strings.Join(known, ", ")))
				told[k] = true
			}
			continue
		}
		errs = append(errs, w.tree(ft, n.Content[i+1], join(at, k))...)
	}
	sort.Slice(unknown, func(i, j int) bool { return unknown[i].Error() < unknown[j].Error() })
	return append(unknown, errs...)
}

// checkScalar checks one scalar as the decoder will read it: YAML 1.1 to
// JSON, then JSON into the field.
func checkScalar(t reflect.Type, n *yaml3.Node) error {
	if n.Tag == "!!null" || t.Kind() == reflect.Interface {
		return nil
	}
	j, err := yaml.YAMLToJSON([]byte(scalarSource(n)))
	if err != nil {
		return nil // the whole file's parse reports it
	}
	j = []byte(strings.TrimSpace(string(j)))
	// Quoted as written, or where it spans lines: an error is one line.
	shown := n.Value
	if n.Style&(yaml3.DoubleQuotedStyle|yaml3.SingleQuotedStyle) != 0 || strings.IndexFunc(n.Value, notPrint) >= 0 {
		shown = strconv.Quote(n.Value)
	}
	if reflect.PointerTo(t).Implements(unmarshaler) {
		return reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(j)
	}
	plain := len(j) > 0 && j[0] != '"'
	switch t.Kind() {
	case reflect.String:
		// The decoder writes a number or boolean back as text: 12.8 stays
		// "12.8", but y becomes "true" and 0165 "117".
		var v struct {
			S string `json:"s"`
		}
		if plain && yaml.Unmarshal([]byte("s: "+n.Value), &v) == nil && v.S != n.Value {
			return fmt.Errorf("%s is read by YAML as %s, not as the text written; quote it: %q", shown, v.S, n.Value)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if plain && octal.MatchString(n.Value) {
			return fmt.Errorf("%s is read by YAML as the octal %s; write it without the leading 0", shown, j)
		}
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return checkInt(j, shown, int64(-1)<<(t.Bits()-1), int64(1)<<(t.Bits()-1)-1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return checkInt(j, shown, uint64(0), uint64(math.MaxUint64)>>(64-t.Bits()))
	case reflect.Float32, reflect.Float64:
		if _, err := strconv.ParseFloat(string(j), 64); err != nil {
			return fmt.Errorf("%s is not a number", shown)
		}
	case reflect.Bool:
		if string(j) != "true" && string(j) != "false" {
			return fmt.Errorf("%s is not true or false", shown)
		}
	}
	return nil
}

// checkInt says whether j, a JSON value, is a whole number in [lo, hi].
func checkInt[T int64 | uint64](j []byte, written string, lo, hi T) error {
	f, err := strconv.ParseFloat(string(j), 64)
	if err != nil || f != math.Trunc(f) {
		return fmt.Errorf("%s is not a whole number", written)
	}
	ok := false
	if lo == 0 {
		v, err := strconv.ParseUint(string(j), 10, 64)
		ok = err == nil && T(v) <= hi
	} else {
		v, err := strconv.ParseInt(string(j), 10, 64)
		ok = err == nil && T(v) >= lo && T(v) <= hi
	}
	switch {
	case ok:
		return nil
	case hi > 1<<32:
		return fmt.Errorf("%s is out of range", written)
	}
	return fmt.Errorf("%s is not a whole number from %d to %d", written, lo, hi)
}

func notPrint(r rune) bool { return !unicode.IsPrint(r) }

// scalarSource is a scalar as YAML 1.1 will read it: a plain one as written
// (re-encoding would quote what YAML 1.1 misreads), any other as a string.
func scalarSource(n *yaml3.Node) string {
	plain := n.Style&(yaml3.DoubleQuotedStyle|yaml3.SingleQuotedStyle|yaml3.LiteralStyle|yaml3.FoldedStyle) == 0
	if plain && !(n.Style&yaml3.TaggedStyle != 0 && n.Tag == "!!str") {
		return n.Value
	}
	j, _ := json.Marshal(n.Value)
	return string(j)
}
