package retention

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkSelect decides over 100,000 finished workloads in 100 queues,
// what a busy hub holds with the default policy.
func BenchmarkSelect(b *testing.B) {
	ws := make([]Finished, 0, 100_000)
	for i := range 100_000 {
		ws = append(ws, Finished{ID: fmt.Sprintf("wl-%08d", i), Queue: fmt.Sprintf("q%03d", i%100), Phase: succeeded,
			End: t0.Add(-time.Duration(i) * 10 * time.Second)})
	}
	p := Policy{TTL: DefaultTTL, MaxPerQueue: 500, MinAge: IdempotencyWindow}
	b.ReportAllocs()
	b.ResetTimer()
	var n int
	for b.Loop() {
		n = len(Select(ws, p, t0))
	}
	b.ReportMetric(float64(len(ws)), "workloads/op")
	b.ReportMetric(float64(n), "deleted/op")
}
