package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/meridian-gpu/meridian/hub/server"
	"github.com/meridian-gpu/meridian/internal/telemetry"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

const (
	benchClusters = 10
	benchNodes    = 128 // per cluster at least, 8 GPUs each: 10,240 GPUs
	// pacedFor is how long each paced case offers its rate: long enough
	// for the hub's state to grow and for latency to show whether it
	// keeps up.
	pacedFor = 5 * time.Second
)

// pacedCases are the offered rates and how long each is offered.
// MERIDIAN_BENCH_RATES (e.g. "2000,2500") and MERIDIAN_BENCH_SECONDS
// (e.g. 15) explore other loads; the defaults are what docs/benchmarks.md
// reports.
func pacedCases(b *testing.B) (rates []int, seconds int) {
	rates, seconds = []int{500, 1000, 2000}, int(pacedFor/time.Second)
	if v := os.Getenv("MERIDIAN_BENCH_RATES"); v != "" {
		rates = nil
		for _, f := range strings.Split(v, ",") {
			r, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || r <= 0 {
				b.Fatalf("MERIDIAN_BENCH_RATES: %q is not a positive rate", f)
			}
			rates = append(rates, r)
		}
	}
	// Up to ten minutes: long enough to show whether the hub's state and
	// latency level off at a steady rate (with MERIDIAN_BENCH_RUN_FOR and
	// MERIDIAN_BENCH_RETAIN) or keep growing.
	if v := os.Getenv("MERIDIAN_BENCH_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 600 {
			b.Fatalf("MERIDIAN_BENCH_SECONDS: %q is not between 1 and 600", v)
		}
		seconds = n
	}
	return rates, seconds
}

// submitBatch is how many workloads each submit call carries
// (MERIDIAN_BENCH_BATCH, default 1): above 1 the load arrives as arrays
// sent with SubmitWorkloads, each array due, whole, at its first
// workload's place in the schedule (rate stays workloads per second).
func submitBatch(b *testing.B) int {
	v := os.Getenv("MERIDIAN_BENCH_BATCH")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		b.Fatalf("MERIDIAN_BENCH_BATCH: %q is not between 1 and 1000", v)
	}
	return n
}

// watchPhases is what the benchmark's watcher asks for
// (MERIDIAN_BENCH_WATCH): "all" (the default) every change of every
// workload, five events each over its life; "started" only changes into
// ACCEPTED, RUNNING or SUCCEEDED (the Watch API's phase filter), which is
// all the benchmark reads: a client that waits for its workloads to start
// would watch so. SUCCEEDED is in the set because a watcher that lags gets
// each workload's latest state, which may already be the end.
func watchPhases(b *testing.B) []meridianv1.WorkloadPhase {
	switch v := os.Getenv("MERIDIAN_BENCH_WATCH"); v {
	case "", "all":
		return nil
	case "started":
		return []meridianv1.WorkloadPhase{meridianv1.WorkloadPhase_WORKLOAD_PHASE_ACCEPTED,
			meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING, meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED}
	default:
		b.Fatalf("MERIDIAN_BENCH_WATCH: %q is not all or started", v)
		return nil
	}
}

// watchView is the view the benchmark's watcher asks for
// (MERIDIAN_BENCH_WATCH_VIEW): "full" (the default) whole workloads,
// "basic" the basic view (WORKLOAD_VIEW_BASIC), which holds every field
// the benchmark reads (the phase and the status's times), as a client that
// follows progress would ask.
func watchView(b *testing.B) meridianv1.WorkloadView {
	return viewKnob(b, "MERIDIAN_BENCH_WATCH_VIEW")
}

// submitView is the view the load generator's submits ask for
// (MERIDIAN_BENCH_SUBMIT_VIEW): "full" (the default) or "basic", as a
// client that keeps only the ids of what it submits would ask. The
// generator reads nothing of the answer.
func submitView(b *testing.B) meridianv1.WorkloadView {
	return viewKnob(b, "MERIDIAN_BENCH_SUBMIT_VIEW")
}

