package retention

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meridian-gpu/meridian/hub/api"
	"github.com/meridian-gpu/meridian/hub/records"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// summary is what a feeder reads of a finished workload.
func summary(f Finished) records.WorkloadSummary {
	return records.WorkloadSummary{ID: f.ID, Queue: f.Queue, Phase: f.Phase, End: f.End}
}

func keyOf(id string) string { return store.Prefix(store.KindWorkloads) + id }

// choices are Select's decisions as "id:reason", oldest first.
func choices(ds []Decision) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID + ":" + string(d.Reason)
	}
	return out
}

func indexChoices(es []entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID + ":" + string(e.reason)
	}
	return out
}

// The index chooses exactly what Select chooses from the same finished
// workloads, over random sets and policies: ties in end time, unknown
// ends, the cap and the TTL together, a MinAge floor, and an index that
// was told of rewrites, stale news, requeues and deletes on the way.
func TestIndexChoosesWhatSelectChooses(t *testing.T) {
	phases := []meridianv1.WorkloadPhase{succeeded, failed, cancelled}
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 7))
		x := NewIndex()
		x.Reset()
		model := map[string]Finished{} // what the index should hold, by id
		rev := int64(0)
		n := rng.IntN(60)
		queues := 1 + rng.IntN(4)
		randomEnd := func() time.Time {
			if rng.IntN(10) == 0 {
				return time.Time{} // unknown
			}
			// Coarse steps, so that ends tie.
			return t0.Add(-time.Duration(rng.IntN(40)) * 6 * time.Hour)
		}
		for i := range n {
			f := Finished{ID: fmt.Sprintf("w%02d", i), Queue: fmt.Sprintf("q%d", rng.IntN(queues)), Phase: phases[rng.IntN(3)], End: randomEnd()}
			rev++
			x.Finished(keyOf(f.ID), rev, summary(f))
			model[f.ID] = f
		}
		// Noise: rewrites (a newer end), stale news (ignored), requeues
		// and deletes (forgotten).
		for range rng.IntN(20) {
			if n == 0 {
				break
			}
			id := fmt.Sprintf("w%02d", rng.IntN(n))
			f, held := model[id]
			switch rng.IntN(4) {
			case 0:
				f = Finished{ID: id, Queue: fmt.Sprintf("q%d", rng.IntN(queues)), Phase: phases[rng.IntN(3)], End: randomEnd()}
				rev++
				x.Finished(keyOf(id), rev, summary(f))
				model[id] = f
			case 1:
				// News older than what the index holds changes nothing.
				if !held {
					continue
				}
				x.Finished(keyOf(id), 0, summary(Finished{ID: id, Queue: "stale", Phase: succeeded, End: t0.Add(-1000 * day)}))
			case 2:
				rev++
				x.Finished(keyOf(id), rev, records.WorkloadSummary{ID: id, Queue: f.Queue, Phase: queued})
				delete(model, id)
			case 3:
				x.Forget(keyOf(id))
				delete(model, id)
			}
		}
		ws := make([]Finished, 0, len(model))
		for _, f := range model {
			ws = append(ws, f)
		}
		p := Policy{}
		if rng.IntN(3) > 0 {
			p.TTL = time.Duration(rng.IntN(10)) * day
		}
		if rng.IntN(3) > 0 {
			p.MaxPerQueue = rng.IntN(6)
		}
		if rng.IntN(2) == 0 {
			p.MinAge = time.Duration(rng.IntN(48)) * time.Hour
			if p.TTL > 0 && p.TTL < p.MinAge {
				p.MinAge = p.TTL
			}
		}
		want := choices(Select(ws, p, t0))
		got, held := x.choose(p, t0, 0)
		if !slices.Equal(indexChoices(got), want) {
			t.Fatalf("seed %d, policy %+v, %d workloads: index chose\n%v\nSelect chose\n%v", seed, p, len(ws), indexChoices(got), want)
		}
		// With a limit, its first limit entries are Select's, and it
		// returns more exactly when Select does.
		limit := 1 + rng.IntN(8)
		some, _ := x.choose(p, t0, limit)
		k := min(limit, len(want))
		if len(some) < k || !slices.Equal(indexChoices(some[:k]), want[:k]) || (len(some) > limit) != (len(want) > limit) {
			t.Fatalf("seed %d, policy %+v, limit %d: index chose\n%v\nSelect chose\n%v", seed, p, limit, indexChoices(some), want)
		}
		if held != len(model) || x.Len() != len(model) {
			t.Fatalf("seed %d: index holds %d (%d), want %d", seed, held, x.Len(), len(model))
		}
		for _, e := range got {
			if e.key != keyOf(e.ID) || e.Queue != model[e.ID].Queue {
				t.Fatalf("seed %d: chosen entry %+v does not match its workload %+v", seed, e, model[e.ID])
			}
		}
	}
}

