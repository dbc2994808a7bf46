package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/profile"
)

const ctlUsage = `Usage: nvmock ctl [--state PATH] COMMAND ...

Changes the live state of a mock node: every process using its library sees
the change at its next call (docs/live-state.md).

  load GPUS PERCENT [--memory P] [--encoder P] [--decoder P] [--jitter P]
        set the load; utilization, power, temperature, clocks and energy follow
  fault GPUS KIND [--xid N] [--count N] [--link N] [--pid PID]
        [--after-calls N | --probability P | --at TIME | --in DURATION]
        inject a fault: lost, ecc_uncorrectable, ecc_correctable, thermal,
        power_brake, nvlink_down, remap_failure, xid (with --xid)
  xid GPUS XID        report an XID now, with what it does on real hardware
  clear GPUS [KIND] [--load]
        remove faults (all, or one kind); --load also ends the load: the GPU
        goes idle from where it stands (it cools; energy keeps counting)
  proc add GPU PID [--gi N [--ci N]] [--name NAME] [--memory SIZE] [--type compute|graphics|both]
  proc rm PID [--gpu N]
        register or remove a process on a GPU, or on the MIG device of
        GPU instance --gi and compute instance --ci (default 0)
  mig LAYOUT          partition the GPUs as at install (docs/mig.md): all-PROFILE,
                      all-balanced, all-enabled, all-disabled, or per GPU,
                      '0-3=3g.20gb*2;4-7=all-1g.5gb' (quoted); GPUs it does not
                      name keep what they have
  ib [down HCA | up HCA | errors HCA COUNTER:N,... | clear [HCA]]
        list or change InfiniBand port faults: a cable out (down, counting
        link_downed), back (up), PMA error counters such as symbol_error:12
        (docs/infiniband.md)
  apply FILE          make the loads and faults those a file lists, clearing
                      others (docs/live-state.md)
  status [--json]     show loads, faults and processes
  create [--gpus N] [--seed S]
        make a fresh state file (or reset one in place) for a snapshot used
        directly (NVMOCK_SNAPSHOT): N defaults to the snapshot beside it
  clock freeze [TIME|now] | clock thaw | clock advance DURATION
        stop, restart or step the state's clock (for tests that assert traces)

GPUS is "all", an index, a list "0,3" or a range "0-3". TIME is RFC 3339.
The state is --state, else $NVMOCK_STATE, else nvmock exec's node, else
/var/lib/nvmock/live/state.
`

// ctlSubUsage is one command's part of ctlUsage (its lines, up to the next
// command's), for its --help; the whole for a name it does not have.
func ctlSubUsage(name string) string {
	lines := strings.Split(ctlUsage, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "  "+name+" ") && l != "  "+name {
			continue
		}
		j := i + 1
		for j < len(lines) && (strings.HasPrefix(lines[j], "      ") || strings.HasPrefix(lines[j], "  "+name+" ")) {
			j++
		}
		return "Usage: nvmock ctl [--state PATH] " + strings.TrimSpace(strings.Join(lines[i:j], "\n")) + "\n\n"
	}
	return ctlUsage
}

// ctlCommands are ctl's commands, known before a state is looked for.
var ctlCommands = []string{"create", "load", "fault", "xid", "clear", "proc", "status", "clock", "apply", "mig", "ib"}