// viewKnob reads a view from env: "full" (the default) or "basic".
func viewKnob(b *testing.B, env string) meridianv1.WorkloadView {
	switch v := os.Getenv(env); v {
	case "", "full":
		return meridianv1.WorkloadView_WORKLOAD_VIEW_FULL
	case "basic":
		return meridianv1.WorkloadView_WORKLOAD_VIEW_BASIC
	default:
		b.Fatalf("%s: %q is not full or basic", env, v)
		return 0
	}
}

// benchRunFor is how long each workload runs once launched, and how many
// must fit at once. The default (an hour) keeps every workload in flight;
// MERIDIAN_BENCH_RUN_FOR (e.g. 5s) makes them finish, so the hub also
// handles completions and the number in flight levels off at rate x run
// time, as in a steady state: the clusters are sized for twice that.
func benchRunFor(b *testing.B, n, rate int) (string, int) {
	v := os.Getenv("MERIDIAN_BENCH_RUN_FOR")
	if v == "" {
		return "1h", n
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("MERIDIAN_BENCH_RUN_FOR: %q is not a positive duration", v)
	}
	if rate <= 0 {
		return v, n
	}
	return v, min(n, int(2*float64(rate)*d.Seconds())+1000)
}

// benchRetention turns retention on when MERIDIAN_BENCH_RETAIN is set
// (e.g. 1m): a finished workload is deleted that long after it ended (at
// least the idempotency window's one-minute floor, which the window is
// shortened to match), with a pass every quarter of it. Without it the hub keeps every
// workload, as its defaults do for a week, which no steady state allows.
func benchRetention(b *testing.B, cfg *server.Config) {
	d, ok := durationEnv(b, "MERIDIAN_BENCH_RETAIN")
	if !ok {
		return
	}
	d = max(d, server.MinIdempotencyWindow)
	cfg.RetentionTTL, cfg.IdempotencyWindow = d, d
	cfg.RetentionInterval = max(d/4, time.Second)
}

// durationEnv reads a positive duration from the environment variable
// name; false when it is not set. Anything else fails the benchmark,
// naming the variable.
func durationEnv(b *testing.B, name string) (time.Duration, bool) {
	v := os.Getenv(name)
	if v == "" {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s: %q is not a positive duration", name, v)
	}
	return d, true
}

// resourcePeriod spaces the resource samples: about twenty over the
// submits, between one and thirty seconds apart.
func resourcePeriod(n, rate int) time.Duration {
	if rate <= 0 {
		return time.Second
	}
	run := time.Duration(n) * time.Second / time.Duration(rate)
	return min(max(run/20, time.Second), 30*time.Second)
}

// nodesFor sizes each cluster so that n one-GPU workloads all fit.
func nodesFor(n int) int { return max(benchNodes, (n+benchClusters*8-1)/(benchClusters*8)) }

