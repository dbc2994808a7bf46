package live

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParsePercent reads a percentage from 0 to 100 ("80" or "80%").
func ParsePercent(name, s string) (uint32, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil || v < 0 || v > 100 || math.IsNaN(v) {
		return 0, fmt.Errorf("%s %q: a percentage from 0 to 100", name, s)
	}
	return uint32(math.Round(v)), nil
}

// ParseTrigger reads a fault's trigger, given as at most one of: calls
// after which it fires, a probability per call, a time (RFC 3339), or a
// delay from now. None is now.
func ParseTrigger(after, prob, at, in string, now func() int64) (uint32, uint64, error) {
	set := 0
	for _, v := range []string{after, prob, at, in} {
		if v != "" {
			set++
		}
	}
	if set > 1 {
		return 0, 0, errors.New("give one trigger: --after-calls, --probability, --at or --in")
	}
	switch {
	case after != "":
		n, err := strconv.ParseUint(after, 10, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("--after-calls %q: a number of calls", after)
		}
		return TriggerCalls, n, nil
	case prob != "":
		p, err := strconv.ParseFloat(prob, 64)
		if err != nil || p < 0 || p > 1 || math.IsNaN(p) {
			return 0, 0, fmt.Errorf("--probability %q: a probability from 0 to 1", prob)
		}
		return TriggerProbability, uint64(p * (1 << 32)), nil // 1 is 2^32: every draw is below it
	case at != "":
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return 0, 0, fmt.Errorf("--at %q: a time in RFC 3339, e.g. 2026-12-01T20:00:00Z", at)
		}
		return TriggerAt, uint64(t.UnixNano()), nil
	case in != "":
		d, err := time.ParseDuration(in)
		if err != nil || d < 0 {
			return 0, 0, fmt.Errorf("--in %q: a duration such as 30s or 5m", in)
		}
		return TriggerAt, uint64(now() + int64(d)), nil
	}
	return TriggerAt, uint64(now()), nil
}
