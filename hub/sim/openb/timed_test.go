package openb

import (
	"testing"
	"time"
)

// The time-based replay of the OpenB default list with starving gangs:
// backfill with max_runtime starts the gangs no later on average than
// without it, and uses the held nodes (Backfilled > 0) for higher
// utilisation. Figures: docs/benchmarks.md.
func TestTimedReplayBackfill(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPED in -short: the replay takes about a minute")
	}
	nodes, pods := loadTrace(t, "default")
	run := func(e Estimate) *TimedResult {
		r, err := ReplayTimed(nodes, pods, TimedConfig{Nodes: 4, Model: "G2", Gangs: 6, GangReplicas: 2, GangDuration: 4 * time.Hour, Estimate: e, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-5s util %.2f%% gang wait avg %s %v pod wait avg %s backfilled %d cycles %d span %s",
			e, r.UtilPct, r.GangWaitAvg.Round(time.Minute), r.GangWaits, r.PodWaitAvg.Round(time.Second), r.Backfilled, r.Cycles, r.Span.Round(time.Hour))
		return r
	}
	none, exact, noisy := run(EstimateNone), run(EstimateExact), run(EstimateNoisy)
	if none.Backfilled != 0 {
		t.Fatalf("without max_runtime %d dispatches backfilled", none.Backfilled)
	}
	if exact.Backfilled == 0 || noisy.Backfilled == 0 {
		t.Fatalf("with max_runtime nothing backfilled (exact %d, noisy %d)", exact.Backfilled, noisy.Backfilled)
	}
	if exact.UtilPct < none.UtilPct {
		t.Fatalf("backfill lowered utilisation: %.2f%% < %.2f%%", exact.UtilPct, none.UtilPct)
	}
}
