package bench

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meridian-gpu/meridian/hub/store"
)

// pct is the q-quantile (0 < q <= 1) of sorted values by nearest rank: the
// smallest value with at least q of the values at or below it. 0 when
// empty.
func pct(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// resourceSample is what the hub holds at one moment of a run: the
// benchmark process's Go heap and resident memory (hub, embedded etcd and
// NATS, and the load generator; the agents run in their own process), the
// etcd database (file size and the part in use) and the workloads stored.
type resourceSample struct {
	at                time.Duration // since the run's start
	rev               int64         // etcd's revision: one per write transaction
	heapMiB, rssMiB   float64       // live heap as of the last collection; resident set
	heapInUseMiB      float64       // heap spans in use: live plus garbage not yet collected
	gcCPU             float64       // seconds of CPU the collector has used in this process so far
	gcCycles          uint64        // collections finished so far
	dbMiB, dbInUseMiB float64
	stored            int64
	used              runUsage // CPU every process of the run has used so far
}

// runUsage is what each process of a run has used: the benchmark's own
// (hub, etcd, NATS; the load generator too when it runs in process), the
// agents' and the load generator's.
type runUsage struct{ bench, agents, load procUsage }

func (u runUsage) total() procUsage { return u.bench.plus(u.agents).plus(u.load) }

func (u runUsage) minus(v runUsage) runUsage {
	return runUsage{u.bench.minus(v.bench), u.agents.minus(v.agents), u.load.minus(v.load)}
}

// resourceWatcher samples the hub's resources every period while a run
// lasts, so a reader sees whether they plateau or grow with the work done.
type resourceWatcher struct {
	cli     *clientv3.Client
	usage   func() runUsage // of every process of the run
	start   time.Time
	first   resourceSample // before the load
	mu      sync.Mutex
	samples []resourceSample
	stop    chan struct{}
	done    chan struct{}
	// writes counts key writes by kind (MERIDIAN_BENCH_COUNT_WRITES),
	// filled by countWrites until stop.
	writes     map[string]int
	valueBytes map[string]int // bytes of the values those writes stored, by kind
	txns       map[string]int // transactions by the kinds they wrote
	writesDone chan struct{}
}

// countWrites watches every key the hub writes and counts the writes by
// kind: a new workload or dispatch record, an update of one, a delete.
// It is opt-in because the extra watcher costs the hub's etcd CPU that the
// run then reports as the hub's.
func (r *resourceWatcher) countWrites() {
	defer close(r.writesDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Every key, not only the hub's prefix: the count is of what etcd writes.
	wc := r.cli.Watch(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithPrevKV())
	for {
		select {
		case <-r.stop:
			return
		case wr, ok := <-wc:
			if !ok {
				return
			}
			// One revision is one transaction: name each by the kinds
			// of key it wrote, to see which writers the fsyncs serve.
			txn, txnRev := map[string]bool{}, int64(-1)
			endTxn := func() {
				if len(txn) > 0 {
					kinds := make([]string, 0, len(txn))
					for k := range txn {
						kinds = append(kinds, k)
					}
					sort.Strings(kinds)
					r.txns[strings.Join(kinds, "+")]++
					clear(txn)
				}
			}
			for _, ev := range wr.Events {
				if ev.Kv.ModRevision != txnRev {
					endTxn()
					txnRev = ev.Kv.ModRevision
				}
				kind := writeKind(string(ev.Kv.Key))
				switch {
				case ev.Type == clientv3.EventTypeDelete:
					kind += "-deletes"
				case ev.PrevKv == nil:
					kind += "-creates"
				default:
					kind += "-updates"
				}
				r.writes[kind]++
				r.valueBytes[kind] += len(ev.Kv.Value)
				txn[kind] = true
			}
			endTxn()
		}
	}
}

func watchResources(b *testing.B, endpoints []string, start time.Time, period time.Duration, usage func() runUsage) *resourceWatcher {
	b.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatalf("resource watcher: etcd client: %v", err)
	}
	r := &resourceWatcher{cli: cli, usage: usage, start: start, stop: make(chan struct{}), done: make(chan struct{})}
	if r.first, err = r.sample(); err != nil {
		b.Fatalf("resource watcher: first sample: %v", err)
	}
	if os.Getenv("MERIDIAN_BENCH_COUNT_WRITES") != "" {
		r.writes, r.valueBytes = map[string]int{}, map[string]int{}
		r.txns = map[string]int{}
		r.writesDone = make(chan struct{})
		go r.countWrites()
	}
	go every(period, r.stop, r.done, func() {
		if s, err := r.sample(); err == nil {
			r.mu.Lock()
			r.samples = append(r.samples, s)
			r.mu.Unlock()
		}
	})
	return r
}

// every calls sample each period until stop is closed, then closes done:
// the loop of the benchmark's samplers.
func every(period time.Duration, stop <-chan struct{}, done chan<- struct{}, sample func()) {
	defer close(done)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			sample()
		}
	}
}

