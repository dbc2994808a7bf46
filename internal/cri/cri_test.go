package cri

import "testing"

func TestLogJoinsPartialLinesAndDropsPrefixes(t *testing.T) {
	in := "2026-11-29T16:52:36.3Z stdout F hello\n" +
		"2026-11-29T16:52:36.4Z stderr P a long \n" +
		"2026-11-29T16:52:36.4Z stderr F line\n" +
		"2026-11-29T16:52:36.5Z stdout F \n" +
		"garbage\n"
	if got, want := Log([]byte(in)), "hello\na long line\n\n"; got != want {
		t.Errorf("Log = %q, want %q", got, want)
	}
}
