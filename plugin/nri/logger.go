package nri

import (
	"context"

	"github.com/sirupsen/logrus"
)

// stubLogger adapts the plugin's logrus logger to NRI's logger interface,
// so the stub's lines carry the same fields as ours.
type stubLogger struct{ l *logrus.Entry }

func (s stubLogger) Debugf(_ context.Context, f string, a ...any) { s.l.Debugf(f, a...) }
func (s stubLogger) Infof(_ context.Context, f string, a ...any)  { s.l.Infof(f, a...) }
func (s stubLogger) Warnf(_ context.Context, f string, a ...any)  { s.l.Warnf(f, a...) }
func (s stubLogger) Errorf(_ context.Context, f string, a ...any) { s.l.Errorf(f, a...) }
