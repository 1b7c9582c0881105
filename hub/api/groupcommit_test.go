package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/store"
)

// fakeCommits records every transaction; a transaction touching a key in
// bad fails as a conflict. The first call waits on hold, so that callers
// pile up behind it.
type fakeCommits struct {
	mu      sync.Mutex
	txns    [][]string
	bad     map[string]bool
	hold    chan struct{}
	entered chan struct{} // closed when the first transaction starts
	first   sync.Once
}

func newFake(bad ...string) *fakeCommits {
	f := &fakeCommits{hold: make(chan struct{}), entered: make(chan struct{}), bad: map[string]bool{}}
	for _, k := range bad {
		f.bad[k] = true
	}
	return f
}

func (f *fakeCommits) commit(_ context.Context, ops ...store.Op) error {
	f.first.Do(func() {
		close(f.entered)
		<-f.hold
	})
	var keys []string
	conflict := false
	for _, o := range ops {
		keys = append(keys, o.Key())
		conflict = conflict || f.bad[o.Key()]
	}
	f.mu.Lock()
	f.txns = append(f.txns, keys)
	f.mu.Unlock()
	if conflict {
		return fmt.Errorf("fake: %w", store.ErrConflict)
	}
	return nil
}

func submitOps(i int, queueRev int64) []store.Op {
	return []store.Op{store.PutIfModRev(fmt.Sprintf("/w/%03d", i), []byte("x"), 0), store.Check("/q/a", queueRev)}
}

// runCallers has caller 0 start a transaction and hold it, then starts
// callers 1..n-1, waits until they all queue behind it, and releases it.
// It returns every caller's error.
func runCallers(t *testing.T, g *groupCommitter, f *fakeCommits, n int, ops func(int) []store.Op) []error {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	call := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = g.Commit(context.Background(), ops(i))
		}()
	}
	call(0)
	<-f.entered
	for i := 1; i < n; i++ {
		call(i)
	}
	waitQueued(t, g, n-1)
	close(f.hold)
	wg.Wait()
	return errs
}

// waitQueued waits until n callers wait behind the one committing.
func waitQueued(t *testing.T, g *groupCommitter, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		q := len(g.queue)
		g.mu.Unlock()
		if q >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d callers queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestGroupCommitSharesOneTransaction(t *testing.T) {
	f := newFake()
	var sizes []float64 // what the submits-per-transaction metric sees
	var mu sync.Mutex
	g := &groupCommitter{commit: f.commit, maxOps: 128, observe: func(n float64) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }}
	const n = 20
	errs := runCallers(t, g, f, n, func(i int) []store.Op { return submitOps(i, 7) })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	// The first caller alone, then the 19 others in one transaction with
	// the shared queue check once.
	if len(f.txns) != 2 || len(f.txns[1]) != (n-1)+1 {
		t.Fatalf("transactions %v, want 2 with %d keys in the second", f.txns, n)
	}
	if c := slices.Index(f.txns[1], "/q/a"); c < 0 || slices.Index(f.txns[1][c+1:], "/q/a") >= 0 {
		t.Fatalf("queue check not shared exactly once: %v", f.txns[1])
	}
	if !slices.Equal(sizes, []float64{1, n - 1}) {
		t.Fatalf("submits per transaction observed %v, want [1 %d]", sizes, n-1)
	}
}

func TestGroupCommitConflictFallsBackToEachCaller(t *testing.T) {
	f := newFake("/w/003")
	g := &groupCommitter{commit: f.commit, maxOps: 128}
	const n = 6
	errs := runCallers(t, g, f, n, func(i int) []store.Op { return submitOps(i, 7) })
	for i, err := range errs {
		if (err != nil) != (i == 3) || (err != nil && !store.IsConflict(err)) {
			t.Fatalf("caller %d: err %v; only caller 3 should conflict", i, err)
		}
	}
	// first alone, the shared attempt, then each of the five alone.
	if len(f.txns) != 1+1+(n-1) {
		t.Fatalf("%d transactions, want %d: %v", len(f.txns), 1+1+(n-1), f.txns)
	}
}

func TestGroupCommitSplitsWhatCannotShare(t *testing.T) {
	f := newFake()
	g := &groupCommitter{commit: f.commit, maxOps: 5}
	// Callers 1..4 queue behind caller 0. Caller 2 saw another queue
	// revision, so it cannot share a transaction with 1; at most 5 ops fit.
	ops := func(i int) []store.Op {
		if i == 2 {
			return submitOps(i, 8)
		}
		return submitOps(i, 7)
	}
	errs := runCallers(t, g, f, 5, ops)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	for _, txn := range f.txns {
		if len(txn) > 5 {
			t.Fatalf("transaction of %d ops over the limit 5: %v", len(txn), txn)
		}
		seen := map[string]bool{}
		for _, k := range txn {
			if seen[k] {
				t.Fatalf("key %s twice in one transaction: %v", k, txn)
			}
			seen[k] = true
		}
	}
	var all []string
	for _, txn := range f.txns {
		for _, k := range txn {
			if k != "/q/a" {
				all = append(all, k)
			}
		}
	}
	slices.Sort(all)
	if want := []string{"/w/000", "/w/001", "/w/002", "/w/003", "/w/004"}; !slices.Equal(all, want) {
		t.Fatalf("committed %v, want each workload once: %v", all, want)
	}
}

// A caller that gives up returns at once; the others are not failed by it.
func TestGroupCommitCallerCancelDoesNotFailOthers(t *testing.T) {
	f := newFake()
	g := &groupCommitter{commit: f.commit, maxOps: 128}
	firstDone := make(chan error, 1)
	go func() { firstDone <- g.Commit(context.Background(), submitOps(0, 7)) }()
	<-f.entered
	ctx, cancel := context.WithCancel(context.Background())
	quitter := make(chan error, 1)
	go func() { quitter <- g.Commit(ctx, submitOps(1, 7)) }()
	other := make(chan error, 1)
	go func() { other <- g.Commit(context.Background(), submitOps(2, 7)) }()
	waitQueued(t, g, 2)
	cancel()
	if err := <-quitter; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	close(f.hold)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatalf("other caller failed: %v", err)
	}
}

// Under load (the last transaction was shared), a commit waits up to the
// linger for as many callers as last time: five callers arriving together
// share one transaction instead of the first going alone, and do not wait
// the whole linger once all five are queued. A lone caller does not wait.
func TestGroupCommitLingersOnlyUnderLoad(t *testing.T) {
	f := newFake()
	close(f.hold) // no caller is held
	const linger = 200 * time.Millisecond
	g := &groupCommitter{commit: f.commit, maxOps: 128, linger: linger}

	// Idle: the last transaction had one member, so nobody waits.
	g.lastBatch.Store(1)
	t0 := time.Now()
	if err := g.Commit(context.Background(), submitOps(0, 7)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d >= linger {
		t.Fatalf("a lone caller waited %s", d)
	}

	// Loaded: five callers arriving within the linger share a transaction.
	g.lastBatch.Store(5)
	t0 = time.Now()
	f.mu.Lock()
	f.txns = nil
	f.mu.Unlock()
	var wg sync.WaitGroup
	for i := 1; i <= 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.Commit(context.Background(), submitOps(i, 7)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(f.txns) != 1 || len(f.txns[0]) != 5+1 {
		t.Fatalf("transactions %v, want one with 5 workloads and the shared check", f.txns)
	}
	if d := time.Since(t0); d >= linger {
		t.Fatalf("five callers took %s: the commit waited the whole linger though all were queued", d)
	}
}
