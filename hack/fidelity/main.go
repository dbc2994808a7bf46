// Command fidelity scores a mock's `nvidia-smi -q -x` against a real capture
// of the same board with internal/fidelity, leaving out the fields in
// fidelity.Unrenderable as the tests do.
//
//	go run ./hack/fidelity [-list] [-all] [-min PCT] MOCK.xml HARDWARE.xml
//
// It prints the counts, with -list every row that is not the same (mock_na,
// diff, hw_na, both_na), and the static fidelity; it exits 1 when -min is
// given and the score is below it. hack/fidelity.sh renders a profile and
// runs it.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/nvmock/nvmock/internal/fidelity"
)

func main() {
	list := flag.Bool("list", false, "list the rows that are mock_na, diff, hw_na or both_na")
	minimum := flag.Float64("min", -1, "exit 1 when the static fidelity (percent) is below this")
	all := flag.Bool("all", false, "also score the fields fidelity.Unrenderable leaves out")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: fidelity [-list] [-all] [-min PCT] MOCK.xml HARDWARE.xml")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	mock, err := fidelity.FirstGPUFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fidelity:", err)
		os.Exit(2)
	}
	hardware, err := fidelity.FirstGPUFile(flag.Arg(1))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fidelity:", err)
		os.Exit(2)
	}
	if !*all {
		for _, e := range fidelity.Exclude(mock, hardware, fidelity.Unrenderable) {
			fmt.Printf("left out of the score: %s\n", e)
		}
	}
	report := fidelity.Compare(mock, hardware)
	if err := report.WriteText(os.Stdout, *list); err != nil {
		fmt.Fprintln(os.Stderr, "fidelity:", err)
		os.Exit(2)
	}
	if *minimum >= 0 && report.Score < *minimum {
		os.Exit(1)
	}
}
