package api

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// storeWorkloads writes n workloads straight into etcd (as the API would
// store them), spread over four queues below tn and over the phases, and
// waits until the watch cache holds them.
func storeWorkloads(b *testing.B, e *env, tn string, n int) {
	b.Helper()
	phases := []meridianv1.WorkloadPhase{
		meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED, meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING,
		meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED, meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED,
	}
	const perTxn = 100
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for start := g * perTxn; start < n; start += 8 * perTxn {
				var ops []clientv3.Op
				for i := start; i < min(start+perTxn, n); i++ {
					id, err := e.svc.ids.next(time.Now())
					if err != nil {
						errs <- err
						return
					}
					w := validWorkload(fmt.Sprintf("%s/team-%d", tn, i%4))
					w.Id, w.Name = id, fmt.Sprintf("job-%06d", i)
					w.Labels = map[string]string{"shard": fmt.Sprint(i % 10)}
					w.Status = &meridianv1.WorkloadStatus{Phase: phases[i%len(phases)]}
					raw, err := marshal(w)
					if err != nil {
						errs <- err
						return
					}
					key, _ := WorkloadKey(id)
					ops = append(ops, clientv3.OpPut(key, string(raw)))
				}
				if _, err := e.cli.Txn(context.Background()).Then(ops...).Commit(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	resp, err := e.cli.Get(context.Background(), "x")
	if err != nil {
		b.Fatal(err)
	}
	if err := e.cache.WaitForRevision(context.Background(), resp.Header.Revision); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSearchWorkloads measures the dashboard's workload table with
// 100,000 stored workloads, over gRPC: a page of 50 with the counts per
// phase and queue (one pass over every workload, summaries decoded once
// per revision), with a free-text filter, and a page without counts. It
// reports pages/s and p50/p99 latency.
func BenchmarkSearchWorkloads(b *testing.B) {
	e := newEnv(b)
	tn := tenant(b)
	const stored = 100_000
	t0 := time.Now()
	storeWorkloads(b, e, tn, stored)
	b.Logf("stored %d workloads in %v", stored, time.Since(t0).Round(time.Millisecond))
	// The first search decodes every record once into the summaries.
	t0 = time.Now()
	first, err := e.wl.SearchWorkloads(context.Background(), &meridianv1.SearchWorkloadsRequest{Queue: tn, PageSize: 50, IncludeCounts: true})
	if err != nil || first.GetTotal() != stored {
		b.Fatalf("first search: total %d, err %v", first.GetTotal(), err)
	}
	b.Logf("first search (decodes every record): %v", time.Since(t0).Round(time.Millisecond))
	for _, c := range []struct {
		name string
		req  *meridianv1.SearchWorkloadsRequest
		want int64 // total with counts
	}{
		{"counts", &meridianv1.SearchWorkloadsRequest{Queue: tn, PageSize: 50, IncludeCounts: true}, stored},
		{"counts-phase-filter", &meridianv1.SearchWorkloadsRequest{Queue: tn, PageSize: 50, IncludeCounts: true,
			Phase: []meridianv1.WorkloadPhase{meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED}}, stored / 4},
		{"counts-text", &meridianv1.SearchWorkloadsRequest{Queue: tn, PageSize: 50, IncludeCounts: true, Text: "job-0999"}, 100},
		{"page-only", &meridianv1.SearchWorkloadsRequest{Queue: tn, PageSize: 50}, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				resp, err := e.wl.SearchWorkloads(context.Background(), c.req)
				if err != nil || resp.GetTotal() != c.want || len(resp.GetWorkloads()) != 50 {
					b.Fatalf("search: total %d (want %d), %d workloads, err %v", resp.GetTotal(), c.want, len(resp.GetWorkloads()), err)
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

// TestSearchWorkloads checks filters, counts and paging of SearchWorkloads.
func TestSearchWorkloads(t *testing.T) {
	e := newEnv(t)
	tn := tenant(t)
	e.mkQueues(t, tn)
	ctx := testCtx(t)
	var ids []string
	for i := range 7 {
		w := validWorkload(tn)
		w.Name = fmt.Sprintf("search-%d", i)
		r, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.GetWorkload().GetId())
	}
	r, err := e.wl.SearchWorkloads(ctx, &meridianv1.SearchWorkloadsRequest{Queue: tn, PageSize: 3, IncludeCounts: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetTotal() != 7 || len(r.GetWorkloads()) != 3 || r.GetNextPageToken() == "" || len(r.GetPhaseCounts()) != 1 || r.GetPhaseCounts()[0].GetCount() != 7 ||
		len(r.GetQueueCounts()) != 1 || r.GetQueueCounts()[0].GetKey() != tn {
		t.Fatalf("first page: %v", r)
	}
	seen := []string{}
	tok := ""
	for {
		r, err := e.wl.SearchWorkloads(ctx, &meridianv1.SearchWorkloadsRequest{Queue: tn, PageSize: 3, PageToken: tok, IncludeCounts: tok == ""})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range r.GetWorkloads() {
			seen = append(seen, w.GetId())
		}
		if tok = r.GetNextPageToken(); tok == "" {
			break
		}
	}
	slices.Reverse(seen) // newest first
	if !slices.Equal(seen, ids) {
		t.Errorf("paging saw %v, want %v", seen, ids)
	}
	r, err = e.wl.SearchWorkloads(ctx, &meridianv1.SearchWorkloadsRequest{Queue: tn, Text: "SEARCH-4", IncludeCounts: true})
	if err != nil || r.GetTotal() != 1 || len(r.GetWorkloads()) != 1 || r.GetWorkloads()[0].GetName() != "search-4" {
		t.Errorf("text search: %v %v", r, err)
	}
	r, err = e.wl.SearchWorkloads(ctx, &meridianv1.SearchWorkloadsRequest{Text: ids[2][len(ids[2])-12:]})
	if err != nil || len(r.GetWorkloads()) != 1 || r.GetWorkloads()[0].GetId() != ids[2] {
		t.Errorf("id search: %v %v", r, err)
	}
	if _, err := e.wl.SearchWorkloads(ctx, &meridianv1.SearchWorkloadsRequest{Queue: tn, PageSize: 3, PageToken: "x" + tok, Text: "a"}); err == nil {
		t.Errorf("a bad token was accepted")
	}
}
