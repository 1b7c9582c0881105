package natsbus

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkPublishDispatch measures synchronous, deduplicated dispatch
// publishes (each waits for its PubAck) to an embedded server with file
// storage, reporting msgs/s and p50/p99 latency.
func BenchmarkPublishDispatch(b *testing.B) {
	s := newServer(b)
	bus := newBus(b, s)
	ctx := context.Background()
	payload := make([]byte, 1024)
	for _, dupEvery := range []int{0, 10} {
		name := "unique"
		if dupEvery > 0 {
			name = fmt.Sprintf("retry-every-%d", dupEvery)
		}
		b.Run(name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			dups := 0
			prefix := fmt.Sprintf("%s-%d-", name, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id := prefix + fmt.Sprint(i)
				if dupEvery > 0 && i%dupEvery == dupEvery-1 {
					id = prefix + fmt.Sprint(i-1) // a retried publish
				}
				t0 := time.Now()
				dup, err := bus.PublishDispatch(ctx, "bench", id, payload)
				lat = append(lat, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				if dup {
					dups++
				}
			}
			b.StopTimer()
			if dupEvery > 0 && dups != b.N/dupEvery {
				b.Fatalf("%d duplicates reported, want %d", dups, b.N/dupEvery)
			}
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(pct(0.50), "p50_ms")
			b.ReportMetric(pct(0.99), "p99_ms")
		})
	}
}