func ctlCmd(args []string) error {
	fs := flag.NewFlagSet("ctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	statePath := fs.String("state", "", "state file")
	if err := onceEach(fs, func() error { return fs.Parse(args) }); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Print(ctlUsage)
			return nil
		}
		return fmt.Errorf("ctl: %w", err)
	}
	if err := refuseEmpty(fs); err != nil {
		return fmt.Errorf("ctl: %w (see nvmock ctl --help)", err)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprint(os.Stderr, ctlUsage)
		return errors.New("ctl: no command given")
	}
	if rest[0] == "help" {
		fmt.Print(ctlUsage)
		return nil
	}
	if slices.ContainsFunc(rest[1:], isHelp) {
		fmt.Print(ctlSubUsage(rest[0])) // before the state: help needs no node
		return nil
	}
	if !slices.Contains(ctlCommands, rest[0]) {
		return fmt.Errorf("ctl: unknown command %q; see nvmock ctl help", rest[0])
	}
	if slices.ContainsFunc(rest[1:], isStateFlag) {
		return fmt.Errorf("ctl: --state goes before the command: nvmock ctl --state PATH %s ...", rest[0])
	}
	path, err := live.Find(*statePath)
	if err != nil {
		return fmt.Errorf("ctl: %w", err)
	}
	if rest[0] == "create" {
		if err := ctlCreate(path, rest[1:]); err != nil {
			return fmt.Errorf("ctl create: %w", err)
		}
		return nil
	}
	f, err := live.Open(path)
	if err != nil {
		return fmt.Errorf("ctl: %w", err)
	}
	defer f.Close()
	return ctlOn(f, path, rest[0], rest[1:])
}

// ctlOn runs one command on the state f maps.
func ctlOn(f *live.File, path, cmd string, cargs []string) (err error) {
	// Review: a state cut short under the mapping ended ctl with a stack.
	defer live.GuardFaults()()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("ctl: %w", live.FaultError(r, path))
		}
	}()
	if err := live.AgreesWithSnapshot(path, &f.Read().Header); err != nil && cmd != "ib" {
		return fmt.Errorf("ctl: %w", err)
	}
	switch cmd {
	case "load":
		err = ctlLoad(f, cargs)
	case "fault":
		err = ctlFault(f, cargs)
	case "xid":
		err = ctlXID(f, cargs)
	case "clear":
		err = ctlClear(f, cargs)
	case "proc":
		err = ctlProc(f, cargs)
	case "status":
		err = ctlStatus(f, cargs, os.Stdout)
	case "clock":
		err = ctlClock(f, cargs)
	case "apply":
		err = ctlApply(f, cargs)
	case "mig":
		err = ctlMIG(f, cargs)
	case "ib":
		err = ctlIB(path, cargs, os.Stdout)
	default:
		err = fmt.Errorf("unknown command %q; see nvmock ctl help", cmd)
	}
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ctl %s: %w", cmd, err)
	}
	return nil
}

// isStateFlag says whether a is ctl's own --state, given after a command.
func isStateFlag(a string) bool {
	f := strings.TrimLeft(a, "-")
	return f != a && (f == "state" || strings.HasPrefix(f, "state="))
}

// ctlFlags parses interspersed flags and returns the positional arguments.
func ctlFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	for i, a := range args {
		// The flag package would call a negative argument an unknown flag;
		// a flag's negative value its own check refuses.
		afterFlag := i > 0 && strings.HasPrefix(args[i-1], "-") && !strings.Contains(args[i-1], "=")
		if _, err := strconv.ParseFloat(a, 64); err == nil && strings.HasPrefix(a, "-") && !afterFlag {
			return nil, fmt.Errorf("argument %d, %s: no GPU, percentage, pid or count is negative", i+1, a)
		}
	}
	fs.SetOutput(io.Discard)
	pos, err := parseInterspersed(fs, args, ctlUsage) // each flag once
	if m := unknownFlagErr.FindStringSubmatch(fmt.Sprint(err)); m != nil {
		return nil, fmt.Errorf("unknown flag --%s (see nvmock ctl help)", m[1])
	}
	if m := flagValueErr.FindStringSubmatch(fmt.Sprint(err)); m != nil {
		// The flag package's own words name the flag with one dash.
		what := "not a valid value"
		if f := fs.Lookup(m[2]); f != nil && strings.Contains(fmt.Sprintf("%T", f.Value), "uint") {
			what = "not a whole number of 0 or more"
		}
		return nil, fmt.Errorf("--%s %q: %s", m[2], m[1], what)
	}
	if err != nil {
		return nil, err
	}
	return pos, nil
}

