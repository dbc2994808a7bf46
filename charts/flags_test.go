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
// defines (its fs.String, fs.Int and fs.Bool calls, and those of the
// functions it hands fs to, such as loadFlags.addShape), so the chart's
// arguments are checked against the real flags, not a copy of their names.
func sourceFlags(t *testing.T, file, fn string) *flag.FlagSet {
	t.Helper()
	dir := filepath.Join("..", "cmd", "nvmock")
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	funcs := map[string][]*ast.FuncDecl{}
	var root *ast.FuncDecl
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", p, err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				funcs[fd.Name.Name] = append(funcs[fd.Name.Name], fd)
				if filepath.Base(p) == file && fd.Name.Name == fn && fd.Recv == nil {
					root = fd
				}
			}
		}
	}
	if root == nil {
		t.Fatalf("%s: no function %s; the chart test follows cmd/nvmock's flag definitions", filepath.Join(dir, file), fn)
	}
	fs := flag.NewFlagSet(fn, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	seen := map[*ast.FuncDecl]bool{}
	var visit func(fd *ast.FuncDecl)
	visit = func(fd *ast.FuncDecl) {
		if seen[fd] {
			return
		}
		seen[fd] = true
		ast.Inspect(fd, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			follow(t, call, funcs, visit)
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "fs" {
				return true
			}
			define(fs, sel.Sel.Name, call)
			return true
		})
	}
	visit(root)
	return fs
}

// follow visits the function a call hands fs to, if cmd/nvmock defines
// it; a name that several functions share fails the test, not a guess.
func follow(t *testing.T, call *ast.CallExpr, funcs map[string][]*ast.FuncDecl, visit func(*ast.FuncDecl)) {
	t.Helper()
	for _, a := range call.Args {
		if id, ok := a.(*ast.Ident); !ok || id.Name != "fs" {
			continue
		}
		var name string
		switch f := call.Fun.(type) {
		case *ast.Ident:
			name = f.Name
		case *ast.SelectorExpr:
			name = f.Sel.Name
		}
		switch ds := funcs[name]; len(ds) {
		case 0:
		case 1:
			visit(ds[0])
		default:
			t.Fatalf("fs is handed to %s, which %d functions of cmd/nvmock are named; the chart test cannot tell which", name, len(ds))
		}
	}
}

// define adds the flag of one fs.String, fs.IntVar, ... call to fs.
func define(fs *flag.FlagSet, method string, call *ast.CallExpr) {
	arg := 0
	if strings.HasSuffix(method, "Var") && len(call.Args) > 1 {
		arg = 1 // fs.StringVar(&x, "name", ...)
	}
	lit, ok := call.Args[arg].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return
	}
	name, _ := strconv.Unquote(lit.Value)
	switch strings.TrimSuffix(method, "Var") {
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
