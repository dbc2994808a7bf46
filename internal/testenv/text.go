package testenv

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"sync"
)

// ReadEnvFile reads KEY=VALUE lines, as the node scripts write them.
func ReadEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env, sc.Err()
}

// Lines are the non-empty lines of s.
func Lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// SyncBuffer is a buffer that several goroutines write while a test reads
// it: a child's stdout and stderr are copied by goroutines of their own.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WaitListen defines the shell function waitlisten PORT, which returns
// once a TCP socket listens on PORT in the caller's network (or fails
// after 30 s): a client started after it never races its server's
// start, however loaded the machine.
const WaitListen = `waitlisten() { n=0; p=$(printf '%04X' "$1")
	until grep -Eq "^ *[0-9]+: [0-9A-F]+:$p [0-9A-F]+:[0-9A-F]+ 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
		n=$((n+1)); [ $n -lt 300 ] || { echo "nothing listens on port $1 after 30 s" >&2; return 1; }; sleep 0.1
	done; }
`