var (
	flagValueErr   = regexp.MustCompile(`invalid value "(.*)" for flag -(\S+): `)
	unknownFlagErr = regexp.MustCompile(`^flag provided but not defined: -+(\S+)`)
)

func ctlLoad(f *live.File, args []string) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	mem := fs.String("memory", "", "memory utilization % (default: half the load)")
	enc := fs.String("encoder", "0", "encoder utilization %")
	dec := fs.String("decoder", "0", "decoder utilization %")
	jit := fs.String("jitter", "0", "noise on utilization, % either way")
	pos, err := ctlFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return errors.New("want GPUS PERCENT, e.g. nvmock ctl load all 80")
	}
	var l live.Loads
	if l.GPU, err = live.ParsePercent("load", pos[1]); err != nil {
		return err
	}
	l.Memory = l.GPU / 2
	if *mem != "" {
		if l.Memory, err = live.ParsePercent("--memory", *mem); err != nil {
			return err
		}
	}
	if l.Encoder, err = live.ParsePercent("--encoder", *enc); err != nil {
		return err
	}
	if l.Decoder, err = live.ParsePercent("--decoder", *dec); err != nil {
		return err
	}
	if l.Jitter, err = live.ParsePercent("--jitter", *jit); err != nil {
		return err
	}
	boards, err := live.Boards(f.Path)
	if err != nil {
		return err
	}
	return f.Update(func(s *live.State, now int64) error {
		gpus, err := profile.ParseGPUs(pos[0], int(s.Header.Gpus))
		if err != nil {
			return err
		}
		for _, g := range gpus {
			if g >= len(boards) {
				return fmt.Errorf("GPU %d: the snapshot has %d GPUs; reinstall the node", g, len(boards))
			}
			if err := boards[g].CheckLoad(g, l); err != nil {
				return fmt.Errorf("--encoder: %w", err)
			}
			s.SetLoad(boards[g], g, l, now)
		}
		return nil
	})
}

func ctlFault(f *live.File, args []string) error {
	fs := flag.NewFlagSet("fault", flag.ContinueOnError)
	xid := fs.Uint("xid", 0, "the XID it reports (default: the kind's)")
	count := fs.Uint("count", 0, "ECC errors it adds (default 1; 100 for ecc_correctable)")
	link := fs.Uint("link", 0, "the NVLink nvlink_down takes down")
	pid := fs.Uint("pid", 0, "hit only this process (its pid as it sees itself)")
	after := fs.String("after-calls", "", "trigger after N calls on the GPU, counted in each process")
	prob := fs.String("probability", "", "trigger with this probability per call, in each process")
	at := fs.String("at", "", "trigger at this time (RFC 3339)")
	in := fs.String("in", "", "trigger after this duration")
	pos, err := ctlFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return errors.New("want GPUS KIND, e.g. nvmock ctl fault 3 ecc_uncorrectable")
	}
	kind, ok := live.Kinds[pos[1]]
	if !ok {
		return fmt.Errorf("kind %q: one of lost, ecc_uncorrectable, ecc_correctable, thermal, power_brake, nvlink_down, remap_failure, xid", pos[1])
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *xid > live.MaxXID || (set["xid"] && *xid == 0) {
		return fmt.Errorf("--xid %d: not an XID (1 to %d)", *xid, live.MaxXID)
	}
	if kind == live.FaultXID && *xid == 0 {
		return errors.New("a fault of kind xid needs --xid N")
	}
	if set["count"] && (*count < 1 || *count > math.MaxUint32) {
		return fmt.Errorf("--count %d: give 1 to %d, or leave it out", *count, uint32(math.MaxUint32))
	}
	// 0 would be every process; PID_MAX_LIMIT is 2^22.
	if set["pid"] && (*pid < 1 || *pid > 1<<22) {
		return fmt.Errorf("--pid %d: not a process id (1 to %d)", *pid, 1<<22)
	}
	if err := live.CheckFaultFields(kind, set["link"], set["count"], set["xid"], [3]string{"--link", "--count", "--xid"}); err != nil {
		return err
	}
	fault := live.FaultOf(kind, uint32(*xid), uint32(*count), uint32(*link), uint32(*pid))
	// The boards say which faults a GPU can have; a state without its
	// snapshot takes any but nvlink_down, whose link needs them.
	boards, err := live.Boards(f.Path)
	if err != nil && kind == live.FaultNvlinkDown {
		return err
	}
	var already []string
	err = f.Update(func(s *live.State, now int64) error {
		already = nil
		var err error
		if fault.Trigger, fault.Param, err = live.ParseTrigger(*after, *prob, *at, *in, func() int64 { return now }, live.TriggerFlags); err != nil {
			return err
		}
		gpus, err := profile.ParseGPUs(pos[0], int(s.Header.Gpus))
		if err != nil {
			return err
		}
		for _, g := range gpus {
			if err := live.CheckFaultOn(boards, g, fault, "", "--link"); err != nil {
				return err
			}
			if err := s.AddFault(g, fault, now); err != nil {
				oa := (*live.OnAlready)(nil)
				if !errors.As(err, &oa) {
					return err
				}
				already = append(already, err.Error())
			}
		}
		if len(already) > 0 && len(already) == len(gpus) {
			// Nothing changed: say so as an error (review: a second slot).
			return fmt.Errorf("%s; nvmock ctl clear ends it", already[0])
		}
		return nil
	})
	if err == nil {
		for _, a := range already {
			fmt.Fprintf(os.Stderr, "nvmock ctl: %s; left as it is\n", a)
		}
	}
	return err
}

