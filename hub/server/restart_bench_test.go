package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/api"
	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
	"github.com/meridian-gpu/meridian/internal/protofast"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// BenchmarkLeadAfterRestart measures what a restart of every hub costs: the
// time from a hub's start to its cache having listed etcd, to its leading
// and to its first cycle, on an empty store and on one that holds a day's
// finished workloads with their idempotency keys, which a hub keeps for
// the idempotency window. "cold" lists every key (no cache snapshot, as
// before); "warm" starts from the snapshot the last run left and reads
// what changed since. Before each start a minute's churn is stored (new
// finished workloads, MERIDIAN_BENCH_CHURN, default 1,500), so a warm
// start always has work to catch up. etcd and NATS run apart from the hub,
// as in production. MERIDIAN_BENCH_HISTORY sets the finished workloads
// (default 50,000; the 30-minute soak reached 116,000).
func BenchmarkLeadAfterRestart(b *testing.B) {
	n := benchEnvInt(b, "MERIDIAN_BENCH_HISTORY", 50_000)
	churn := benchEnvInt(b, "MERIDIAN_BENCH_CHURN", 1_500)
	ctx := context.Background()
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{DataDir: b.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer etcd.Close()
	nats, err := embednats.Start(embednats.Config{StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer nats.Close()
	cli, err := etcd.Client(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	cfg := Config{DataDir: b.TempDir(), EtcdEndpoints: etcd.Endpoints(), EtcdMaxTxnOps: etcd.MaxTxnOps(), NATSURL: nats.ClientURL(),
		HubID: "hub-restart", LeaderTTL: time.Second, Logger: benchLogger()}
	seeded := 0
	seed := func(k int) int {
		bytes := seedFinished(b, cli, etcd.MaxTxnOps(), seeded, k)
		seeded += k
		return bytes
	}
	cold := cfg
	cold.CacheSnapshotEvery = -1
	b.Run("history=0/cold", func(b *testing.B) { benchLead(b, cold, nil) })
	bytes := seed(n)
	for _, way := range []struct {
		name string
		cfg  Config
	}{{"cold", cold}, {"warm", cfg}} {
		b.Run(fmt.Sprintf("history=%d/%s", n, way.name), func(b *testing.B) {
			if way.cfg.CacheSnapshotEvery >= 0 {
				leadOnce(b, way.cfg, nil) // leaves the first snapshot
			}
			benchLead(b, way.cfg, func(s *Server) {
				if way.cfg.CacheSnapshotEvery >= 0 {
					if st := s.cache.Warm(); !st.Warm {
						b.Fatalf("a warm start listed every key: %s", st.Why)
					}
				}
				if items, _ := s.cache.Snapshot(); len(items) < 2*seeded {
					b.Fatalf("cache holds %d keys, want at least %d", len(items), 2*seeded)
				}
			}, func() { seed(churn) })
			b.ReportMetric(float64(bytes)/float64(n), "B/workload")
		})
	}
}

func benchEnvInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		b.Fatalf("%s=%q: want a number", name, v)
	}
	return n
}

// benchLead starts and stops a hub per iteration (after before, if any)
// and reports the times to a listed cache, to leading and to the first
// cycle; check looks at the hub once it leads.
func benchLead(b *testing.B, cfg Config, check func(*Server), before ...func()) {
	var listed, lead, first []time.Duration
	for b.Loop() {
		for _, f := range before {
			b.StopTimer()
			f()
			b.StartTimer()
		}
		l, d, c := leadOnce(b, cfg, check)
		listed, lead, first = append(listed, l), append(lead, d), append(first, c)
	}
	ms := func(d []time.Duration, p float64) float64 {
		slices.Sort(d)
		return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(ms(listed, 0.5), "listed-p50-ms")
	b.ReportMetric(ms(lead, 0.5), "lead-p50-ms")
	b.ReportMetric(ms(lead, 1), "lead-max-ms")
	b.ReportMetric(ms(first, 0.5), "first-cycle-p50-ms")
}

// leadOnce starts a hub, waits for its first cycle as leader and stops
// it, returning the times from its start to a listed cache, to leading
// and to the first cycle.
func leadOnce(b *testing.B, cfg Config, check func(*Server)) (listed, lead, first time.Duration) {
	t0 := time.Now()
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	deadline := time.After(5 * time.Minute)
	for {
		if listed == 0 {
			select {
			case <-s.cache.Ready():
				listed = time.Since(t0)
			default:
			}
		}
		if _, ok := s.loop.Leading(); ok {
			break
		}
		select {
		case err := <-done:
			b.Fatalf("hub stopped before leading: %v", err)
		case <-deadline:
			b.Fatal("hub not leading after 5 minutes")
		case <-time.After(2 * time.Millisecond):
		}
	}
	lead = time.Since(t0)
	// The first cycle, after which the leader dispatches.
	for cycles(b, s) < 1 {
		time.Sleep(2 * time.Millisecond)
	}
	first = time.Since(t0)
	if check != nil {
		check(s)
	}
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	_ = s.Close()
	return listed, lead, first
}

// cycles reads the hub's count of scheduling cycles from /metrics.
func cycles(b *testing.B, s *Server) int {
	resp, err := http.Get("http://" + s.Addrs().HTTP + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "meridian_scheduler_cycle_seconds_count "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				b.Fatalf("cycle count %q: %v", v, err)
			}
			return int(n)
		}
	}
	return 0
}

// seedFinished stores n succeeded workloads (numbered from from) shaped as the API stores them,
// each with its idempotency key, and returns their encoded bytes.
func seedFinished(b *testing.B, cli *clientv3.Client, maxOps, from, n int) int {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	total := 0
	txn := make([]clientv3.Op, 0, min(maxOps, 2000))
	for i := from; i < from+n; i++ {
		id := fmt.Sprintf("01KBH%021d", i)
		created := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		w := &meridianv1.Workload{
			Id: id, Queue: "acme/vision", Name: fmt.Sprintf("train-%d", i), IdempotencyKey: "req-" + id,
			Labels:  map[string]string{"team": "vision", "project": "detector"},
			PodSets: []*meridianv1.PodSet{{Name: "trainer", Replicas: 4, Resources: &meridianv1.Resources{GpuMilli: 1000, AcceleratorClass: "nvidia-h100-80gb"}}},
			Runtime: &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{
				Image: "registry.example/vision/trainer:2026.12", Command: []string{"torchrun", "--nproc-per-node=1", "train.py"}}}},
			CreateTime: timestamppb.New(created),
			Status: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED, Cluster: "east",
				DispatchId: id + "-1", Attempts: 1, StartTime: timestamppb.New(created.Add(2 * time.Second)),
				QuotaCharge: []*meridianv1.ClassCharge{{AcceleratorClass: "nvidia-h100-80gb", MilliGpus: 4000}},
				Assignment: []*meridianv1.PodSetAssignment{{PodSet: "trainer", Replicas: []*meridianv1.ReplicaAssignment{
					{Node: "gpu-node-017", Gpus: []int32{0}}, {Node: "gpu-node-017", Gpus: []int32{1}}, {Node: "gpu-node-018", Gpus: []int32{0}}, {Node: "gpu-node-018", Gpus: []int32{1}}}}},
				UpdateTime: timestamppb.New(created.Add(time.Minute)), EndTime: timestamppb.New(created.Add(time.Minute)),
				Conditions: []*meridianv1.Condition{
					{Type: "Admitted", Status: meridianv1.ConditionStatus_CONDITION_STATUS_TRUE, Reason: "Dispatched", Message: "dispatched to cluster east", LastTransitionTime: timestamppb.New(created.Add(time.Second))},
					{Type: "Finished", Status: meridianv1.ConditionStatus_CONDITION_STATUS_TRUE, Reason: "Succeeded", Message: "every pod exited 0", LastTransitionTime: timestamppb.New(created.Add(time.Minute))},
				}},
		}
		v, err := protofast.MarshalDeterministic(w)
		if err != nil {
			b.Fatal(err)
		}
		total += len(v)
		k, err := api.WorkloadKey(id)
		if err != nil {
			b.Fatal(err)
		}
		txn = append(txn, clientv3.OpPut(k, string(v)), clientv3.OpPut(api.IdempotencyKey(w.GetQueue(), w.GetIdempotencyKey()), id))
		if len(txn) >= cap(txn)-1 || i == from+n-1 {
			if _, err := cli.Txn(ctx).Then(txn...).Commit(); err != nil {
				b.Fatal(err)
			}
			txn = txn[:0]
		}
	}
	return total
}

// benchLogger shows the cache's logs with MERIDIAN_BENCH_LOG=1.
func benchLogger() *slog.Logger {
	if os.Getenv("MERIDIAN_BENCH_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}