// BenchmarkSubmitToAccepted measures the whole dispatch path: workloads
// submitted over gRPC by concurrent clients, stored in etcd, scheduled by
// the leader's loop, committed with a fenced transaction, published on
// JetStream, launched by real spoke agents on 10 simulated clusters, and
// reported ACCEPTED back through JetStream and etcd. It reports the
// sustained rate (workloads/s from the first submit to the last ACCEPTED)
// and the p50/p99 latency from each submit call to its ACCEPTED, seen on
// the public Watch stream. The in-process baseline is the submit path alone
// (gRPC + validation + etcd), which bounds what the dispatch path can reach.
//
// The burst case sends as fast as 32 clients can; the paced cases offer a
// constant rate (open loop) for 5 s, which is what "sustained" means: latency stays
// flat while the hub keeps up and grows once it falls behind.
//
// Every case runs with the hub's authentication as MERIDIAN_BENCH_AUTH
// says (by default oidc-tls: TLS and OIDC tokens, as in production; see
// authModes); with several modes each case runs under each in turn. The
// submit-only baseline also runs with authentication off, so that the
// default run shows what authentication costs the submit path.
func BenchmarkSubmitToAccepted(b *testing.B) {
	const n = 2000
	modes := authModes(b)
	b.Run(fmt.Sprintf("burst/workloads=%d", n), func(b *testing.B) {
		for _, mode := range modes {
			b.Run("auth="+mode, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					runSubmitToAccepted(b, n, 0, true, mode)
				}
			})
		}
	})
	rates, seconds := pacedCases(b)
	for _, rate := range rates {
		m := rate * seconds
		name := fmt.Sprintf("paced=%d-per-s/workloads=%d", rate, m)
		if k := submitBatch(b); k > 1 {
			name += fmt.Sprintf("/batch=%d", k)
		}
		if watchPhases(b) != nil {
			name += "/watch=started"
		}
		if watchView(b) == meridianv1.WorkloadView_WORKLOAD_VIEW_BASIC {
			name += "/view=basic"
		}
		if submitView(b) == meridianv1.WorkloadView_WORKLOAD_VIEW_BASIC {
			name += "/submit-view=basic"
		}
		b.Run(name, func(b *testing.B) {
			for _, mode := range modes {
				b.Run("auth="+mode, func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						runSubmitToAccepted(b, m, rate, true, mode)
					}
				})
			}
		})
	}
	baseModes := modes
	if !slices.Contains(baseModes, authNone) {
		baseModes = append([]string{authNone}, baseModes...)
	}
	b.Run(fmt.Sprintf("baseline-submit-only/workloads=%d", n), func(b *testing.B) {
		for _, mode := range baseModes {
			b.Run("auth="+mode, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					runSubmitToAccepted(b, n, 0, false, mode)
				}
			})
		}
	})
}

