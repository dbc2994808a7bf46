package live

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParsePercent reads a percentage from 0 to 100 ("80" or "80%").
func ParsePercent(name, s string) (uint32, error) {
	// Whole, as NVML reports utilization: 50.5 would be read as 51. In
	// digits only: 1e2 or 0x50 would read as a typo's number.
	v, err := strconv.ParseUint(strings.TrimSuffix(s, "%"), 10, 32)
	if err != nil || v > 100 {
		return 0, fmt.Errorf("%s %q: a whole percentage from 0 to 100", name, s)
	}
	return uint32(v), nil
}

// Trigger names, as a message calls the four: the command's flags, or an
// apply file's fields.
var (
	TriggerFlags  = [4]string{"--after-calls", "--probability", "--at", "--in"}
	TriggerFields = [4]string{"afterCalls", "probability", "at", "in"}
)

// ParseTrigger reads a fault's trigger, given as at most one of: calls
// after which it fires, a probability per call, a time (RFC 3339), or a
// delay from now. None is now. names are how messages call the four.
func ParseTrigger(after, prob, at, in string, now func() int64, names [4]string) (uint32, uint64, error) {
	set := 0
	for _, v := range []string{after, prob, at, in} {
		if v != "" {
			set++
		}
	}
	if set > 1 {
		return 0, 0, fmt.Errorf("give one trigger: %s", strings.Join(names[:], ", "))
	}
	switch {
	case after != "":
		n, err := strconv.ParseUint(after, 10, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("%s %q: a number of calls from 0 to %d", names[0], after, uint32(math.MaxUint32))
		}
		return TriggerCalls, n, nil
	case prob != "":
		p, err := strconv.ParseFloat(prob, 64)
		if err != nil || p < 0 || p > 1 || math.IsNaN(p) {
			return 0, 0, fmt.Errorf("%s %q: a probability from 0 to 1", names[1], prob)
		}
		// The library draws 32 bits a call: 1 is 2^32, every draw below it.
		if q := uint64(p * (1 << 32)); q == 0 {
			return 0, 0, fmt.Errorf("%s %q: never fires; the least is 1/2^32 (%.3g)", names[1], prob, 1.0/(1<<32))
		} else {
			return TriggerProbability, q, nil
		}
	case at != "":
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return 0, 0, fmt.Errorf("%s %q: a time in RFC 3339, e.g. 2026-12-01T20:00:00Z", names[2], at)
		}
		// The clock counts nanoseconds since 1970 in an int64.
		if t.Before(time.Unix(0, 0)) || t.After(time.Unix(0, math.MaxInt64)) {
			return 0, 0, fmt.Errorf("%s %q: a time from 1970 to 2262", names[2], at)
		}
		return TriggerAt, uint64(t.UnixNano()), nil
	case in != "":
		d, err := time.ParseDuration(in)
		if err != nil || d < 0 {
			return 0, 0, fmt.Errorf("%s %q: a duration such as 30s or 5m", names[3], in)
		}
		n := now()
		if n > math.MaxInt64-int64(d) {
			return 0, 0, fmt.Errorf("%s %q: the time would pass 2262", names[3], in)
		}
		return TriggerAt, uint64(n + int64(d)), nil
	}
	return TriggerAt, uint64(now()), nil
}

// CheckFaultFields refuses what a kind of fault does not take: a link
// (nvlink_down's), a count of errors (the ECC kinds'), or an XID (thermal
// and power_brake report none), which would be silently ignored, or mean
// another thing. names are how messages call the three.
func CheckFaultFields(kind uint32, link, count, xid bool, names [3]string) error {
	switch {
	case xid && (kind == FaultThermal || kind == FaultPowerBrake):
		return fmt.Errorf("%s: a slowdown reports no XID", names[2])
	case link && kind != FaultNvlinkDown:
		return fmt.Errorf("%s is for nvlink_down only", names[0])
	case count && kind != FaultECC && kind != FaultSBE:
		return fmt.Errorf("%s is for ecc_uncorrectable and ecc_correctable only", names[1])
	}
	return nil
}
