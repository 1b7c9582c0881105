package api

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// BenchmarkSubmitGRPC measures SubmitWorkload through the real gRPC server
// into embedded etcd (fsync off: this is the API's own cost), with 16
// concurrent clients. It reports submits per second and p50/p99 latency.
func BenchmarkSubmitGRPC(b *testing.B) {
	e := newEnv(b)
	tn := tenant(b)
	e.mkQueues(b, tn)
	w := validWorkload(tn)
	const clients = 16
	var (
		mu  sync.Mutex
		lat = make([]time.Duration, 0, b.N)
		wg  sync.WaitGroup
	)
	next := make(chan struct{}, b.N)
	for i := 0; i < b.N; i++ {
		next <- struct{}{}
	}
	close(next)
	b.ResetTimer()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				t0 := time.Now()
				_, err := e.wl.SubmitWorkload(context.Background(), &meridianv1.SubmitWorkloadRequest{Workload: w})
				d := time.Since(t0)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) == 0 {
		return
	}
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(float64(len(lat))/b.Elapsed().Seconds(), "submits/s")
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
}
