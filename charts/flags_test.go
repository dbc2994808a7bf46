package charts

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// sourceFlags rebuilds the flag set that function fn in cmd/nvmock/file
// defines (its fs.String, fs.Int and fs.Bool calls), so the chart's
// arguments are checked against the real flags, not a copy of their names.
func sourceFlags(t *testing.T, file, fn string) *flag.FlagSet {
	t.Helper()
	path := filepath.Join("..", "cmd", "nvmock", file)
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	fs := flag.NewFlagSet(fn, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	found := false
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != fn {
			continue
		}
		found = true
		ast.Inspect(fd, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "fs" {
				return true
			}
			arg := 0
			if strings.HasSuffix(sel.Sel.Name, "Var") && len(call.Args) > 1 {
				arg = 1 // fs.StringVar(&x, "name", ...)
			}
			lit, ok := call.Args[arg].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			name, _ := strconv.Unquote(lit.Value)
			switch strings.TrimSuffix(sel.Sel.Name, "Var") {
			case "String":
				fs.String(name, "", "")
			case "Int":
				fs.Int(name, 0, "")
			case "Bool":
				fs.Bool(name, false, "")
			case "Duration":
				fs.Duration(name, 0, "")
			case "Func", "": // fs.Func, or fs.Var of a repeatable flag
				// A repeatable flag: the values, comma-joined.
				var vals []string
				fs.Func(name, "", func(v string) error { vals = append(vals, v); return nil })
				fs.Lookup(name).Value = joinedValue{&vals}
			}
			return true
		})
	}
	if !found {
		t.Fatalf("%s: no function %s; the chart test follows cmd/nvmock's flag definitions", path, fn)
	}
	return fs
}

// parseArgs parses args with fs and fails on an unknown flag, a bad value
// or a stray argument. It returns the flags that were set.
func parseArgs(t *testing.T, what string, fs *flag.FlagSet, args []string) map[string]string {
	t.Helper()
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%s: %v (args %q)", what, err, args)
	}
	if fs.NArg() > 0 {
		t.Fatalf("%s: stray argument %q (args %q)", what, fs.Arg(0), args)
	}
	set := map[string]string{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = f.Value.String() })
	return set
}

// joinedValue shows a repeatable flag's values comma-joined.
type joinedValue struct{ vals *[]string }

func (j joinedValue) String() string {
	if j.vals == nil {
		return ""
	}
	return strings.Join(*j.vals, ",")
}

func (j joinedValue) Set(v string) error { *j.vals = append(*j.vals, v); return nil }