// sample reads the resources now. The heap is what the last collection
// found live (runtime/metrics, free to read; forcing a collection each
// period would pause the run): with the hub's collector target of 400 the
// heap in use may be five times that, so the live heap is what shows
// whether the state grows.
func (r *resourceWatcher) sample() (resourceSample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := resourceSample{at: time.Since(r.start), heapInUseMiB: float64(ms.HeapInuse) / (1 << 20), rssMiB: rssMiB(), used: r.usage()}
	readGCMetrics(&s)
	ep := r.cli.Endpoints()[0]
	st, err := r.cli.Status(ctx, ep)
	if err != nil {
		return s, err
	}
	s.dbMiB, s.dbInUseMiB = float64(st.DbSize)/(1<<20), float64(st.DbSizeInUse)/(1<<20)
	s.rev = st.Header.GetRevision()
	resp, err := r.cli.Get(ctx, store.Prefix(store.KindWorkloads), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return s, err
	}
	s.stored = resp.Count
	return s, nil
}

// finish takes a last sample, reports it as the run's end state (heap,
// RSS, etcd size, stored workloads), the etcd write transactions per
// workload over the run (n workloads), and, when the run lasted long
// enough for several samples, how much each grew over its second half: a
// steady state grows by about nothing there.
func (r *resourceWatcher) finish(b *testing.B, n int) {
	close(r.stop)
	<-r.done
	defer r.cli.Close()
	last, err := r.sample()
	if err != nil {
		b.Logf("resources: last sample: %v", err)
		return
	}
	r.mu.Lock()
	samples := append(r.samples, last)
	r.mu.Unlock()
	b.ReportMetric(last.heapMiB, "heap-live-MiB")
	// The collector's CPU over the run (the runtime's own estimate: its
	// mark workers, assists and pauses) and how many times it ran.
	if n > 0 {
		b.ReportMetric((last.gcCPU-r.first.gcCPU)*1000/float64(n), "gc-cpu-ms/workload")
	}
	b.ReportMetric(float64(last.gcCycles-r.first.gcCycles), "gc-cycles")
	b.ReportMetric(last.heapInUseMiB, "heap-in-use-MiB")
	b.ReportMetric(last.rssMiB, "rss-MiB")
	b.ReportMetric(last.dbMiB, "etcd-db-MiB")
	b.ReportMetric(last.dbInUseMiB, "etcd-db-in-use-MiB")
	b.ReportMetric(float64(last.stored), "stored-workloads")
	if n > 0 {
		b.ReportMetric(float64(last.rev-r.first.rev)/float64(n), "etcd-txns/workload")
		if r.writesDone != nil {
			<-r.writesDone
			total := 0
			for kind, c := range r.writes {
				total += c
				if strings.HasPrefix(kind, "workloads-") || strings.HasPrefix(kind, "dispatches-") {
					b.ReportMetric(float64(c)/float64(n), kind+"/workload")
					if c > 0 && !strings.HasSuffix(kind, "-deletes") {
						b.Logf("etcd %s: %.0f value bytes each", kind, float64(r.valueBytes[kind])/float64(c))
					}
				}
			}
			b.ReportMetric(float64(total)/float64(n), "etcd-key-writes/workload")
			kinds := make([]string, 0, len(r.txns))
			for k := range r.txns {
				kinds = append(kinds, k)
			}
			sort.Slice(kinds, func(i, j int) bool { return r.txns[kinds[i]] > r.txns[kinds[j]] })
			for _, k := range kinds {
				b.Logf("etcd transactions writing %s: %.3f per workload", k, float64(r.txns[k])/float64(n))
			}
		}
	}
	if len(samples) >= 4 {
		mid := samples[len(samples)/2]
		b.ReportMetric(growth(mid.heapMiB, last.heapMiB), "heap-live-growth-2nd-half-%")
		b.ReportMetric(growth(mid.dbInUseMiB, last.dbInUseMiB), "etcd-in-use-growth-2nd-half-%")
		b.ReportMetric(growth(float64(mid.stored), float64(last.stored)), "stored-growth-2nd-half-%")
	}
	// The cores busy since the sample before, and the etcd transactions
	// a second: at a steady offered rate, a cost that grows with the work
	// done shows as a column that climbs.
	var lines strings.Builder
	prev := r.first
	for _, s := range samples {
		used, dt := s.used.minus(prev.used), (s.at - prev.at).Seconds()
		perSecond := func(x float64) float64 {
			if dt <= 0 {
				return 0
			}
			return x / dt
		}
		cores := func(u procUsage) float64 { return perSecond(u.cpu().Seconds()) }
		fmt.Fprintf(&lines, "\n  %5.0fs heap live %6.0f / in use %6.0f MiB, rss %6.0f MiB, etcd %6.0f MiB (%6.0f in use), stored %7d; since the last: %.2f cores (hub %.2f, of which GC %.2f; agents %.2f, load %.2f), %4.0f txns/s",
			s.at.Seconds(), s.heapMiB, s.heapInUseMiB, s.rssMiB, s.dbMiB, s.dbInUseMiB, s.stored,
			cores(used.total()), cores(used.bench), perSecond(s.gcCPU-prev.gcCPU), cores(used.agents), cores(used.load), perSecond(float64(s.rev-prev.rev)))
		prev = s
	}
	// To stderr beside the timeline: a benchmark's log keeps only its
	// first lines, and a long run has dozens of samples.
	fmt.Fprintf(os.Stderr, "resources over the run:%s\n", lines.String())
}

