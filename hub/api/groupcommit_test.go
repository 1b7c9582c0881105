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

// The gap between callers is an average that follows a stream and
// forgets an idle spell quickly: a pause counts as at most a second.
func TestGroupCommitGapFollowsTheStream(t *testing.T) {
	g := &groupCommitter{}
	t0 := time.Unix(1000, 0)
	g.noteArrivalLocked(t0)
	if g.gap != 0 {
		t.Fatalf("gap %s after one caller, want 0 (unknown)", g.gap)
	}
	now := t0
	for range 40 {
		now = now.Add(5 * time.Millisecond)
		g.noteArrivalLocked(now)
	}
	if g.gap != 5*time.Millisecond {
		t.Fatalf("gap %s after a stream every 5ms, want 5ms", g.gap)
	}
	g.noteArrivalLocked(now.Add(time.Hour))
	if want := 5*time.Millisecond + (time.Second-5*time.Millisecond)/8; g.gap != want {
		t.Fatalf("gap %s after an hour's pause, want %s (the pause counted as a second)", g.gap, want)
	}
}

// lingerFor: no wait when idle; as many callers as last time under load;
// a second caller, for twice the gap at most streamLinger, in a stream.
func TestGroupCommitLingerForStreams(t *testing.T) {
	for _, c := range []struct {
		name       string
		last       int64
		gap        time.Duration
		stream     time.Duration
		want       int64
		wantWait   time.Duration
		mustNotNap bool
	}{
		{name: "idle", last: 1, gap: 0, stream: 10 * time.Millisecond, mustNotNap: true},
		{name: "callers farther apart than streamLinger", last: 1, gap: 20 * time.Millisecond, stream: 10 * time.Millisecond, mustNotNap: true},
		{name: "stream off", last: 1, gap: 5 * time.Millisecond, stream: 0, mustNotNap: true},
		{name: "a stream every 4ms", last: 1, gap: 4 * time.Millisecond, stream: 10 * time.Millisecond, want: 2, wantWait: 8 * time.Millisecond},
		{name: "a stream every 8ms: capped", last: 1, gap: 8 * time.Millisecond, stream: 10 * time.Millisecond, want: 2, wantWait: 10 * time.Millisecond},
		{name: "under load, no stream", last: 5, gap: 0, stream: 10 * time.Millisecond, want: 5, wantWait: time.Millisecond},
		{name: "under load in a dense stream: the old rule", last: 5, gap: 100 * time.Microsecond, stream: 10 * time.Millisecond, want: 5, wantWait: time.Millisecond},
		{name: "pairs in a stream every 4ms: the stream's wait", last: 2, gap: 4 * time.Millisecond, stream: 10 * time.Millisecond, want: 2, wantWait: 8 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := &groupCommitter{linger: time.Millisecond, streamLinger: c.stream, gap: c.gap}
			g.lastBatch.Store(c.last)
			want, wait, _ := g.lingerFor()
			if c.mustNotNap {
				if want > 1 {
					t.Fatalf("lingerFor = %d callers within %s, want no wait", want, wait)
				}
				return
			}
			if want != c.want || wait != c.wantWait {
				t.Fatalf("lingerFor = %d callers within %s, want %d within %s", want, wait, c.want, c.wantWait)
			}
		})
	}
}

// In a stream of lone callers, two that come within the wait share a
// transaction; with the stream wait off, each goes alone.
func TestGroupCommitStreamSharesTransactions(t *testing.T) {
	for _, stream := range []time.Duration{0, 2 * time.Second} {
		f := newFake()
		close(f.hold)
		g := &groupCommitter{commit: f.commit, maxOps: 128, linger: time.Millisecond, streamLinger: stream}
		g.lastBatch.Store(1)
		g.gap = time.Second // as if callers had come a second apart
		first := make(chan error, 1)
		go func() { first <- g.Commit(context.Background(), submitOps(1, 7)) }()
		time.Sleep(200 * time.Millisecond) // the first is lingering, if it does
		if err := g.Commit(context.Background(), submitOps(2, 7)); err != nil {
			t.Fatal(err)
		}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		n := len(f.txns)
		f.mu.Unlock()
		if stream > 0 && n != 1 {
			t.Fatalf("stream wait %s: %d transactions, want the two callers in one", stream, n)
		}
		if stream == 0 && n != 2 {
			t.Fatalf("stream wait off: %d transactions, want one per caller", n)
		}
	}
}

// A client that submits one call at a time comes at short gaps, but
// nobody else can come while its commit waits: after waits that found
// nobody, the stream wait is skipped for longer and longer, so such a
// client waits in few of its commits. A stream that is found again is
// waited for at once.
func TestGroupCommitStreamWaitBacksOffForALoneClient(t *testing.T) {
	g := &groupCommitter{linger: time.Millisecond, streamLinger: 20 * time.Millisecond, gap: 2 * time.Millisecond}
	const commits = 200
	waited := 0
	for range commits {
		if _, _, stream := g.lingerFor(); stream {
			waited++
			g.streamWaited(false) // nobody came
		}
	}
	// Waits at commits 1, 2, 4, 7, 12, 21, 38, 71, 136 (skipping 0, 1,
	// 2, 4, ... 64 after each miss).
	if waited != 9 {
		t.Fatalf("a lone client waited in %d of %d commits, want 9", waited, commits)
	}
	// Others come: the skips left run out, the next wait finds them, and
	// from then on every commit waits again.
	for {
		if _, _, stream := g.lingerFor(); stream {
			break
		}
	}
	g.streamWaited(true)
	for range 3 {
		if want, _, s := g.lingerFor(); !s || want != 2 {
			t.Fatalf("after a hit lingerFor = %d (stream %v), want a wait for a second caller", want, s)
		}
		g.streamWaited(true)
	}
}
