package retention

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// cachedRunner is e.runner listing from a real watch cache over the key
// space, caught up with etcd before it returns.
func (e *env) cachedRunner(t *testing.T, cfg Config, now time.Time) (*Runner, *store.Cache) {
	t.Helper()
	c, err := store.NewCache(e.cli, store.Root+"/")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	catchUp(t, e, c)
	r, err := New(Deps{Store: e.st, Cache: c, Leader: e.el, Clock: func() time.Time { return now }, Registerer: e.reg, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if !r.cacheReady() {
		t.Fatal("the runner does not list from its ready cache")
	}
	return r, c
}

// catchUp waits until c reflects every write etcd has made.
func catchUp(t *testing.T, e *env, c *store.Cache) {
	t.Helper()
	resp, err := e.cli.Get(testCtx(t), "anything")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Ready():
	case <-testCtx(t).Done():
		t.Fatal("cache never ready")
	}
	if err := c.WaitForRevision(testCtx(t), resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
}

// A pass that lists from the watch cache deletes exactly what a pass that
// lists from etcd deletes, across more than one page.
func TestPassFromTheCacheMatchesEtcd(t *testing.T) {
	e := newEnv(t)
	old := t0.Add(-8 * day)
	var want []string
	for i := range 23 {
		id := "w-" + string(rune('a'+i))
		w := wl{id: id, queue: "a", phase: succeeded, end: old, idem: "k-" + id}
		switch i % 4 {
		case 1:
			w.phase = running
		case 2:
			w.end = t0.Add(-time.Hour) // recent
		}
		if w.phase == running || i%4 == 2 {
			want = append(want, id)
		}
		e.put(t, w)
	}
	slices.Sort(want)
	r, c := e.cachedRunner(t, Config{Policy: Policy{TTL: 7 * day}, PageSize: 5}, t0)
	res, err := r.Pass(testCtx(t), e.fence)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.workloadIDs(t); !slices.Equal(got, want) {
		t.Fatalf("left %v, want %v", got, want)
	}
	if res.Scanned != 23 || res.Deleted != 23-len(want) || res.IdempotencyKeys != res.Deleted || res.Changed != 0 {
		t.Fatalf("result %+v", res)
	}
	catchUp(t, e, c)
	if res, err = r.Pass(testCtx(t), e.fence); err != nil || res.Deleted != 0 || res.Scanned != len(want) {
		t.Fatalf("second pass: %+v, %v", res, err)
	}
}

// frozenLister is a cache that stopped following etcd: it still holds
// what was stored when it was made.
type frozenLister struct{ items []store.Item }

func (f frozenLister) Ready() <-chan struct{} { ch := make(chan struct{}); close(ch); return ch }

func (f frozenLister) Descend(prefix, below string, max int, fn func(store.Item) bool) int64 {
	n := 0
	for i := len(f.items) - 1; i >= 0 && n < max; i-- {
		if it := f.items[i]; below == "" || it.Key < below {
			n++
			if !fn(it) {
				break
			}
		}
	}
	return 0
}

// A stale cache can make a pass skip a delete, never delete a workload
// that changed since: every delete is guarded by the listed revision.
func TestStaleCacheDeletesNothingThatChanged(t *testing.T) {
	e := newEnv(t)
	old := t0.Add(-30 * day)
	var frozen frozenLister
	for _, id := range []string{"w1", "w2"} {
		e.put(t, wl{id: id, queue: "a", phase: succeeded, end: old})
		v, rev, err := e.st.Get(testCtx(t), wkey(t, id))
		if err != nil {
			t.Fatal(err)
		}
		frozen.items = append(frozen.items, store.Item{Key: wkey(t, id), Value: v, ModRev: rev})
	}
	// After the cache froze, w1 was requeued.
	e.put(t, wl{id: "w1", queue: "a", phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED})
	r, err := New(Deps{Store: e.st, Cache: frozen, Leader: e.el, Clock: func() time.Time { return t0 }, Registerer: e.reg,
		Config: Config{Policy: Policy{TTL: day}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Pass(testCtx(t), e.fence)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.workloadIDs(t); !slices.Equal(got, []string{"w1"}) || res.Deleted != 1 || res.Changed != 1 {
		t.Fatalf("left %v, result %+v; want w1 kept (changed) and w2 deleted", got, res)
	}
}
