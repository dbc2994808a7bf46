// Command testsum reads `go test -json` on stdin and prints what `go test`
// would (each package's result, the output of failing tests), then keeps a
// tally in a file so that several runs add up to one final line:
//
//	go test -json ./... | testsum -tally F
//	testsum -tally F -summary     # "N passed, N failed, N skipped"; exit 1 on failures
//
// A package that fails to build, or fails outside any test, counts as a
// failed test named after the package.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type tally struct{ Passed, Failed, Skipped int }

func main() {
	file := flag.String("tally", "", "file that keeps the counts across runs")
	summary := flag.Bool("summary", false, "print the counts in the tally file and exit")
	flag.Parse()
	if *file == "" {
		fmt.Fprintln(os.Stderr, "testsum: -tally FILE is required")
		os.Exit(2)
	}
	t := load(*file)
	if *summary {
		fmt.Printf("%d passed, %d failed, %d skipped\n", t.Passed, t.Failed, t.Skipped)
		if t.Failed > 0 {
			os.Exit(1)
		}
		return
	}
	read(os.Stdin, os.Stdout, &t)
	data, _ := json.Marshal(t)
	if err := os.WriteFile(*file, data, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
}

func load(path string) tally {
	var t tally
	if data, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(data, &t)
	}
	return t
}

// read tallies events and echoes: package lines, failing tests' output,
// skip reasons, and any line that is not JSON (build errors).
func read(in io.Reader, out io.Writer, t *tally) {
	buf := map[string]*strings.Builder{} // output per package/test
	key := func(e event) string { return e.Package + "\x00" + e.Test }
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(out, sc.Text())
			continue
		}
		switch e.Action {
		case "output", "build-output":
			b := buf[key(e)]
			if b == nil {
				b = &strings.Builder{}
				buf[key(e)] = b
			}
			b.WriteString(e.Output)
		case "pass":
			if e.Test != "" {
				t.Passed++
			} else {
				printPackage(out, buf[key(e)], false)
			}
			delete(buf, key(e))
		case "skip":
			if e.Test != "" {
				t.Skipped++
				fmt.Fprint(out, lastLines(buf[key(e)], 3))
			} else {
				printPackage(out, buf[key(e)], false)
			}
			delete(buf, key(e))
		case "fail":
			if e.Test != "" {
				t.Failed++
				fmt.Fprint(out, str(buf[key(e)]))
			} else {
				// A package failing with no failed test: build error, panic
				// outside a test, TestMain exit.
				if !strings.Contains(str(buf[key(e)]), "--- FAIL") {
					t.Failed++
				}
				printPackage(out, buf[key(e)], true)
			}
			delete(buf, key(e))
		}
	}
}

// printPackage prints a package's own output: all of it on failure, else
// its last line ("ok  pkg 1.2s").
func printPackage(out io.Writer, b *strings.Builder, failed bool) {
	if failed {
		fmt.Fprint(out, str(b))
		return
	}
	fmt.Fprint(out, lastLines(b, 1))
}

func str(b *strings.Builder) string {
	if b == nil {
		return ""
	}
	return b.String()
}

func lastLines(b *strings.Builder, n int) string {
	ls := strings.SplitAfter(strings.TrimRight(str(b), "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	s := strings.Join(ls, "")
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s
}