func ctlXID(f *live.File, args []string) error {
	args, err := ctlFlags(flag.NewFlagSet("xid", flag.ContinueOnError), args)
	if err != nil {
		return err
	}
	if len(args) != 2 {
		return errors.New("want GPUS XID, e.g. nvmock ctl xid 0 79")
	}
	x, err := strconv.ParseUint(args[1], 10, 32)
	if err != nil || x == 0 || x > live.MaxXID {
		return fmt.Errorf("XID %q: not an XID (1 to %d)", args[1], live.MaxXID)
	}
	// An ECC or NVLink XID on a GPU that has them (with its snapshot).
	boards, _ := live.Boards(f.Path)
	return f.Update(func(s *live.State, now int64) error {
		gpus, err := profile.ParseGPUs(args[0], int(s.Header.Gpus))
		if err != nil {
			return err
		}
		for _, g := range gpus {
			if err := live.CheckFaultOn(boards, g, live.Fault{Kind: live.FaultXID, XID: uint32(x)}, "", ""); err != nil {
				return err
			}
			if err := s.XID(g, uint32(x), now); err != nil {
				return err
			}
		}
		return nil
	})
}

func ctlClear(f *live.File, args []string) error {
	fs := flag.NewFlagSet("clear", flag.ContinueOnError)
	load := fs.Bool("load", false, "also end the load: the GPU goes idle from where its readings stand")
	pos, err := ctlFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return errors.New("want GPUS [KIND], e.g. nvmock ctl clear all")
	}
	var kind uint32
	if len(pos) == 2 {
		var ok bool
		if kind, ok = live.Kinds[pos[1]]; !ok {
			return fmt.Errorf("kind %q: not a fault kind", pos[1])
		}
	}
	boards, _ := live.Boards(f.Path) // none: static readings
	removed := 0
	err = f.Update(func(s *live.State, now int64) error {
		gpus, err := profile.ParseGPUs(pos[0], int(s.Header.Gpus))
		if err != nil {
			return err
		}
		removed = 0
		for _, g := range gpus {
			if g < len(boards) {
				s.Cut(boards[g], g, now) // a brake's time so far stays braked
			}
			removed += s.ClearFaults(g, kind)
			if !*load {
				continue
			}
			// Ending the load resets the GPU's readings, faults too: the
			// faults of other kinds go back.
			kept := s.GPUs[g]
			if g < len(boards) {
				s.ResetToIdle(boards[g], g, now)
			} else {
				s.ResetReadings(g)
			}
			s.GPUs[g].KeepFaults(&kept)
		}
		return nil
	})
	// Not an error (teardowns clear what may not be there), but said: an
	// XID such as 79 is kept as the fault it brings (lost), which
	// clearing "xid" leaves (review).
	if err == nil && removed == 0 && kind != 0 && !*load {
		fmt.Fprintf(os.Stderr, "nvmock ctl clear: no %s fault on GPUs %s, so none cleared (nvmock ctl status lists their faults)\n", pos[1], pos[0])
	}
	return err
}