// A pass may use the index only once it was fed a full read: a Reset and
// then a Reflects. A Reset (the feeder reads everything again) makes it
// wait for the next Reflects.
func TestIndexSyncedOnlyAfterAFullRead(t *testing.T) {
	x := NewIndex()
	steps := []struct {
		do   func()
		want bool
	}{
		{func() {}, false},
		{func() { x.Reflects(5) }, false}, // never reset: not a full read
		{func() { x.Reset() }, false},
		{func() { x.Finished(keyOf("a"), 6, summary(fin("a", "q", succeeded, day))) }, false},
		{func() { x.Reflects(6) }, true},
		{func() { x.Reset() }, false},
		{func() { x.Reflects(7) }, true},
	}
	for i, s := range steps {
		s.do()
		if got := x.Synced(); got != s.want {
			t.Fatalf("step %d: Synced() = %v, want %v", i, got, s.want)
		}
	}
	if x.Len() != 0 {
		t.Fatalf("a reset index holds %d entries", x.Len())
	}
}

// feed tells x what etcd holds now, as the dispatch loop's mirror does on
// its first read: Reset, every finished workload, Reflects.
func feed(t *testing.T, e *env, x *Index) {
	t.Helper()
	resp, err := e.cli.Get(testCtx(t), store.Prefix(store.KindWorkloads), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	x.Reset()
	for _, kv := range resp.Kvs {
		s, err := records.SummarizeWorkload(kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		x.Finished(string(kv.Key), kv.ModRevision, s)
	}
	x.Reflects(resp.Header.Revision)
}

// A pass with a synced index deletes what a listing pass deletes (the
// same workloads as TestPassDeletesOldFinishedAndKeepsTheRest), with
// their idempotency keys, reads no stored record, and forgets what it
// deleted; before the index is synced, a pass lists.
func TestPassFromTheIndex(t *testing.T) {
	e := newEnv(t)
	old := t0.Add(-8 * day)
	for _, w := range []wl{
		{id: "old-succeeded", queue: "a", phase: succeeded, end: old, idem: "k1"},
		{id: "old-failed", queue: "a", phase: failed, end: old},
		{id: "old-cancelled", queue: "b", phase: cancelled, end: old},
		{id: "recent-succeeded", queue: "a", phase: succeeded, end: t0.Add(-time.Hour)},
		{id: "old-queued", queue: "a", phase: queued},
		{id: "old-running", queue: "a", phase: running},
		{id: "requeued", queue: "a", phase: queued, end: old},
	} {
		e.put(t, w)
	}
	x := NewIndex()
	r, err := New(Deps{Store: e.st, Leader: e.el, Index: x, Clock: func() time.Time { return t0 }, Registerer: e.reg, Config: Config{Policy: Policy{TTL: 7 * day}}})
	if err != nil {
		t.Fatal(err)
	}
	// Not synced yet: the pass lists.
	res, err := r.Pass(testCtx(t), e.fence)
	if err != nil || res.Indexed || res.Scanned != 7 || res.Deleted != 3 {
		t.Fatalf("pass before the index is synced: %+v, %v", res, err)
	}
	// Put them back, feed the index, and pass again.
	for _, w := range []wl{
		{id: "old-succeeded", queue: "a", phase: succeeded, end: old, idem: "k1"},
		{id: "old-failed", queue: "a", phase: failed, end: old},
		{id: "old-cancelled", queue: "b", phase: cancelled, end: old},
	} {
		e.put(t, w)
	}
	feed(t, e, x)
	if x.Len() != 4 {
		t.Fatalf("the index holds %d finished workloads, want 4", x.Len())
	}
	res, err = r.Pass(testCtx(t), e.fence)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"old-queued", "old-running", "recent-succeeded", "requeued"}
	if got := e.workloadIDs(t); !slices.Equal(got, want) {
		t.Fatalf("left %v, want %v", got, want)
	}
	if !res.Indexed || res.Scanned != 0 || res.Finished != 4 || res.ExpiredTTL != 3 || res.Deleted != 3 || res.IdempotencyKeys != 1 {
		t.Fatalf("result %+v", res)
	}
	if x.Len() != 1 {
		t.Fatalf("the index still holds %d workloads after the pass; want only recent-succeeded", x.Len())
	}
	for source, want := range map[string]float64{sourceList: 1, sourceIndex: 1} {
		if v := metricValue(t, e.reg, "meridian_retention_choices_total", map[string]string{"source": source}); v != want {
			t.Fatalf("choices{source=%s} = %v, want %v", source, v, want)
		}
	}
	if v := metricValue(t, e.reg, "meridian_retention_listed_workloads_total", nil); v != 7 {
		t.Fatalf("listed counter %v, want 7 (the first pass only)", v)
	}
}

// An indexed workload that changed after the index was told (the feeder
// has not read the change yet) is kept by the delete's revision guard and
// dropped from the index, so later passes do not choose it again; when
// the feeder tells its new state, it is back.
func TestIndexedWorkloadChangedSinceIsKept(t *testing.T) {
	e := newEnv(t)
	old := t0.Add(-30 * day)
	for _, id := range []string{"w1", "w2"} {
		e.put(t, wl{id: id, queue: "a", phase: succeeded, end: old})
	}
	x := NewIndex()
	feed(t, e, x)
	rev := e.put(t, wl{id: "w2", queue: "a", phase: failed, end: old})
	r, err := New(Deps{Store: e.st, Leader: e.el, Index: x, Clock: func() time.Time { return t0 }, Registerer: e.reg, Config: Config{Policy: Policy{TTL: day}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Pass(testCtx(t), e.fence)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.workloadIDs(t); !slices.Equal(got, []string{"w2"}) || res.Deleted != 1 || res.Changed != 1 || x.Len() != 0 {
		t.Fatalf("left %v, result %+v, index holds %d", got, res, x.Len())
	}
	// The feeder tells w2's new state: the next pass deletes it.
	x.Finished(keyOf("w2"), rev, summary(fin("w2", "a", failed, 30*day)))
	if res, err = r.Pass(testCtx(t), e.fence); err != nil || res.Deleted != 1 || len(e.workloadIDs(t)) != 0 {
		t.Fatalf("second pass %+v, %v, left %v", res, err, e.workloadIDs(t))
	}
}

// A pass from the index that reaches MaxPerPass leaves the rest in the
// index, not in a carry: the next pass reads the index again.
func TestIndexedPassLeavesTheRestInTheIndex(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"w1", "w2", "w3", "w4", "w5"} {
		e.put(t, wl{id: id, queue: "a", phase: succeeded, end: t0.Add(-30 * day)})
	}
	x := NewIndex()
	feed(t, e, x)
	r, err := New(Deps{Store: e.st, Leader: e.el, Index: x, Clock: func() time.Time { return t0 }, Registerer: e.reg,
		Config: Config{Policy: Policy{TTL: day}, BatchSize: 2, MaxPerPass: 3}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Pass(testCtx(t), e.fence)
	if err != nil || res.Deleted != 3 || res.Deferred < 1 || !res.Indexed || len(e.workloadIDs(t)) != 2 || x.Len() != 2 {
		t.Fatalf("first pass %+v, %v, left %v, index %d", res, err, e.workloadIDs(t), x.Len())
	}
	if res, err = r.Pass(testCtx(t), e.fence); err != nil || res.Deleted != 2 || res.Carried != 0 || !res.Indexed || res.Deferred != 0 || len(e.workloadIDs(t)) != 0 {
		t.Fatalf("second pass %+v, %v, left %v", res, err, e.workloadIDs(t))
	}
}

// TestIndexHeapPerEntry bounds what an entry costs the hub's heap: the
// index holds every finished workload until retention deletes it (about
// 140,000 at 2,000 workloads/s and a one-minute TTL), and each collection
// scans all of it. The keys are the feeder's (the watch cache's strings),
// so they are made before the measure.
func TestIndexHeapPerEntry(t *testing.T) {
	const n = 50_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = keyOf(fmt.Sprintf("wl-%08d", i))
	}
	queues := []string{"a/x", "a/y", "b/x", "b/y"}
	end := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	x := NewIndex()
	for i, k := range keys {
		x.Finished(k, int64(i+1), records.WorkloadSummary{ID: k[len(keyOf("")):], Queue: queues[i%len(queues)],
			Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED, End: end.Add(time.Duration(i) * time.Millisecond)})
	}
	per := float64(heap()-before) / n
	runtime.KeepAlive(keys)
	if x.Len() != n {
		t.Fatalf("index holds %d, want %d", x.Len(), n)
	}
	t.Logf("%.0f bytes of heap an entry", per)
	if per > 230 { // 310 with a Finished and the key in each entry
		t.Errorf("an entry costs %.0f bytes of heap, want at most 230", per)
	}
}

// TestIndexCopiesWhatItKeeps: the feeder's summaries may share the bytes
// of the values they were read from (records.SummarizeWorkloadShared);
// the index must keep its own copy of the queue's name and the
// idempotency key, not bytes someone else may reuse.
func TestIndexCopiesWhatItKeeps(t *testing.T) {
	buf := []byte("team/queue" + "idem-1")
	shared := func(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
	end := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	x := NewIndex()
	x.Finished(keyOf("w1"), 1, records.WorkloadSummary{ID: "w1", Queue: shared(buf[:10]), IdempotencyKey: shared(buf[10:]),
		Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED, End: end})
	x.Reset()
	x.Finished(keyOf("w1"), 1, records.WorkloadSummary{ID: "w1", Queue: shared(buf[:10]), IdempotencyKey: shared(buf[10:]),
		Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED, End: end})
	x.Reflects(1)
	copy(buf, "XXXXXXXXXXXXXXXX") // the feeder's bytes are reused
	got, _ := x.choose(Policy{TTL: time.Minute}, end.Add(time.Hour), 0)
	if len(got) != 1 || got[0].Queue != "team/queue" || got[0].idemKey != api.IdempotencyKey("team/queue", "idem-1") {
		t.Fatalf("chose %+v, want w1 of team/queue with its idempotency key", got)
	}
}
