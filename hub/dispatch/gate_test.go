package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meridian-gpu/meridian/hub/store"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// blindChecker checks every write a loop's gate sends unguarded, in every
// test of the package (TestMain): it must overwrite exactly the revision
// it was planned on (what etcd's guard checked), and never a finished
// workload (whose key retention may delete: an unguarded write after the
// delete would make it again). It reads etcd's history at the revision
// before the write.
type blindChecker struct {
	cli *clientv3.Client

	mu       sync.Mutex
	checked  int
	failures []string
}

func (c *blindChecker) check(key string, planned, committed int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.cli.Get(ctx, key, clientv3.WithRev(committed-1))
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return
	case err != nil:
		// The test's etcd may be closing; nothing to judge.
		return
	}
	c.checked++
	if len(resp.Kvs) == 0 {
		c.failures = append(c.failures, fmt.Sprintf("%s written unguarded at %d over revision %d, but it did not exist before", key, committed, planned))
		return
	}
	kv := resp.Kvs[0]
	if kv.ModRevision != planned {
		c.failures = append(c.failures, fmt.Sprintf("%s written unguarded at %d over revision %d, but the stored one was %d: a lost update", key, committed, planned, kv.ModRevision))
		return
	}
	if w, err := decodeWorkload(kv.Value); err == nil && finished(w.GetStatus().GetPhase()) {
		c.failures = append(c.failures, fmt.Sprintf("%s written unguarded at %d over a finished workload (%v at %d)", key, committed, w.GetStatus().GetPhase(), planned))
	}
}

func (c *blindChecker) report() (checked int, failures []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checked, append([]string(nil), c.failures...)
}

// fakeGateCache is the watch cache as the gate reads it.
type fakeGateCache struct {
	rev   int64
	items map[string]store.Item
}

func (f *fakeGateCache) Get(k string) (store.Item, bool) { it, ok := f.items[k]; return it, ok }
func (f *fakeGateCache) Rev() int64                      { return f.rev }

