package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/leader"
	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
)

// BenchmarkCommit measures fenced commits of 1 and 10 compare-and-swap puts
// against an embedded etcd with fsync on (as in production), reporting
// transactions per second and p50/p99 latency.
func BenchmarkCommit(b *testing.B) {
	ctx := context.Background()
	bsrv, err := embedetcd.Start(ctx, embedetcd.Config{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer bsrv.Close()
	cli, err := bsrv.Client(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	s, err := New(cli, Options{MaxTxnOps: bsrv.MaxTxnOps()})
	if err != nil {
		b.Fatal(err)
	}
	el, err := leader.New(cli, "/bench/leader", "bench", 10*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	fence, err := el.Campaign(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer el.Resign(ctx)

	for _, n := range []int{1, 10} {
		// The benchmark body runs several times with growing b.N; the keys'
		// revisions carry over between runs.
		keys := make([]string, n)
		revs := make([]int64, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("/bench/%d/%d", n, i)
		}
		b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) {
			ops := make([]Op, n)
			lat := make([]time.Duration, 0, b.N)
			val := make([]byte, 512)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := range ops {
					ops[j] = PutIfModRev(keys[j], val, revs[j])
				}
				t0 := time.Now()
				rev, err := s.Commit(ctx, &fence, ops...)
				lat = append(lat, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				for j := range revs {
					revs[j] = rev
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "txn/s")
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "ops/s")
			b.ReportMetric(pct(0.50), "p50_ms")
			b.ReportMetric(pct(0.99), "p99_ms")
		})
	}
}