// gcMetrics are the runtime's figures readGCMetrics takes, in the order
// it reads them.
var gcMetrics = []string{"/gc/heap/live:bytes", "/cpu/classes/gc/total:cpu-seconds", "/gc/cycles/total:gc-cycles"}

// readGCMetrics fills s's collector figures from runtime/metrics (free to
// read: no collection is forced). A figure this runtime does not know
// stays 0.
func readGCMetrics(s *resourceSample) {
	m := make([]metrics.Sample, len(gcMetrics))
	for i, name := range gcMetrics {
		m[i].Name = name
	}
	metrics.Read(m)
	u := func(i int) uint64 {
		if m[i].Value.Kind() == metrics.KindUint64 {
			return m[i].Value.Uint64()
		}
		return 0
	}
	s.heapMiB = float64(u(0)) / (1 << 20)
	if m[1].Value.Kind() == metrics.KindFloat64 {
		s.gcCPU = m[1].Value.Float64()
	}
	s.gcCycles = u(2)
}

func growth(from, to float64) float64 {
	if from <= 0 {
		return 0
	}
	return (to - from) / from * 100
}

// rssMiB is this process's resident set size (VmRSS), 0 where /proc is
// not available.
func rssMiB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err == nil {
				return kb / 1024
			}
		}
	}
	return 0
}

func TestPct(t *testing.T) {
	v := make([]float64, 1000)
	for i := range v {
		v[i] = float64(i + 1)
	}
	for _, c := range []struct {
		q    float64
		want float64
	}{{0.5, 500}, {0.99, 990}, {0.999, 999}, {1, 1000}, {0.0001, 1}} {
		if got := pct(v, c.q); got != c.want {
			t.Errorf("pct(1..1000, %v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := pct([]float64{7}, 0.999); got != 7 {
		t.Errorf("pct of one value = %v", got)
	}
	if got := pct(nil, 0.5); got != 0 {
		t.Errorf("pct of none = %v", got)
	}
}

func TestRSSReadable(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc here")
	}
	if got := rssMiB(); got <= 0 {
		t.Fatalf("rssMiB() = %v, want > 0 on a system with /proc", got)
	}
}

// writeKind names a key by its first segment under the hub's prefix
// ("workloads"), or by its own first segment for keys outside it.
func writeKind(key string) string {
	if rest, ok := strings.CutPrefix(key, "/meridian/"); ok {
		return strings.SplitN(rest, "/", 2)[0]
	}
	return "other:" + strings.SplitN(strings.TrimPrefix(key, "/"), "/", 2)[0]
}

// TestReadGCMetrics: the collector's figures the benchmark reports are
// ones this runtime has, and they move when the heap does.
func TestReadGCMetrics(t *testing.T) {
	var before, after resourceSample
	readGCMetrics(&before)
	keep := make([]*[64]byte, 1<<16) // pointers, so the heap has something to scan
	for i := range keep {
		keep[i] = new([64]byte)
	}
	runtime.GC()
	readGCMetrics(&after)
	runtime.KeepAlive(keep)
	if after.gcCycles <= before.gcCycles {
		t.Errorf("collections: %d, then %d after runtime.GC", before.gcCycles, after.gcCycles)
	}
	if after.heapMiB <= 0 {
		t.Errorf("heap live %.2f MiB after a collection", after.heapMiB)
	}
	if after.gcCPU <= 0 {
		t.Errorf("collector CPU %.4f s after a collection", after.gcCPU)
	}
}
