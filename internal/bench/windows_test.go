package bench

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/internal/ctxtime"
)

// CPU profiles of chosen stretches of a run (MERIDIAN_BENCH_CPUPROFILES):
// a whole-run profile mixes the first minute, before retention deletes
// anything and etcd's compactor starts, with the steady state after it,
// which costs a fifth more (docs/benchmarks.md, "The tenth round"). A
// profile of each stretch shows what the difference is made of.

// profileWindow is one stretch of the run, from and to its start, and the
// file its CPU profile goes to.
type profileWindow struct {
	from, to time.Duration
	path     string
}

// parseProfileWindows reads "FROM-TO=FILE[,FROM-TO=FILE...]", durations
// from the run's start, the windows in order and not overlapping (one
// CPU profile can run at a time).
func parseProfileWindows(v string) ([]profileWindow, error) {
	var out []profileWindow
	for i, part := range strings.Split(v, ",") {
		span, path, ok := strings.Cut(strings.TrimSpace(part), "=")
		from, to, ok2 := strings.Cut(span, "-")
		if !ok || !ok2 || path == "" {
			return nil, fmt.Errorf("window %d %q: want FROM-TO=FILE, e.g. 20s-60s=early.prof", i+1, part)
		}
		f, err := time.ParseDuration(from)
		if err != nil {
			return nil, fmt.Errorf("window %d %q: from: %w", i+1, part, err)
		}
		t, err := time.ParseDuration(to)
		if err != nil {
			return nil, fmt.Errorf("window %d %q: to: %w", i+1, part, err)
		}
		if f < 0 || t <= f {
			return nil, fmt.Errorf("window %d %q: want 0 <= from < to", i+1, part)
		}
		if n := len(out); n > 0 && f < out[n-1].to {
			return nil, fmt.Errorf("window %d %q: starts before window %d ends (one profile at a time)", i+1, part, n)
		}
		out = append(out, profileWindow{from: f, to: t, path: path})
	}
	return out, nil
}

// profileWindows starts a goroutine that takes each window's CPU profile
// of this process, counting from start; stop ends it (a window still
// open is cut short and written).
func profileWindows(b *testing.B, start time.Time) (stop func()) {
	v := os.Getenv("MERIDIAN_BENCH_CPUPROFILES")
	if v == "" {
		return func() {}
	}
	ws, err := parseProfileWindows(v)
	if err != nil {
		b.Fatalf("MERIDIAN_BENCH_CPUPROFILES: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait := func(at time.Duration) bool { return ctxtime.Sleep(ctx, time.Until(start.Add(at))) }
		for _, w := range ws {
			if !wait(w.from) {
				return
			}
			f, err := os.Create(w.path)
			if err != nil {
				b.Errorf("MERIDIAN_BENCH_CPUPROFILES: %v", err)
				return
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				b.Errorf("MERIDIAN_BENCH_CPUPROFILES: %v (is -test.cpuprofile on too?)", err)
				f.Close()
				return
			}
			ok := wait(w.to)
			pprof.StopCPUProfile()
			f.Close()
			if !ok {
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

func TestParseProfileWindows(t *testing.T) {
	ws, err := parseProfileWindows("20s-60s=a.prof, 100s-2m20s=b.prof")
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0] != (profileWindow{20 * time.Second, 60 * time.Second, "a.prof"}) || ws[1] != (profileWindow{100 * time.Second, 140 * time.Second, "b.prof"}) {
		t.Fatalf("got %+v", ws)
	}
	for v, want := range map[string]string{
		"20s-60s":                  "want FROM-TO=FILE",
		"x-60s=a":                  "from",
		"20s-y=a":                  "to",
		"60s-20s=a":                "from < to",
		"20s-60s=a,50s-70s=b":      "starts before window 1 ends",
		"20s-60s=a,,70s-80s=b":     "window 2",
		"20s-60s=":                 "want FROM-TO=FILE",
		"-5s-10s=a":                "from",
		"20s-60s=a,60s-80s=b,bad=": "window 3",
	} {
		if _, err := parseProfileWindows(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one that says %q", v, err, want)
		}
	}
}