func TestWriteGate(t *testing.T) {
	k := prefWorkloads + "w1"
	put := func(rev int64) []store.Op { return []store.Op{store.PutIfModRev(k, []byte("x"), rev)} }
	guarded := func(p *passage) bool { _, g := p.ops[0].PutGuard(); return g }
	c := &fakeGateCache{rev: 10, items: map[string]store.Item{k: {Key: k, ModRev: 10}}}

	// Before the cache reaches the term's first revision: guarded.
	g := newWriteGate(c, 12, false)
	p, err := g.open(put(10))
	if err != nil || !guarded(p) {
		t.Fatalf("before the cache caught up: %v, guarded %v", err, err == nil && guarded(p))
	}
	g.close(p, 13, nil)

	// Caught up: a write planned on the current revision goes unguarded;
	// one planned on an older revision is a conflict.
	c.rev, c.items[k] = 13, store.Item{Key: k, ModRev: 13}
	g = newWriteGate(c, 12, false)
	if _, err := g.open(put(11)); !store.IsConflict(err) {
		t.Fatalf("write planned on a revision the cache has passed: %v", err)
	}
	p, err = g.open(put(13))
	if err != nil || guarded(p) {
		t.Fatalf("current plan: %v, guarded %v", err, err == nil && guarded(p))
	}
	g.close(p, 20, nil)
	// The loop's own write at 20, not yet in the cache: a plan on 13 is
	// now stale; one on 20 is not.
	if _, err := g.open(put(13)); !store.IsConflict(err) {
		t.Fatalf("plan on the revision the loop just overwrote: %v", err)
	}
	p, err = g.open(put(20))
	if err != nil || guarded(p) {
		t.Fatalf("plan on the loop's own last write: %v", err)
	}
	// A second writer of the key waits for the first's outcome.
	second := make(chan error, 1)
	go func() {
		_, err := g.open(put(20))
		second <- err
	}()
	select {
	case err := <-second:
		t.Fatalf("a second write of a key in flight did not wait: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	g.close(p, 21, nil)
	if err := <-second; !store.IsConflict(err) {
		t.Fatalf("the waiting write, planned on 20, after a write at 21: %v", err)
	}

	// A commit whose outcome is unknown makes its keys guarded until a
	// guarded write of them succeeds.
	c.rev, c.items[k] = 21, store.Item{Key: k, ModRev: 21}
	p, _ = g.open(put(21))
	g.close(p, 0, errors.New("etcd: request timed out"))
	p, err = g.open(put(21))
	if err != nil || !guarded(p) {
		t.Fatalf("after an unknown outcome: %v, guarded %v", err, err == nil && guarded(p))
	}
	g.close(p, 22, nil)
	c.rev, c.items[k] = 22, store.Item{Key: k, ModRev: 22}
	if p, err = g.open(put(22)); err != nil || guarded(p) {
		t.Fatalf("after a guarded write succeeded: %v", err)
	}
	g.close(p, 0, &store.ConflictError{})

	// A key the cache saw deleted after the plan, and that this term
	// never wrote: a conflict (a write now would make it again).
	delete(c.items, k)
	c.rev = 30
	if _, err := newWriteGate(c, 0, false).open(put(22)); !store.IsConflict(err) {
		t.Fatalf("write of a deleted key: %v", err)
	}
	// With WorkloadGuards every write keeps its guard.
	c.items[k] = store.Item{Key: k, ModRev: 30}
	if p, err := newWriteGate(c, 0, true).open(put(30)); err != nil || !guarded(p) {
		t.Fatalf("with guards on: %v", err)
	}
	// Other keys pass untouched.
	other := store.PutIfModRev(prefDispatches+"d1", []byte("x"), 3)
	if p, err := g.open([]store.Op{other}); err != nil || !guarded(p) {
		t.Fatalf("a record's guard was touched: %v", err)
	}
}

// testBlind is the package's blindChecker (TestMain).
var testBlind *blindChecker

// The loop sends its workload writes without revision guards, and none of
// them overwrites a revision other than the one it was planned on, or a
// finished workload, through a workload's whole life: dispatch, the
// agent's events, completion, and events sent again after the end (the
// package-wide check in TestMain covers every other test's writes too).
func TestLoopNeverWritesATerminalWorkload(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 8)
	ag := e.startAgent("east", 1, 8, 50*time.Millisecond)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	before, _ := testBlind.report()
	var ids []string
	for i := 0; i < 12; i++ {
		id := fmt.Sprintf("w%d", i)
		ids = append(ids, id)
		e.submit(gpuWorkload(id, "acme/ml/train", 1))
	}
	e.waitFor("all succeeded", 20*time.Second, func() bool {
		for _, id := range ids {
			if p, _, _ := e.phaseOn(id); p != meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED {
				return false
			}
		}
		return true
	})
	revs := map[string]int64{}
	for _, id := range ids {
		w, rev := e.workload(id)
		revs[id] = rev
		// Every event again, as a redelivery after a lost ack would.
		did := w.GetStatus().GetDispatchId()
		for _, typ := range []agentv1.DispatchEventType{agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED,
			agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED} {
			if err := ag.event(did, id, typ, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A marker submitted after the repeats: once it runs, the loop has
	// read past them.
	e.submit(gpuWorkload("marker", "acme/ml/train", 1))
	e.waitFor("marker succeeded", 20*time.Second, func() bool {
		p, _, _ := e.phaseOn("marker")
		return p == meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
	})
	time.Sleep(200 * time.Millisecond)
	for _, id := range ids {
		if _, rev := e.workload(id); rev != revs[id] {
			t.Errorf("%s was written after it finished (revision %d, was %d)", id, rev, revs[id])
		}
	}
	after, failures := testBlind.report()
	if len(failures) > 0 {
		t.Fatalf("%d unguarded writes went wrong; the first: %s", len(failures), failures[0])
	}
	// Dispatch, ACCEPTED with RUNNING, and the end: about three writes a
	// workload, nearly all of them unguarded once the cache caught up.
	if n := after - before; n < 2*len(ids) {
		t.Fatalf("%d workload writes went unguarded for %d workloads; the gate is not taking them", n, len(ids)+1)
	}
}

// Past maxWritten, the gate forgets the writes the cache shows, and the
// cache answers for those keys; writes it does not show yet are kept.
func TestWriteGateForgetsWhatTheCacheShows(t *testing.T) {
	c := &fakeGateCache{rev: 1, items: map[string]store.Item{}}
	g := newWriteGate(c, 0, false)
	for i := 0; i < maxWritten; i++ {
		g.written[fmt.Sprintf("%sw%d", prefWorkloads, i)] = int64(i + 1)
	}
	k := prefWorkloads + "w0"
	c.rev, c.items[k] = maxWritten/2, store.Item{Key: k, ModRev: 5}
	// w0 was written at 1 by this term; the cache holds a newer copy (5),
	// which it can only have because of a write the gate forgot: a plan
	// on 1 is stale.
	if _, err := g.open([]store.Op{store.PutIfModRev(k, []byte("x"), 1)}); !store.IsConflict(err) {
		t.Fatalf("plan on a forgotten write, older than the cache's copy: %v", err)
	}
	if n := len(g.written); n != maxWritten/2 {
		t.Fatalf("the gate kept %d writes, want the %d the cache does not show yet", n, maxWritten/2)
	}
	late := fmt.Sprintf("%sw%d", prefWorkloads, maxWritten-1)
	if _, err := g.open([]store.Op{store.PutIfModRev(late, []byte("x"), maxWritten)}); err != nil {
		t.Fatalf("plan on a write the gate still holds: %v", err)
	}
}
