package embedetcd

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// etcd's routine start and stop messages do not reach the log as errors,
// real errors still do, and no key is repeated in a JSON record.
func TestZapBridgeLevelsAndKeys(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "etcd")
	z := newZapLogger(log, zap.ErrorLevel)
	z.Error("failed to update storage version", zap.String("cluster-version", "3.7.0"), zap.Error(errors.New("cannot detect storage schema version: missing term information")))
	z.Error("setting up serving from embedded etcd failed.", zap.Error(errors.New("http: Server closed")))
	z.Error("setting up serving from embedded etcd failed.", zap.Error(errors.New("mux: server closed")))
	z.Error("failed to apply request", zap.Error(errors.New("mvcc: database space exceeded")))
	z.Warn("below the bridge's level")
	out := buf.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "database space exceeded") || !strings.Contains(lines[0], `"level":"ERROR"`) {
		t.Fatalf("want only the real error, at ERROR; got:\n%s", out)
	}
	if n := strings.Count(lines[0], `"component"`); n != 1 {
		t.Fatalf("component appears %d times: %s", n, lines[0])
	}

	// With debug on, the routine ones are there, as debug.
	buf.Reset()
	dlog := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	newZapLogger(dlog, zap.ErrorLevel).Error("setting up serving from embedded etcd failed.", zap.Error(errors.New("http: Server closed")))
	if !strings.Contains(buf.String(), `"level":"DEBUG"`) {
		t.Fatalf("routine stop message at debug level: %s", buf.String())
	}
}
