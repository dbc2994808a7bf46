package nri

import (
	"context"
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
)

// stubLogger adapts the plugin's logrus logger to NRI's logger interface,
// so the stub's lines carry the same fields as ours.
type stubLogger struct{ l *logrus.Entry }

func (s stubLogger) Debugf(_ context.Context, f string, a ...any) { s.l.Debugf(f, a...) }
func (s stubLogger) Infof(_ context.Context, f string, a ...any)  { s.l.Infof(f, a...) }
func (s stubLogger) Warnf(_ context.Context, f string, a ...any)  { s.l.Warnf(f, a...) }
func (s stubLogger) Errorf(_ context.Context, f string, a ...any) { s.l.Errorf(f, a...) }

// klogSink carries client-go's lines (klog, through the logr logger of a
// context) into the plugin's logger, at debug level, with their key/value
// pairs as fields: those up to klog's V(4), not the request and response
// dumps of V(6) and above.
type klogSink struct {
	l      *logrus.Entry
	name   string
	values []any
}

func (s klogSink) Init(logr.RuntimeInfo) {}
func (s klogSink) Enabled(v int) bool {
	return v <= 4 && s.l.Logger.IsLevelEnabled(logrus.DebugLevel)
}
func (s klogSink) Info(_ int, msg string, kv ...any) {
	s.entry(kv).Debug(msg)
}
func (s klogSink) Error(err error, msg string, kv ...any) {
	s.entry(kv).WithError(err).Debug(msg)
}
func (s klogSink) WithValues(kv ...any) logr.LogSink {
	s.values = append(slices.Clip(s.values), kv...)
	return s
}
func (s klogSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	s.name = name
	return s
}

func (s klogSink) entry(kv []any) *logrus.Entry {
	f := logrus.Fields{}
	if s.name != "" {
		f["logger"] = s.name
	}
	all := append(slices.Clip(s.values), kv...)
	for i := 0; i+1 < len(all); i += 2 {
		f[fmt.Sprint(all[i])] = all[i+1]
	}
	return s.l.WithFields(f)
}
