package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/store"
)

// laneFake is an etcd stand-in that keeps a transaction touching a stuck
// key until that key is released or the transaction's context ends (a
// write proposed through a dead leader), and commits every other at once.
// It counts the transactions in flight.
type laneFake struct {
	mu        sync.Mutex
	stuck     map[string]chan struct{}
	inFlight  int
	most      int         // the most transactions in flight at once
	starts    []time.Time // when each transaction came in
	txns      [][]string  // every transaction's keys, in the order they came in
	committed []string    // the keys of the transactions that succeeded, in order
	delay     time.Duration
	ended     chan error // when set, gets each stuck transaction's outcome
}

func newLaneFake(stuck ...string) *laneFake {
	f := &laneFake{stuck: map[string]chan struct{}{}}
	for _, k := range stuck {
		f.stuck[k] = make(chan struct{})
	}
	return f
}

func (f *laneFake) commit(ctx context.Context, ops ...store.Op) error {
	var keys []string
	var hold chan struct{}
	f.mu.Lock()
	for _, o := range ops {
		keys = append(keys, o.Key())
		if c, ok := f.stuck[o.Key()]; ok {
			hold = c
		}
	}
	f.inFlight++
	f.most = max(f.most, f.inFlight)
	f.starts = append(f.starts, time.Now())
	f.txns = append(f.txns, keys)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()
	if hold != nil {
		var err error
		select {
		case <-hold:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if f.ended != nil {
			f.ended <- err
		}
		if err != nil {
			return err
		}
	}
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	f.mu.Lock()
	f.committed = append(f.committed, keys...)
	f.mu.Unlock()
	return nil
}

func (f *laneFake) release(key string) {
	f.mu.Lock()
	c := f.stuck[key]
	f.mu.Unlock()
	close(c)
}

func (f *laneFake) state() (inFlight, most int, committed []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inFlight, f.most, slices.Clone(f.committed)
}

// waitInFlight waits until n transactions are in flight.
func (f *laneFake) waitInFlight(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if in, _, _ := f.state(); in == n {
			return
		}
		if time.Now().After(deadline) {
			in, _, _ := f.state()
			t.Fatalf("%d transactions in flight, want %d", in, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// goCommit commits ops in a goroutine and returns where its outcome and
// how long it took will arrive.
func goCommit(ctx context.Context, g *groupCommitter, ops []store.Op) (<-chan error, *time.Duration) {
	done := make(chan error, 1)
	took := new(time.Duration)
	t0 := time.Now()
	go func() {
		err := g.Commit(ctx, ops)
		*took = time.Since(t0)
		done <- err
	}()
	return done, took
}

func wantDone(t *testing.T, what string, done <-chan error, within time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(within):
		t.Fatalf("%s: no answer within %s", what, within)
	}
}

func wantWaiting(t *testing.T, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s answered (%v) while it should still wait", what, err)
	default:
	}
}

// A transaction stuck on a dead etcd leader no longer holds up the queue:
// callers queued behind it go out in a second transaction once it has been
// out slowAfter, and commit while it is still stuck. With one transaction
// in flight (maxInFlight 1, the behaviour before) they would wait for it.
func TestGroupCommitPassesAStuckTransaction(t *testing.T) {
	f := newLaneFake("/w/000")
	const slowAfter = 100 * time.Millisecond
	g := &groupCommitter{commit: f.commit, maxOps: 128, linger: time.Millisecond, slowAfter: slowAfter, maxInFlight: 4}
	stuck, _ := goCommit(context.Background(), g, submitOps(0, 7))
	f.waitInFlight(t, 1)

	const n = 20
	dones := make([]<-chan error, n)
	tooks := make([]*time.Duration, n)
	for i := range n {
		dones[i], tooks[i] = goCommit(context.Background(), g, submitOps(1+i, 7))
		time.Sleep(5 * time.Millisecond) // they keep arriving during the stall
	}
	for i := range n {
		wantDone(t, fmt.Sprintf("caller %d", 1+i), dones[i], 5*time.Second)
		// Each waits at most for the stuck one to turn slow, and a bit.
		if limit := slowAfter + 400*time.Millisecond; *tooks[i] > limit {
			t.Errorf("caller %d took %s behind a stuck transaction, want under %s", 1+i, *tooks[i], limit)
		}
	}
	wantWaiting(t, "the stuck caller", stuck)
	// Another transaction went out beside the stuck one (one is enough,
	// each passer being fast; more only on a badly loaded machine).
	if in, most, _ := f.state(); in != 1 || most < 2 || most > 4 {
		t.Fatalf("%d in flight now, at most %d; want 1 (the stuck one) and 2", in, most)
	}
	f.release("/w/000")
	wantDone(t, "the stuck caller", stuck, 5*time.Second)
}

// At most maxInFlight transactions are out at once, each extra one waits
// twice as long as the one before, and callers beyond the bound wait until
// a transaction ends.
func TestGroupCommitBoundsTransactionsInFlight(t *testing.T) {
	f := newLaneFake("/s/0", "/s/1", "/s/2", "/s/3")
	const slowAfter = 50 * time.Millisecond
	g := &groupCommitter{commit: f.commit, maxOps: 128, slowAfter: slowAfter, maxInFlight: 4}
	var stuck []<-chan error
	for i := range 4 {
		done, _ := goCommit(context.Background(), g, []store.Op{store.PutIfModRev(fmt.Sprintf("/s/%d", i), nil, 0), store.Check("/q/a", 7)})
		stuck = append(stuck, done)
		f.waitInFlight(t, i+1)
	}
	f.mu.Lock()
	starts := slices.Clone(f.starts)
	f.mu.Unlock()
	for i := 1; i < len(starts); i++ {
		want := slowAfter << (i - 1)
		if gap := starts[i].Sub(starts[i-1]); gap < want*3/4 {
			t.Errorf("transaction %d went out %s after the one before, want about %s (doubling from %s)", i+1, gap, want, slowAfter)
		}
	}

	// Four stuck: the next callers wait, however long.
	next1, _ := goCommit(context.Background(), g, submitOps(1, 7))
	next2, _ := goCommit(context.Background(), g, submitOps(2, 7))
	time.Sleep(2 * (slowAfter << 3)) // the 5th would go at 8 x slowAfter
	wantWaiting(t, "a caller beyond the bound", next1)
	if in, most, _ := f.state(); in != 4 || most != 4 {
		t.Fatalf("%d in flight, at most %d; want 4 and 4", in, most)
	}
	// One ends: they go out together.
	f.release("/s/0")
	wantDone(t, "stuck caller 0", stuck[0], 5*time.Second)
	wantDone(t, "caller 1 after a slot freed", next1, 5*time.Second)
	wantDone(t, "caller 2 after a slot freed", next2, 5*time.Second)
	if _, most, _ := f.state(); most != 4 {
		t.Fatalf("at most %d in flight, want 4", most)
	}
	for i := 1; i < 4; i++ {
		f.release(fmt.Sprintf("/s/%d", i))
		wantDone(t, fmt.Sprintf("stuck caller %d", i), stuck[i], 5*time.Second)
	}
}

// A caller whose ops write a key a stuck transaction touches (a retry with
// the same idempotency key) waits for it, and so does a later caller that
// shares a key with that one; callers that only Check a key the stuck one
// Checks too (the queue, even at another revision) pass.
func TestGroupCommitKeepsCallersSharingAKeyInOrder(t *testing.T) {
	f := newLaneFake("/w/000")
	g := &groupCommitter{commit: f.commit, maxOps: 128, slowAfter: 50 * time.Millisecond, maxInFlight: 4}
	idem := store.PutIfModRev("/i/k", []byte("x"), 0)
	stuck, _ := goCommit(context.Background(), g, append(submitOps(0, 7), idem))
	f.waitInFlight(t, 1)

	retry, _ := goCommit(context.Background(), g, append(submitOps(1, 7), idem))
	waitQueued(t, g, 1)
	behind, _ := goCommit(context.Background(), g, []store.Op{store.Check("/w/001", 0), store.PutIfModRev("/w/009", nil, 0)})
	waitQueued(t, g, 2)
	other, _ := goCommit(context.Background(), g, submitOps(2, 8))

	wantDone(t, "an unrelated caller", other, 5*time.Second)
	time.Sleep(300 * time.Millisecond)
	wantWaiting(t, "the retry with the stuck caller's idempotency key", retry)
	wantWaiting(t, "the caller sharing a key with the retry", behind)
	if _, _, committed := f.state(); slices.Contains(committed, "/w/001") || slices.Contains(committed, "/w/009") {
		t.Fatalf("committed %v while the stuck transaction holds /i/k", committed)
	}

	f.release("/w/000")
	wantDone(t, "the stuck caller", stuck, 5*time.Second)
	wantDone(t, "the retry", retry, 5*time.Second)
	wantDone(t, "the caller behind the retry", behind, 5*time.Second)
	_, _, committed := f.state()
	if a, b, c := slices.Index(committed, "/w/000"), slices.Index(committed, "/w/001"), slices.Index(committed, "/w/009"); !(a < b && b < c) {
		t.Fatalf("commit order %v: want /w/000, then /w/001, then /w/009", committed)
	}
}

// A transaction whose callers have all given up is cancelled rather than
// left to etcd's timeout, and a caller that gave up while queued is not
// committed at all.
func TestGroupCommitDropsCallersThatGaveUp(t *testing.T) {
	f := newLaneFake("/w/000")
	f.ended = make(chan error, 1)
	g := &groupCommitter{commit: f.commit, maxOps: 128} // one transaction in flight
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	gaveUp, _ := goCommit(ctx, g, submitOps(0, 7))
	f.waitInFlight(t, 1)
	qctx, qcancel := context.WithCancel(context.Background())
	queued, _ := goCommit(qctx, g, submitOps(1, 7))
	waitQueued(t, g, 1)
	qcancel()
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued caller that gave up: %v", err)
	}
	if err := <-gaveUp; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stuck caller: %v", err)
	}
	select {
	case err := <-f.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the abandoned transaction ended with %v, want it cancelled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the transaction nobody waits for still runs 2 s after its caller gave up")
	}
	later, _ := goCommit(context.Background(), g, submitOps(2, 7))
	wantDone(t, "a later caller", later, 5*time.Second)
	_, _, committed := f.state()
	if slices.Contains(committed, "/w/001") {
		t.Fatalf("committed %v: the caller that gave up while queued was committed", committed)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, txn := range f.txns {
		if slices.Contains(txn, "/w/001") {
			t.Fatalf("transactions %v: the caller that gave up while queued was sent", f.txns)
		}
	}
}

// A caller gets its answer at its own deadline even when it started the
// transaction and others in it still wait for it.
func TestGroupCommitCallerReturnsAtItsDeadline(t *testing.T) {
	f := newLaneFake("/w/000")
	g := &groupCommitter{commit: f.commit, maxOps: 128, linger: 5 * time.Second}
	g.lastBatch.Store(2) // the first transaction waits for a second caller
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	first, took := goCommit(ctx, g, submitOps(0, 7))
	waitQueued(t, g, 1)
	second, _ := goCommit(context.Background(), g, submitOps(1, 7))
	f.waitInFlight(t, 1)
	select {
	case err := <-first:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("first caller: %v", err)
		}
		if *took > time.Second {
			t.Fatalf("first caller answered after %s, its deadline was 100ms", *took)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the caller that started the transaction is held past its deadline")
	}
	wantWaiting(t, "the second caller", second)
	f.release("/w/000")
	wantDone(t, "the second caller", second, 5*time.Second)
	if _, _, committed := f.state(); !slices.Contains(committed, "/w/001") {
		t.Fatalf("committed %v, want the second caller's /w/001", committed)
	}
}

// Under normal load (commits of a few ms) one transaction is in flight at
// a time and callers share them, as before: the batching keeps etcd's
// transaction rate down.
func TestGroupCommitKeepsOneTransactionInFlightUnderNormalLoad(t *testing.T) {
	f := newLaneFake()
	f.delay = 2 * time.Millisecond
	g := &groupCommitter{commit: f.commit, maxOps: 128, linger: groupCommitLinger,
		slowAfter: groupCommitSlowAfter, maxInFlight: groupCommitMaxInFlight}
	const workers, each = 16, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if err := g.Commit(context.Background(), submitOps(w*each+i, 7)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	_, most, committed := f.state()
	if most != 1 {
		t.Fatalf("%d transactions in flight at once under normal load, want 1", most)
	}
	writes := 0
	for _, k := range committed {
		if strings.HasPrefix(k, "/w/") {
			writes++
		}
	}
	if writes != workers*each {
		t.Fatalf("%d workloads committed, want %d", writes, workers*each)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.txns); n > workers*each/2 {
		t.Fatalf("%d transactions for %d callers: they hardly shared", n, workers*each)
	}
}

// mayStartLocked: the first transaction goes out at once; each extra one
// once the youngest in flight is slowAfter << (in flight - 1) old; none
// beyond maxInFlight, and none with maxInFlight unset.
func TestGroupCommitMayStart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const slow = 100 * time.Millisecond
	lanesAt := func(ages ...time.Duration) []*lane {
		var ls []*lane
		for _, a := range ages {
			ls = append(ls, &lane{start: t0.Add(-a)})
		}
		return ls
	}
	tests := map[string]struct {
		queued     int
		max        int
		lanes      []*lane
		ok         bool
		at         time.Duration // when not ok: from t0
		wantZeroAt bool
	}{
		"nothing queued":                 {queued: 0, max: 4, lanes: lanesAt(time.Hour), wantZeroAt: true},
		"none in flight":                 {queued: 1, max: 4, ok: true, wantZeroAt: true},
		"one young":                      {queued: 1, max: 4, lanes: lanesAt(99 * time.Millisecond), at: time.Millisecond},
		"one slow":                       {queued: 1, max: 4, lanes: lanesAt(100 * time.Millisecond), ok: true},
		"two, youngest under 2x":         {queued: 1, max: 4, lanes: lanesAt(time.Hour, 150*time.Millisecond), at: 50 * time.Millisecond},
		"two, youngest at 2x":            {queued: 1, max: 4, lanes: lanesAt(time.Hour, 200*time.Millisecond), ok: true},
		"three, youngest under 4x":       {queued: 1, max: 4, lanes: lanesAt(time.Hour, time.Hour, 399*time.Millisecond), at: time.Millisecond},
		"three, youngest at 4x":          {queued: 1, max: 4, lanes: lanesAt(time.Hour, time.Hour, 400*time.Millisecond), ok: true},
		"four: the bound":                {queued: 1, max: 4, lanes: lanesAt(time.Hour, time.Hour, time.Hour, time.Hour), wantZeroAt: true},
		"maxInFlight unset: one at most": {queued: 1, max: 0, lanes: lanesAt(time.Hour), wantZeroAt: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := &groupCommitter{slowAfter: slow, maxInFlight: tc.max, lanes: tc.lanes, queue: make([]*pendingCommit, tc.queued)}
			ok, at := g.mayStartLocked(t0)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			switch {
			case tc.wantZeroAt:
				if !at.IsZero() {
					t.Fatalf("at %v, want none", at)
				}
			case !tc.ok:
				if want := t0.Add(tc.at); !at.Equal(want) {
					t.Fatalf("at t0%+v, want t0%+v", at.Sub(t0), tc.at)
				}
			}
		})
	}
}