// runSubmitToAccepted submits n workloads, at rate per second when rate > 0
// (else as fast as possible), with the hub's authentication in mode, and
// measures them to ACCEPTED.
func runSubmitToAccepted(b *testing.B, n, rate int, withAgents bool, mode string) {
	b.StopTimer()
	runFor, fit := benchRunFor(b, n, rate)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The collector target meridian-hub runs with (GOGC, when set, wins).
	server.TuneGC(server.DefaultGCPercent, nil)
	// Before anything of the run starts, and again once all of it has
	// stopped (deferred first, so it runs last).
	defer calibrate(b)()
	authn, sec := newBenchAuth(b, mode)
	var (
		traceTo   string // the span sink's endpoint when tracing (MERIDIAN_BENCH_TRACE)
		traceRate float64
		sink      *spanSink
		tracing   *telemetry.Tracing
	)
	if r, ok := benchTraceRatio(b); ok {
		traceTo, sink = startSpanSink(b)
		traceRate = r
		var err error
		if tracing, err = setupTracing("meridian-hub", traceEnvFor(traceTo, r)); err != nil {
			b.Fatal(err)
		}
		defer tracing.Close(nil)
	}
	hcfg := server.Config{
		DataDir: b.TempDir(), HubID: "bench-hub", Version: "bench",
		SchedulePeriod: 100 * time.Millisecond, LeaderTTL: 2 * time.Second,
		Security: sec, TracerProvider: tracing.TracerProvider(),
	}
	benchRetention(b, &hcfg)
	hcfg.Logger = benchLogger(b)
	if d, ok := durationEnv(b, "MERIDIAN_BENCH_MIN_PERIOD"); ok {
		hcfg.Dispatch.MinPeriod = d // the loop's shortest gap between cycles
	}
	if os.Getenv("MERIDIAN_BENCH_INTAKE") == "off" {
		// The baseline where the API stores every submit QUEUED and the
		// loop rewrites it (hub/dispatch/intake.go), to measure what
		// the loop's intake saves.
		hcfg.Dispatch.QueueSubmits = true
	}
	if os.Getenv("MERIDIAN_BENCH_CACHE_SNAPSHOT") == "off" {
		// The baseline without the hub's cache snapshot writes
		// (hub/store/warm.go), to measure what they cost.
		hcfg.CacheSnapshotEvery = -1
	}
	hub, err := server.New(hcfg)
	if err != nil {
		b.Fatal(err)
	}
	authn.started(b)
	done := make(chan error, 1)
	go func() { done <- hub.Run(ctx) }()
	defer func() {
		cancel()
		<-done
		_ = hub.Close()
	}()
	// conn is the benchmark's own (queues, the Watch, the final list);
	// the load comes from benchUsers users, each on its own connection.
	conn, err := grpc.NewClient(hub.Addrs().GRPC, authn.adminDial()...)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	wl := meridianv1.NewWorkloadServiceClient(conn)
	cl := meridianv1.NewClusterServiceClient(conn)
	qs := meridianv1.NewQueueServiceClient(conn)
	waitFor(b, 30*time.Second, "hub ready", func() bool {
		_, err := cl.ListClusters(ctx, &meridianv1.ListClustersRequest{})
		return err == nil
	})
	var agents *childProcess
	if withAgents {
		agents = startAgents(b, agentsSpec{NATSURL: hub.NATSURL(), Clusters: benchClusters, Nodes: nodesFor(fit), TraceTo: traceTo, TraceRatio: traceRate})
		waitFor(b, 60*time.Second, "clusters ready", func() bool {
			resp, err := cl.ListClusters(ctx, &meridianv1.ListClustersRequest{})
			return err == nil && len(resp.GetClusters()) == benchClusters
		})
	}
	gpus := int64(benchClusters * nodesFor(fit) * 8)
	for _, q := range []*meridianv1.Queue{{Path: "bench", Weight: 1, Access: authn.access()}, {Path: "bench/load", Weight: 1,
		Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: gpus * 1000}}}} {
		if _, err := qs.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: q}); err != nil {
			b.Fatal(err)
		}
	}

	// The load: its clients and the watcher that sees each workload
	// accepted, connected (the watch open) before the first submit.
	// Enough clients that one slow answer does not delay the next send:
	// 100 ms of submit latency at the offered rate before the generator
	// itself falls behind.
	spec := loadSpec{Addr: hub.Addrs().GRPC, AdminToken: authn.admin, UserTokens: authn.userTok, CAFile: authn.caFile,
		Users: benchUsers, N: n, Rate: rate, Batch: 1, Clients: 32, RunFor: runFor, Accept: withAgents,
		// The clients ask to be stored at once, QUEUED (the answer then
		// does not wait for the loop's next cycle).
		StoreQueued: os.Getenv("MERIDIAN_BENCH_STORE_QUEUED") == "1"}
	if rate > 0 {
		// Paced runs only: their names say so.
		spec.Clients = max(spec.Clients, rate/10)
		spec.Batch = submitBatch(b)
		for _, p := range watchPhases(b) {
			spec.Phases = append(spec.Phases, int32(p))
		}
		spec.View = int32(watchView(b))
		spec.SubmitView = int32(submitView(b))
	}
	load := startLoad(b, ctx, spec)
	byProcess := func() runUsage { return runUsage{bench: selfUsage(), agents: agents.usage(), load: load.usage()} }
	use0 := byProcess()
	alloc0 := heapAllocs()
	start := time.Now()
	res := watchResources(b, hub.EtcdEndpoints(), start, resourcePeriod(n, rate), byProcess)
	stopProfiles := profileWindows(b, start)
	defer stopProfiles()
	host := watchHost()
	b.StartTimer()
	load.begin(start)
	out := load.wait(b)
	submitDone := out.SubmitDone
	if f := out.Failed; f > 0 {
		b.ReportMetric(float64(f), "submit-errors")
		defer b.Errorf("%d of %d submits failed; the first %s", f, n, out.FailMsg)
	}
	if !withAgents {
		b.StopTimer()
		res.finish(b, n)
		host.finish(b)
		b.ReportMetric(float64(n)/submitDone.Seconds(), "workloads/s")
		byProcess().minus(use0).total().report(b, n)
		return
	}
	// A hub that fell behind still gets its figures reported (a long run
	// is expensive to repeat): what was not ACCEPTED within acceptWait of
	// the last submit counts as accepted at that deadline, so its
	// latencies are lower bounds, and the run fails after reporting.
	behind := out.Behind
	if behind > 0 {
		defer b.Errorf("only %d of %d submitted workloads accepted within %s of the last submit: the hub fell behind (latencies above are lower bounds)", n-int(out.Failed)-behind, n-int(out.Failed), acceptWait)
	}
	led, watchLag := out.Ledger, out.WatchLag
	b.ReportMetric(float64(behind), "not-accepted")
	elapsed := time.Since(start)
	usedBy := byProcess().minus(use0)
	used := usedBy.total()
	allocated := heapAllocs().minus(alloc0)
	res.finish(b, n)
	host.finish(b)
	reportDiskStalls(b, n)
	if path := os.Getenv("MERIDIAN_BENCH_HEAPPROFILE"); path != "" {
		if err := writeHeapProfile(path); err != nil { // what the hub holds at the end of the load
			b.Fatal(err)
		}
	}
	b.StopTimer()
	// Latency of every workload, and of those submitted in the second half
	// of the run: if the tail comes from warming up (empty heap, first
	// connections), the second half shows it; if the hub falls behind, the
	// second half is worse.
	var lat, late, fromDue []float64
	half := start.Add(submitDone / 2).UnixNano()
	for j := range n {
		if t0, t1 := led.Sent[j], led.Acc[j]; t0 != 0 && t1 != 0 {
			ms := since(t0, t1)
			lat = append(lat, ms)
			if t0 > half {
				late = append(late, ms)
			}
			fromDue = append(fromDue, since(led.Due[j], t1))
		}
	}
	sort.Float64s(lat)
	sort.Float64s(late)
	sort.Float64s(fromDue)
	sort.Float64s(watchLag)
	if len(watchLag) > 0 {
		b.ReportMetric(pct(watchLag, 0.5), "p50-watch-lag-ms")
		b.ReportMetric(pct(watchLag, 0.99), "p99-watch-lag-ms")
	}
	if os.Getenv("MERIDIAN_BENCH_TIMELINE") != "" {
		logTimeline(start, led, host)
	}
	// The sustained rate: ACCEPTED per second between the first second and
	// the last submit, when the pipeline is full and not yet draining.
	if from, to := start.Add(time.Second), start.Add(submitDone); to.Sub(from) >= time.Second {
		inWindow := 0
		for _, t1 := range led.Acc {
			if t1 >= from.UnixNano() && t1 < to.UnixNano() {
				inWindow++
			}
		}
		b.ReportMetric(float64(inWindow)/to.Sub(from).Seconds(), "steady-accepted/s")
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "workloads/s")
	if sink != nil {
		// The hub's spans so far (flushed now) and the agents' already
		// exported: how much tracing did, per workload.
		_ = tracing.ForceFlush(ctx)
		b.ReportMetric(float64(sink.spans.Load())/float64(n), "spans/workload")
	}
	if rate > 0 {
		// The honest figures: from each submit's scheduled send time.
		b.ReportMetric(pct(fromDue, 0.5), "p50-scheduled-ms")
		b.ReportMetric(pct(fromDue, 0.99), "p99-scheduled-ms")
		b.ReportMetric(pct(fromDue, 0.999), "p999-scheduled-ms")
	}
	// The old way, from when a client got round to sending, shown beside
	// them for one release: it leaves out any time the clients were held
	// back, so it flatters the tail when the hub stalls.
	b.ReportMetric(pct(lat, 0.5), "p50-ms")
	b.ReportMetric(pct(lat, 0.99), "p99-ms")
	if len(late) > 0 {
		b.ReportMetric(pct(late, 0.99), "p99-second-half-ms")
	}
	b.ReportMetric(float64(n)/submitDone.Seconds(), "submits/s")
	// CPU of every process (hub, etcd, NATS, agents and the load
	// generator) per workload: what bounds throughput on a small machine,
	// and less sensitive to other load than the rates.
	used.report(b, n)
	// The agents' share of it: their process is the clusters' side, and
	// its CPU moves with what they do per dispatch, not with the hub.
	b.ReportMetric(usedBy.agents.cpu().Seconds()*1000/float64(n), "agents-cpu-ms/workload")
	// What the hub's process (hub, etcd, NATS; the load generator too
	// with MERIDIAN_BENCH_CLIENTS=inprocess) allocated per workload: what
	// its collector's work grows with, and, unlike CPU, hardly moved by
	// other programs on the machine.
	b.ReportMetric(allocated.bytes/1024/float64(n), "alloc-KiB/workload")
	b.ReportMetric(allocated.objects/float64(n), "allocs/workload")
	// Where the time goes: create -> dispatch (hub: etcd, loop, commit) and
	// dispatch -> ACCEPTED seen (JetStream, agent, event write, watch).
	var toDispatch, toAccept []float64
	token := ""
	for {
		resp, err := wl.ListWorkloads(ctx, &meridianv1.ListWorkloadsRequest{PageSize: 1000, PageToken: token, Queue: "bench/load"})
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range resp.GetWorkloads() {
			st := w.GetStatus()
			if st.GetDispatchTime() == nil || w.GetCreateTime() == nil {
				continue
			}
			toDispatch = append(toDispatch, st.GetDispatchTime().AsTime().Sub(w.GetCreateTime().AsTime()).Seconds()*1000)
			if j, ok := led.indexOf(w.GetName()); ok && led.Acc[j] != 0 {
				toAccept = append(toAccept, since(st.GetDispatchTime().AsTime().UnixNano(), led.Acc[j]))
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	sort.Float64s(toDispatch)
	sort.Float64s(toAccept)
	if len(toDispatch) > 0 && len(toAccept) > 0 {
		b.ReportMetric(pct(toDispatch, 0.5), "p50-to-dispatch-ms")
		b.ReportMetric(pct(toDispatch, 0.99), "p99-to-dispatch-ms")
		b.ReportMetric(pct(toAccept, 0.5), "p50-dispatch-to-accepted-ms")
		b.ReportMetric(pct(toAccept, 0.99), "p99-dispatch-to-accepted-ms")
	}
}

func waitFor(b *testing.B, limit time.Duration, what string, ok func() bool) {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// allocs is what the process has allocated on the heap so far.
type allocs struct{ bytes, objects float64 }

func (a allocs) minus(b allocs) allocs { return allocs{a.bytes - b.bytes, a.objects - b.objects} }

func heapAllocs() allocs {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	var a allocs
	if s[0].Value.Kind() == metrics.KindUint64 {
		a.bytes = float64(s[0].Value.Uint64())
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		a.objects = float64(s[1].Value.Uint64())
	}
	return a
}

// logTimeline prints p50/p99 latency and count per second of submission
// (MERIDIAN_BENCH_TIMELINE=1): it tells a tail that grows from one that
// comes in bursts.
func logTimeline(start time.Time, led *runLedger, host *hostWatcher) {
	// Each second's latency, split where the status says: to the hub's
	// dispatch, from there to the agent's RUNNING, from there to the hub's
	// write of it, and from the write to this watcher.
	type second struct{ total, toDispatch, toAgent, toWrite, toWatch []float64 }
	per := map[int]*second{}
	for j, t0 := range led.Sent {
		t1 := led.Acc[j]
		if t0 == 0 || t1 == 0 {
			continue
		}
		s := int((t0 - start.UnixNano()) / int64(time.Second))
		p := per[s]
		if p == nil {
			p = &second{}
			per[s] = p
		}
		p.total = append(p.total, since(t0, t1))
		if d, a, w := led.Dispatched[j], led.Started[j], led.Written[j]; d != 0 && a != 0 && w != 0 {
			p.toDispatch = append(p.toDispatch, since(t0, d))
			p.toAgent = append(p.toAgent, since(d, a))
			p.toWrite = append(p.toWrite, since(a, w))
			p.toWatch = append(p.toWatch, since(w, t1))
		}
	}
	p99 := func(l []float64) float64 {
		if len(l) == 0 {
			return 0
		}
		sort.Float64s(l)
		return pct(l, 0.99)
	}
	fmt.Fprintf(os.Stderr, "timeline: second 0 began at %s; p99 split: to dispatch | dispatch to the agent's RUNNING | to the hub's write | to the watcher; then the machine's steal and system CPU %% in that second\n", start.Format(time.RFC3339Nano))
	for s := 0; s < len(per); s++ {
		p := per[s]
		if p == nil {
			continue
		}
		l := p.total
		sort.Float64s(l)
		machine := ""
		if h, ok := host.second(s); ok {
			machine = fmt.Sprintf(" | st %4.1f sy %4.1f", h.steal, h.system)
		}
		fmt.Fprintf(os.Stderr, "second %2d: %5d submitted, p50 %6.0f ms, p99 %6.0f ms, max %6.0f ms | %5.0f %5.0f %5.0f %5.0f%s\n", s, len(l), pct(l, 0.5), pct(l, 0.99), l[len(l)-1],
			p99(p.toDispatch), p99(p.toAgent), p99(p.toWrite), p99(p.toWatch), machine)
	}
}

// benchLogger is the hub's logger: none, or with MERIDIAN_BENCH_LOG=LEVEL
// (debug, info, warn, error) its log on standard error, to tell what the
// hub was doing when the latency timeline (MERIDIAN_BENCH_TIMELINE) shows
// a stall. Nil drops the logs.
func benchLogger(b *testing.B) *slog.Logger {
	v := os.Getenv("MERIDIAN_BENCH_LOG")
	if v == "" {
		return nil
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(v)); err != nil {
		b.Fatalf("MERIDIAN_BENCH_LOG=%q: %v (use debug, info, warn or error)", v, err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// writeHeapProfile writes the live heap to path, after a collection so
// that it is the live heap (MERIDIAN_BENCH_HEAPPROFILE and, in the agents'
// process, MERIDIAN_BENCH_AGENTS_HEAPPROFILE).
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// reportDiskStalls reports how many of the embedded etcd's WAL fsyncs and
// backend commits took over 100 ms during the run, and the slowest (as the
// upper bound of its histogram bucket): every etcd write waits behind
// them, so a slow disk shows up as a stall of the whole pipeline. It also
// reports how many of each there were per workload (etcd-wal-fsyncs/workload:
// one per batch of raft entries etcd saves, so it tells how well the
// hub's writes are grouped; etcd-backend-commits/workload: the database
// commits), counted over the whole process, the few before the load
// included.
func reportDiskStalls(b *testing.B, n int) {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return
	}
	for _, mf := range mfs {
		var name string
		switch mf.GetName() {
		case "etcd_disk_wal_fsync_duration_seconds":
			name = "wal-fsync"
		case "etcd_disk_backend_commit_duration_seconds":
			name = "backend-commit"
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			slow, maxBound, prev := uint64(0), 0.0, uint64(0)
			for _, bk := range h.GetBucket() {
				n := bk.GetCumulativeCount() - prev
				prev = bk.GetCumulativeCount()
				if n == 0 {
					continue
				}
				maxBound = bk.GetUpperBound()
				if bk.GetUpperBound() > 0.1 {
					slow += n
				}
			}
			if prev < h.GetSampleCount() { // beyond the last bucket
				slow += h.GetSampleCount() - prev
				maxBound = math.Inf(1)
			}
			b.ReportMetric(float64(slow), "etcd-"+name+"-over-100ms")
			if n > 0 {
				b.ReportMetric(float64(h.GetSampleCount())/float64(n), "etcd-"+name+"s/workload")
			}
			if !math.IsInf(maxBound, 1) {
				b.ReportMetric(maxBound*1000, "etcd-"+name+"-max-bucket-ms")
			}
		}
	}
}
