package retention

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

// A pass waits between its delete batches so that the deletes take at
// most Config.Duty of its time; at a duty of 1 it deletes back to back.
func TestPassPacesItsBatches(t *testing.T) {
	for _, tc := range []struct {
		duty   float64
		paused bool
	}{{0.5, true}, {1, false}} {
		e := newEnv(t)
		for _, id := range []string{"w1", "w2", "w3", "w4", "w5"} {
			e.put(t, wl{id: id, queue: "a", phase: succeeded, end: t0.Add(-30 * day)})
		}
		r := e.runner(t, Config{Policy: Policy{TTL: day}, BatchSize: 2, Duty: tc.duty}, t0)
		var pauses []time.Duration
		r.sleep = func(_ context.Context, d time.Duration) bool { pauses = append(pauses, d); return true }
		res, err := r.Pass(testCtx(t), e.fence)
		if err != nil || res.Deleted != 5 {
			t.Fatalf("duty %v: %+v, %v", tc.duty, res, err)
		}
		if len(pauses) != 2 {
			t.Fatalf("duty %v: %d pauses for 3 batches, want 2 (between batches only)", tc.duty, len(pauses))
		}
		for _, p := range pauses {
			if (p > 0) != tc.paused {
				t.Fatalf("duty %v: pauses %v", tc.duty, pauses)
			}
		}
	}
}

// A pass cut short while it waits keeps the rest for the next one.
func TestPassStopsDuringItsPause(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"w1", "w2", "w3", "w4", "w5"} {
		e.put(t, wl{id: id, queue: "a", phase: succeeded, end: t0.Add(-30 * day)})
	}
	r := e.runner(t, Config{Policy: Policy{TTL: day}, BatchSize: 2}, t0)
	r.sleep = func(context.Context, time.Duration) bool { return false }
	res, _ := r.Pass(testCtx(t), e.fence)
	if res.Deleted != 2 || res.Deferred != 3 || len(e.workloadIDs(t)) != 3 {
		t.Fatalf("a pass stopped in its first pause: %+v, left %v", res, e.workloadIDs(t))
	}
}

func TestPauseAfter(t *testing.T) {
	for _, tc := range []struct {
		took time.Duration
		duty float64
		want time.Duration
	}{
		{10 * time.Millisecond, 0.5, 10 * time.Millisecond},
		{10 * time.Millisecond, 0.25, 30 * time.Millisecond},
		{10 * time.Millisecond, 1, 0},
		{0, 0.5, 0},
	} {
		if got := pauseAfter(tc.took, tc.duty); got != tc.want {
			t.Errorf("pauseAfter(%v, %v) = %v, want %v", tc.took, tc.duty, got, tc.want)
		}
	}
}

func TestConfigDutyIsAShare(t *testing.T) {
	for _, d := range []float64{-0.1, 1.5, math.NaN()} {
		err := Config{Duty: d}.Validate()
		if err == nil || !strings.Contains(err.Error(), "Config.Duty") {
			t.Errorf("Duty %v: %v, want an error naming Config.Duty", d, err)
		}
	}
	for _, d := range []float64{0, 0.3, 1} {
		if err := (Config{Duty: d}).Validate(); err != nil {
			t.Errorf("Duty %v: %v", d, err)
		}
	}
}