var procTypes = map[string]uint32{"compute": 1, "graphics": 2, "both": 3}

// procTypeNames are the types as nvidia-smi's process table shows them.
var procTypeNames = map[uint32]string{1: "C", 2: "G", 3: "C+G"}

// wholeLiveProcess refuses a thread's id, which NVML never lists (a
// driver reports processes), and a zombie, whose GPU context ended with it.
func wholeLiveProcess(pid uint64) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil // not visible here: the namespace check above decides
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch {
		case k == "Tgid" && v != strconv.FormatUint(pid, 10):
			return fmt.Errorf("pid %d is a thread of process %s; register the process", pid, v)
		case k == "State" && strings.HasPrefix(v, "Z"):
			return fmt.Errorf("pid %d has exited (a zombie its parent has not reaped)", pid)
		}
	}
	return nil
}

func ctlProc(f *live.File, args []string) error {
	if len(args) == 0 {
		return errors.New("want add or rm")
	}
	switch args[0] {
	case "add":
		fs := flag.NewFlagSet("proc add", flag.ContinueOnError)
		name := fs.String("name", "", "process name (default: the pid's command, if visible)")
		mem := fs.String("memory", "0", "GPU memory it uses, e.g. 20GiB")
		typ := fs.String("type", "compute", "compute, graphics or both")
		gi := fs.Int("gi", -1, "GPU instance id of the MIG device it runs on")
		ci := fs.Int("ci", -1, "compute instance id of that MIG device (default 0)")
		pos, err := ctlFlags(fs, args[1:])
		if err != nil {
			return err
		}
		var mig *live.MIGRef
		switch {
		case *gi < -1:
			return fmt.Errorf("--gi %d: not a GPU instance id (nvidia-smi mig -lgi lists them)", *gi)
		case *ci < -1:
			return fmt.Errorf("--ci %d: not a compute instance id (nvidia-smi mig -lci lists them)", *ci)
		case *gi >= 0:
			mig = &live.MIGRef{GI: *gi, CI: max(*ci, 0)}
		case *ci >= 0:
			return errors.New("--ci needs --gi, the GPU instance it is in")
		}
		if len(pos) != 2 {
			return errors.New("want add GPU PID, e.g. nvmock ctl proc add 0 1234 --memory 20GiB")
		}
		pid, err := strconv.ParseUint(pos[1], 10, 32)
		if err != nil || pid == 0 {
			return fmt.Errorf("pid %q: not a process id", pos[1])
		}
		q, err := profile.ParseQuantity(*mem)
		if err != nil {
			return fmt.Errorf("--memory: %w", err)
		}
		t, ok := procTypes[*typ]
		if !ok {
			return fmt.Errorf("--type %q: compute, graphics or both", *typ)
		}
		ns := live.PIDNamespace()
		// A zombie is named as one before Dead counts it with the gone.
		if err := wholeLiveProcess(pid); err != nil {
			return err
		}
		if live.Dead(live.Process{PID: uint32(pid), PIDNS: ns}) {
			return fmt.Errorf("pid %d: no such process here (one that has exited is dropped at once)", pid)
		}
		switch {
		case strings.ContainsFunc(*name, unicode.IsControl):
			return fmt.Errorf("--name %q: has a control character", *name)
		case len(*name) > live.MaxProcessName:
			return fmt.Errorf("--name: %d bytes; the node keeps at most %d", len(*name), live.MaxProcessName)
		}
		if *name == "" {
			if b, err := os.ReadFile("/proc/" + pos[1] + "/cmdline"); err == nil {
				*name, _, _ = strings.Cut(string(b), "\x00")
			}
		}
		var devs []snapshot.Device
		if q > 0 {
			if devs, err = live.Snapshot(f.Path); err != nil {
				return err
			}
		}
		return f.Update(func(s *live.State, now int64) error {
			gpus, err := profile.ParseGPUs(pos[0], int(s.Header.Gpus))
			if err != nil {
				return err
			}
			// Gone first: an exited process holds no memory (the library
			// already shows none).
			s.RemoveProcesses(live.Dead)
			for _, g := range gpus {
				p := live.Process{PID: uint32(pid), GPU: g, MIG: mig, Type: t, UsedBytes: uint64(q), Name: *name, Owner: "ctl", PIDNS: ns}
				if err := s.AddProcess(p, now); err != nil {
					return err
				}
				if devs != nil {
					if err := s.CheckMemory(p, devs); err != nil {
						return fmt.Errorf("--memory %s: %w", *mem, err)
					}
				}
			}
			return nil
		})
	case "rm":
		fs := flag.NewFlagSet("proc rm", flag.ContinueOnError)
		gpu := fs.Int("gpu", -1, "only on this GPU")
		pos, err := ctlFlags(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return errors.New("want rm PID")
		}
		pid, err := strconv.ParseUint(pos[0], 10, 32)
		if err != nil {
			return fmt.Errorf("pid %q: not a process id", pos[0])
		}
		return f.Update(func(s *live.State, now int64) error {
			if *gpu >= int(s.Header.Gpus) || *gpu < -1 {
				return fmt.Errorf("--gpu %d: the node has GPUs 0 to %d", *gpu, int(s.Header.Gpus)-1)
			}
			n := s.RemoveProcesses(func(p live.Process) bool {
				return p.PID == uint32(pid) && (*gpu < 0 || p.GPU == *gpu)
			})
			if n == 0 && *gpu >= 0 {
				return fmt.Errorf("pid %d is not registered on GPU %d", pid, *gpu)
			}
			if n == 0 {
				return fmt.Errorf("pid %d is not registered", pid)
			}
			s.RemoveProcesses(live.Dead)
			return nil
		})
	}
	return fmt.Errorf("proc %q: want add or rm", args[0])
}

