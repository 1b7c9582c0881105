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

// BenchmarkListWorkloadsPage measures one page of 100 workloads, newest
// first, with 5,000 stored: from the watch cache's ordered index and, as
// the in-process baseline, from etcd, which reads and sorts the whole
// range for every descending page. It reports pages/s and p50/p99.
func BenchmarkListWorkloadsPage(b *testing.B) {
	e := newEnv(b)
	noCache := newEnv(b, func(d *Deps) { d.Workloads = nil })
	tn := tenant(b)
	e.mkQueues(b, tn)
	const stored = 5000
	var wg sync.WaitGroup
	for c := 0; c < 16; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < stored; i += 16 {
				if _, err := e.wl.SubmitWorkload(context.Background(), &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(tn)}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, c := range []struct {
		name string
		wl   meridianv1.WorkloadServiceClient
	}{{"cache", e.wl}, {"etcd-baseline", noCache.wl}} {
		b.Run(c.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				resp, err := c.wl.ListWorkloads(context.Background(), &meridianv1.ListWorkloadsRequest{Queue: tn, PageSize: 100})
				if err != nil || len(resp.GetWorkloads()) != 100 {
					b.Fatalf("list: %d workloads, err %v", len(resp.GetWorkloads()), err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pages/s")
			b.ReportMetric(pct(0.50), "p50_ms")
			b.ReportMetric(pct(0.99), "p99_ms")
		})
	}
}
