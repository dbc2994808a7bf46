package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/pcisim"
	"github.com/nvmock/nvmock/profile"
)

func profileCmd(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("profile: need list, show, validate or compile")
	}
	if isHelp(args[0]) || args[0] == "help" {
		fmt.Print("Usage: nvmock profile list|show|validate|compile ...\n  Each one's --help says more.\n")
		return nil
	}
	switch args[0] {
	case "list":
		if len(args) == 2 && isHelp(args[1]) {
			fmt.Print("Usage: nvmock profile list\n  Lists the built-in profiles.\n")
			return nil
		}
		if len(args) > 1 {
			return fmt.Errorf("profile list: unexpected argument %q", args[1])
		}
		for _, n := range profile.Builtins() {
			p, err := profile.Builtin(n)
			if err != nil {
				return err
			}
			fmt.Printf("%-8s %s\n", n, p.Description)
		}
		return nil
	case "show":
		return helpShown(profileShow(args[1:], os.Stdout))
	case "validate":
		if len(args) == 2 && isHelp(args[1]) {
			fmt.Print(validateUsage)
			return nil
		}
		if len(args) != 2 {
			return fmt.Errorf("profile validate: need exactly one FILE")
		}
		p, err := profile.LoadFile(args[1])
		if err != nil {
			return err
		}
		if err := fitMIG(args[1], p); err != nil {
			return err
		}
		if err := fitPCI(args[1], p); err != nil {
			return err
		}
		fmt.Printf("%s: ok\n", args[1])
		return nil
	case "compile":
		return helpShown(profileCompile(args[1:]))
	}
	return fmt.Errorf("profile: unknown subcommand %q; use list, show, validate or compile", args[0])
}

// fitMIG refuses a profile whose MIG layout cannot be made on its GPUs,
// which parsing alone does not see (placements decide).
func fitMIG(name string, p *profile.Profile) error {
	if err := live.FitMIGLayout(p); err != nil {
		return profile.Located(name, "board.modes.mig.layout", err)
	}
	return nil
}

// fitPCI refuses a profile whose PCI tree cannot be laid out (review:
// validate said ok, and exec failed). Validate's alone: a snapshot the
// library reads by itself has no tree (compile), and exec's render says
// so itself (the check costs 3 ms on a100).
func fitPCI(name string, p *profile.Profile) error {
	n, err := p.Node()
	if err != nil {
		return err // Validate resolved it already
	}
	if _, err := pcisim.Files(n); err != nil {
		return profile.Located(name, "gpus", fmt.Errorf("%d GPUs: PCI tree: %w", p.GPUs, err))
	}
	return nil
}

const (
	showUsage     = "Usage: nvmock profile show NAME|FILE [flags]\n  Prints the profile and its GPUs' identities on this node.\n"
	compileUsage  = "Usage: nvmock profile compile NAME|FILE -o SNAPSHOT [flags]\n  Writes the snapshot the library reads ($NVMOCK_SNAPSHOT).\n"
	validateUsage = "Usage: nvmock profile validate FILE\n  Checks a profile file: one line naming the field for each problem.\n"
)

// parseInterspersed lets flags follow the positional NAME, as users type
// them. --help prints usage and the flags, and returns flag.ErrHelp.
func parseInterspersed(fs *flag.FlagSet, args []string, usage string) ([]string, error) {
	fs.SetOutput(io.Discard) // one line for a bad flag
	var pos []string
	err := onceEach(fs, func() error {
		for {
			if err := fs.Parse(args); err != nil {
				return err
			}
			if fs.NArg() == 0 {
				return nil
			}
			pos = append(pos, fs.Arg(0))
			args = fs.Args()[1:]
		}
	})
	if errors.Is(err, flag.ErrHelp) {
		printHelp(os.Stdout, fs, usage)
	}
	if err != nil {
		return nil, err
	}
	return pos, refuseEmpty(fs)
}

type loadFlags struct {
	gpus   int
	seed   string
	driver string
	// hostCPUs moves the profile's CPUs onto this machine's (FitCPUs).
	hostCPUs bool
	fs       *flag.FlagSet
	// migGiven: a --mig layout takes the place of the profile's own.
	migGiven bool
}

// dropLayout takes the profile's own MIG layout away, for a --mig given
// instead; a block that held only the layout (a board without MIG) goes.
func dropLayout(p *profile.Profile) {
	m := p.Board.Modes.MIG
	if m == nil {
		return
	}
	m.Layout = ""
	if m.MaxDevices == 0 && len(m.GPUInstances) == 0 {
		p.Board.Modes.MIG = nil
	}
}

func (l *loadFlags) add(fs *flag.FlagSet) {
	l.addShape(fs)
	fs.StringVar(&l.seed, "seed", "", "node seed (default: $NODE_NAME, else /etc/machine-id)")
}