func ctlClock(f *live.File, args []string) error {
	if len(args) == 0 {
		return errors.New("want freeze, thaw or advance")
	}
	boards, _ := live.Boards(f.Path) // none: no GPU runs the model
	return f.Update(func(s *live.State, now int64) error {
		s.FollowClock(boards, now)
		defer func() { s.ClockMoved(boards, now, s.Now()) }()
		switch {
		case args[0] == "freeze" && len(args) <= 2:
			t := now
			if len(args) == 2 && args[1] != "now" {
				p, err := time.Parse(time.RFC3339Nano, args[1])
				if err != nil {
					return fmt.Errorf("%q: a time in RFC 3339", args[1])
				}
				// The clock counts nanoseconds since 1970 in an int64.
				if p.Before(time.Unix(0, 0)) || p.After(time.Unix(0, math.MaxInt64)) {
					return fmt.Errorf("%q: a time from 1970 to 2262", args[1])
				}
				t = p.UnixNano()
			}
			s.Header.Frozen, s.Header.FrozenNS = 1, uint64(t)
		case args[0] == "thaw" && len(args) == 1:
			s.Header.Frozen, s.Header.FrozenNS = 0, 0
		case args[0] == "advance" && len(args) == 2:
			d, err := time.ParseDuration(args[1])
			if err != nil || d < 0 {
				return fmt.Errorf("%q: a duration such as 30s", args[1])
			}
			if s.Header.Frozen == 0 {
				return errors.New("the clock runs; freeze it first")
			}
			if s.Header.FrozenNS > math.MaxInt64-uint64(d) {
				return fmt.Errorf("%q: the clock would pass 2262", args[1])
			}
			s.Header.FrozenNS += uint64(d)
		default:
			return errors.New("want freeze [TIME|now], thaw or advance DURATION")
		}
		return nil
	})
}

