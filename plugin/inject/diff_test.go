package inject

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// diff lists where got and want differ, one line per difference, with the
// path of each (Mounts[2].Source: got "...", want "..."). A nil and an empty
// slice or map are the same. go-cmp is not a dependency of this module.
func diff(got, want any) string {
	var out []string
	diffValue("", reflect.ValueOf(got), reflect.ValueOf(want), &out)
	return strings.Join(out, "\n")
}

func diffValue(path string, g, w reflect.Value, out *[]string) {
	if !g.IsValid() || !w.IsValid() {
		if g.IsValid() != w.IsValid() {
			*out = append(*out, fmt.Sprintf("%s: got %v, want %v", orRoot(path), g, w))
		}
		return
	}
	switch g.Kind() {
	case reflect.Struct:
		for i := 0; i < g.NumField(); i++ {
			diffValue(path+"."+g.Type().Field(i).Name, g.Field(i), w.Field(i), out)
		}
	case reflect.Slice, reflect.Array:
		n := max(g.Len(), w.Len())
		for i := 0; i < n; i++ {
			p := fmt.Sprintf("%s[%d]", path, i)
			switch {
			case i >= g.Len():
				*out = append(*out, fmt.Sprintf("%s: missing, want %+v", p, w.Index(i)))
			case i >= w.Len():
				*out = append(*out, fmt.Sprintf("%s: extra %+v", p, g.Index(i)))
			default:
				diffValue(p, g.Index(i), w.Index(i), out)
			}
		}
	case reflect.Map:
		for _, k := range g.MapKeys() {
			diffValue(fmt.Sprintf("%s[%v]", path, k), g.MapIndex(k), w.MapIndex(k), out)
		}
		for _, k := range w.MapKeys() {
			if !g.MapIndex(k).IsValid() {
				*out = append(*out, fmt.Sprintf("%s[%v]: missing, want %v", path, k, w.MapIndex(k)))
			}
		}
	case reflect.Pointer, reflect.Interface:
		if g.IsNil() || w.IsNil() {
			if g.IsNil() != w.IsNil() {
				*out = append(*out, fmt.Sprintf("%s: got %v, want %v", orRoot(path), g, w))
			}
			return
		}
		diffValue(path, g.Elem(), w.Elem(), out)
	case reflect.Func:
		if g.IsNil() != w.IsNil() {
			*out = append(*out, fmt.Sprintf("%s: func nil %v, want nil %v", orRoot(path), g.IsNil(), w.IsNil()))
		}
	default:
		if !g.Equal(w) {
			*out = append(*out, fmt.Sprintf("%s: got %#v, want %#v", orRoot(path), g.Interface(), w.Interface()))
		}
	}
}

func orRoot(p string) string {
	if p == "" {
		return "value"
	}
	return p
}

func TestDiffNamesEachDifferenceByPath(t *testing.T) {
	got := Adjustment{GPUs: []int{1}, Env: []EnvVar{{"A", "1"}}, Mounts: []Mount{{Source: "/x"}}}
	want := Adjustment{GPUs: []int{1, 2}, Env: []EnvVar{{"A", "2"}}, Mounts: []Mount{{Source: "/x"}}, Warnings: []string{}}
	d := diff(got, want)
	for _, s := range []string{`.GPUs[1]: missing, want 2`, `.Env[0].Value: got "1", want "2"`} {
		if !strings.Contains(d, s) {
			t.Errorf("diff lacks %q:\n%s", s, d)
		}
	}
	if strings.Count(d, "\n") != 1 {
		t.Errorf("want two lines (nil and empty Warnings are the same), got:\n%s", d)
	}
	if d := diff(want, want); d != "" {
		t.Errorf("a value differs from itself:\n%s", d)
	}
}