// addShape adds the flags that change the profile, without --seed
// (hostprep install takes the node's name instead).
func (l *loadFlags) addShape(fs *flag.FlagSet) {
	l.fs = fs
	fs.IntVar(&l.gpus, "gpus", 0, "override the profile's GPU count")
	fs.StringVar(&l.driver, "driver-version", "", "override the profile's driver version (CUDA and NVML versions follow it)")
	fs.BoolVar(&l.hostCPUs, "host-cpus", false, hostCPUsHelp)
}

const hostCPUsHelp = "give the GPUs this machine's CPUs in place of the modelled node's (each modelled socket, then NUMA node, takes a share),\nfor tools that check them against the host's (Slurm's AutoDetect=nvml)"

// fitHostCPUs moves p's CPUs onto this machine's.
func fitHostCPUs(p *profile.Profile) error {
	host, err := profile.OnlineCPUs()
	if err == nil {
		err = p.FitCPUs(host)
	}
	if err != nil {
		return fmt.Errorf("--host-cpus: %w", err)
	}
	return nil
}

func (l *loadFlags) load(name string) (*profile.Profile, string, error) {
	p, err := l.profile(name)
	if err != nil {
		return nil, "", err
	}
	seed := l.seed
	if seed == "" {
		if seed, err = snapshot.NodeSeed(); err != nil {
			return nil, "", err
		}
	}
	return p, seed, nil
}

// profile loads the profile name and changes it as the flags say.
func (l *loadFlags) profile(name string) (*profile.Profile, error) {
	p, err := profile.Load(name)
	if err != nil {
		return nil, err
	}
	if l.migGiven {
		dropLayout(p)
	}
	given := false
	l.fs.Visit(func(f *flag.Flag) { given = given || f.Name == "gpus" })
	if given { // --gpus 0 is refused, not the profile's count
		if l.gpus < 1 || l.gpus > profile.MaxGPUs {
			return nil, fmt.Errorf("--gpus %d: a node has 1 to %d GPUs", l.gpus, profile.MaxGPUs)
		}
		p.GPUs = l.gpus
		if errs := p.Validate(); len(errs) > 0 {
			return nil, fmt.Errorf("--gpus %d: %w", l.gpus, errs[0])
		}
	}
	if l.driver != "" {
		if err := p.SetDriver(l.driver); err != nil {
			return nil, fmt.Errorf("--driver-version: %w", err)
		}
	}
	if err := fitMIG(name, p); err != nil {
		return nil, err
	}
	if l.hostCPUs {
		if err := fitHostCPUs(p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func profileShow(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("profile show", flag.ContinueOnError)
	var lf loadFlags
	lf.add(fs)
	pos, err := parseInterspersed(fs, args, showUsage)
	if err != nil {
		return badFlag(fs, err)
	}
	if len(pos) != 1 {
		return fmt.Errorf("profile show: need exactly one NAME or FILE")
	}
	p, seed, err := lf.load(pos[0])
	if err != nil {
		return err
	}
	y, err := p.YAML()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s\n# GPUs on this node (seed %q):\n", strings.TrimSpace(string(y)), seed)
	for _, id := range snapshot.Identities(p, seed) {
		fmt.Fprintf(w, "#   %d  %s  serial %s  bus %s\n", id.Index, id.UUID, id.Serial, id.BusID)
	}
	return nil
}

func profileCompile(args []string) error {
	fs := flag.NewFlagSet("profile compile", flag.ContinueOnError)
	var lf loadFlags
	lf.add(fs)
	out := fs.String("o", "", "output snapshot file (required)")
	unseeded := fs.Bool("unseeded", false, "leave identities to the library (for its built-in default)")
	pos, err := parseInterspersed(fs, args, compileUsage)
	if err != nil {
		return badFlag(fs, err)
	}
	if len(pos) != 1 || *out == "" {
		return fmt.Errorf("profile compile: need one NAME or FILE and -o SNAPSHOT")
	}
	if *unseeded && lf.seed != "" {
		return fmt.Errorf("profile compile: --seed and --unseeded: give one; an unseeded snapshot has no identities to seed")
	}
	if *unseeded {
		lf.seed = "unseeded"
	}
	p, seed, err := lf.load(pos[0])
	if err != nil {
		return err
	}
	if err := notLost(*out); err != nil {
		return fmt.Errorf("profile compile: %w", err)
	}
	data, err := snapshot.Compile(p, snapshot.Options{Seed: seed, Unseeded: *unseeded})
	if err != nil {
		return err
	}
	return writeAtomic(*out, data)
}

// badFlag names the command and its help; flag.ErrHelp passes as it is.
func badFlag(fs *flag.FlagSet, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%s: %w (see nvmock %s --help)", fs.Name(), err, fs.Name())
}
