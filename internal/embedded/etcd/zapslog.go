package embedetcd

import (
	"context"
	"log/slog"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// slogCore is a zapcore.Core that forwards etcd's zap records to a slog
// handler. It keeps the accumulated With fields as slog attributes.
type slogCore struct {
	h     slog.Handler
	min   zapcore.Level
	attrs []slog.Attr
}

// ClientLogger routes an etcd client's errors to l, as the embedded
// member's own clients do; nil drops them. The hub gives it to its client
// of an external etcd.
func ClientLogger(l *slog.Logger) *zap.Logger { return newZapLogger(l, zapcore.ErrorLevel) }

func newZapLogger(l *slog.Logger, min zapcore.Level) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return zap.New(&slogCore{h: l.Handler(), min: min})
}

func (c *slogCore) Enabled(lvl zapcore.Level) bool {
	return lvl >= c.min && c.h.Enabled(context.Background(), zapToSlogLevel(lvl))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	n := &slogCore{h: c.h, min: c.min, attrs: make([]slog.Attr, 0, len(c.attrs)+len(fields))}
	n.attrs = append(n.attrs, c.attrs...)
	n.attrs = append(n.attrs, fieldsToAttrs(fields)...)
	return n
}

func (c *slogCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(ent.Level) {
		return ce.AddCore(ent, c)
	}
	return ce
}

// Write hands the record to slog. The caller's logger names the component
// (the hub passes one With "component"), so none is added here: adding it
// again repeated the key in JSON logs.
func (c *slogCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	attrs := fieldsToAttrs(fields)
	lvl := zapToSlogLevel(ent.Level)
	if lvl >= slog.LevelError && routine(ent.Message, attrs) {
		lvl = slog.LevelDebug
		if !c.h.Enabled(context.Background(), lvl) {
			return nil
		}
	}
	r := slog.NewRecord(ent.Time, lvl, ent.Message, 0)
	r.AddAttrs(c.attrs...)
	if ent.LoggerName != "" {
		r.AddAttrs(slog.String("logger", ent.LoggerName))
	}
	r.AddAttrs(attrs...)
	return c.h.Handle(context.Background(), r)
}

// routine reports whether an error etcd logs is part of every normal start
// or stop of a single embedded member, not a fault: the storage version it
// cannot set before the member's first raft term, and its listeners
// reporting that they were closed. Logged at ERROR they taught operators
// to ignore the component's errors.
func routine(msg string, attrs []slog.Attr) bool {
	var errText string
	for _, a := range attrs {
		if a.Key == "error" {
			errText = a.Value.String()
		}
	}
	switch msg {
	case "failed to update storage version":
		return strings.Contains(errText, "missing term information")
	case "setting up serving from embedded etcd failed.":
		return strings.Contains(errText, "server closed") || strings.Contains(errText, "Server closed") || strings.Contains(errText, "use of closed network connection")
	}
	return false
}

func (c *slogCore) Sync() error { return nil }

func fieldsToAttrs(fields []zapcore.Field) []slog.Attr {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	return attrs
}

func zapToSlogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}