func ctlApply(f *live.File, args []string) error {
	if len(args) != 1 {
		return errors.New("want FILE, e.g. nvmock ctl apply live.yaml")
	}
	spec, err := live.ReadSpec(args[0])
	if err != nil {
		return err
	}
	// The boards also take loaded GPUs to idle without their counters
	// going back; without a snapshot they return to static readings.
	boards, err := live.Boards(f.Path)
	if err != nil && spec.NeedsBoards() {
		return err
	}
	return f.Update(func(s *live.State, now int64) error {
		if err := spec.Apply(s, boards, now); err != nil {
			return fmt.Errorf("%s: %w", args[0], err)
		}
		return nil
	})
}

// ctlMIG partitions the node's GPUs with a layout, as hostprep install
// --mig does, replacing the instances of the GPUs it names.
func ctlMIG(f *live.File, args []string) error {
	if len(args) != 1 {
		return errors.New("want LAYOUT, e.g. nvmock ctl mig all-1g.5gb")
	}
	devs, err := live.Snapshot(f.Path)
	if err != nil {
		return err
	}
	var table *profile.MIG
	for i := range devs {
		if table = live.MIGTable(&devs[i]); table != nil {
			break
		}
	}
	l, err := profile.ParseMIGLayout(args[0], table, len(devs))
	if err != nil {
		return err
	}
	return f.Update(func(s *live.State, _ int64) error {
		s.RemoveProcesses(live.Dead) // they hold no instance
		return s.ApplyMIGLayout(devs, l)
	})
}

func ctlCreate(path string, args []string) error {
	fs := flag.NewFlagSet("create", flag.ContinueOnError)
	gpus := fs.Int("gpus", 0, "GPUs of the node (default: the snapshot beside the state)")
	seed := fs.String("seed", "", "noise seed (default: the node's name)")
	pos, err := ctlFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q; create takes only --gpus and --seed", pos[0])
	}
	if !live.IsState(path) {
		return fmt.Errorf("%s exists and is not nvmock's live state; move it away or give another --state", path)
	}
	// Another layout's state is replaced by a new file, which an
	// installed overlay's link would not name: install relinks it.
	var st syscall.Stat_t
	if syscall.Stat(path, &st) == nil && st.Size != live.Size && st.Size != 0 && st.Nlink > 1 {
		return fmt.Errorf("%s: %d bytes, not a state of this nvmock (%d bytes), and an installed node's; reinstall the node (nvmock hostprep install), which resets it", path, st.Size, live.Size)
	}
	n := *gpus
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "gpus" })
	if given && (n < 1 || n > profile.MaxGPUs) {
		return fmt.Errorf("--gpus %d: a node has 1 to %d GPUs", n, profile.MaxGPUs)
	}
	// A snapshot beside the state is the node: the state must agree.
	boards, err := live.Boards(path)
	switch {
	case err == nil && given && n != len(boards):
		return fmt.Errorf("--gpus %d: the snapshot beside %s has %d GPUs; leave --gpus out", n, path, len(boards))
	case err == nil:
		n = len(boards)
	case !given:
		return fmt.Errorf("%w; or give --gpus", err)
	}
	if *seed == "" {
		*seed, _ = os.Hostname()
	}
	return live.Create(path, n, hostprep.StateSeed(*seed))
}
