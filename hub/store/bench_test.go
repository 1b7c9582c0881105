package store

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meridian-gpu/meridian/hub/leader"
	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
)

// BenchmarkCommit measures fenced commits of 1 and 10 compare-and-swap puts
// against an embedded etcd with fsync on (as in production), reporting
// transactions per second and p50/p99 latency.
func BenchmarkCommit(b *testing.B) {
	ctx := context.Background()
	s, cli := benchStore(b, embedetcd.Config{DataDir: b.TempDir()})
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

// BenchmarkListHistory lists a prefix of many stored keys, as a hub does
// before it may lead (a day of finished workloads and their idempotency
// keys), streamed and, as the baseline in the same process, in pages of
// DefaultPageSize. MERIDIAN_BENCH_LIST_KEYS sets the keys (default 50,000
// of 1,200 bytes each).
func BenchmarkListHistory(b *testing.B) {
	ctx := context.Background()
	n := 50_000
	if v := os.Getenv("MERIDIAN_BENCH_LIST_KEYS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("MERIDIAN_BENCH_LIST_KEYS=%q: want a positive number of keys", v)
		}
	}
	s, cli := benchStore(b, embedetcd.Config{DataDir: b.TempDir(), UnsafeNoFsync: true})
	const prefix = "/bench/history/"
	val := make([]byte, 1200)
	for i := range val {
		val[i] = byte(i)
	}
	ops := make([]Op, 0, 1000)
	for i := 0; i < n; i++ {
		ops = append(ops, Put(fmt.Sprintf("%s%08d", prefix, i), val))
		if len(ops) == cap(ops) || i == n-1 {
			if _, err := s.Commit(ctx, nil, ops...); err != nil {
				b.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	for _, way := range []struct {
		name string
		list func() ([]Item, int64, error)
	}{
		{"pages", func() ([]Item, int64, error) { return listPages(ctx, cli, prefix, DefaultPageSize) }},
		{"stream", func() ([]Item, int64, error) { return listStream(ctx, cli, prefix) }},
	} {
		b.Run(fmt.Sprintf("%s/keys=%d", way.name, n), func(b *testing.B) {
			for b.Loop() {
				items, _, err := way.list()
				if err != nil {
					b.Fatal(err)
				}
				if len(items) != n {
					b.Fatalf("listed %d keys, want %d", len(items), n)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "keys/s")
		})
	}
}

// benchStore starts an etcd member of its own for a benchmark and returns
// a store on it and its client; both close when the benchmark ends.
func benchStore(b *testing.B, cfg embedetcd.Config) (*Store, *clientv3.Client) {
	b.Helper()
	bsrv, err := embedetcd.Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bsrv.Close() })
	cli, err := bsrv.Client(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cli.Close() })
	s, err := New(cli, Options{MaxTxnOps: bsrv.MaxTxnOps()})
	if err != nil {
		b.Fatal(err)
	}
	return s, cli
}
