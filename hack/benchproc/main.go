// Command benchproc times whole processes: it runs a command n times and
// prints the median wall time, the median peak RSS, and the median of every
// "name number" line the command prints (in-process timings).
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	n := flag.Int("n", 20, "runs")
	label := flag.String("label", "", "name printed before the figures")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: benchproc [-n runs] [-label name] -- command [args]")
		os.Exit(2)
	}
	if err := run(*n, *label, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "benchproc:", err)
		os.Exit(1)
	}
}

func run(n int, label string, argv []string) error {
	var walls, rss []float64
	extra := map[string][]float64{}
	var order []string
	for i := 0; i < n; i++ {
		// Output goes to a file, as with `> out`: a pipe to this process
		// would time our reading too (nvidia-smi writes unbuffered).
		f, err := os.CreateTemp("", "benchproc")
		if err != nil {
			return err
		}
		os.Remove(f.Name())
		cmd := exec.Command(argv[0], argv[1:]...)
		// A command that must start from nothing each run (an install from
		// scratch) takes a fresh directory by this number, instead of
		// removing the last run's tree inside the timing.
		cmd.Env = append(os.Environ(), fmt.Sprintf("BENCHPROC_RUN=%d", i))
		cmd.Stdout = f
		cmd.Stderr = os.Stderr
		start := time.Now()
		err = cmd.Run()
		if err != nil {
			f.Close()
			return fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
		}
		walls = append(walls, float64(time.Since(start).Microseconds())/1000)
		rss = append(rss, float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss)/1024)
		if _, err := f.Seek(0, 0); err != nil {
			return err
		}
		out, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 || !nameRE.MatchString(f[0]) {
				continue
			}
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				continue
			}
			if _, ok := extra[f[0]]; !ok {
				order = append(order, f[0])
			}
			extra[f[0]] = append(extra[f[0]], v)
		}
	}
	fmt.Printf("%s\twall_ms %.2f\tpeak_rss_mb %.1f", label, median(walls), median(rss))
	for _, k := range order {
		fmt.Printf("\t%s %.2f", k, median(extra[k]))
	}
	fmt.Printf("\t(median of %d)\n", n)
	return nil
}

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
