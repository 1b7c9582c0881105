package api

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/telemetry"
)

// groupCommitTimeout bounds one shared transaction. It is not any one
// caller's deadline: a caller that gives up early must not fail the others
// (the transaction is cancelled only once every member has given up). It
// is below etcd's own request timeout (5 s + 2 election timeouts, 7 s with
// the default 1 s), so a transaction stuck on a dead etcd leader gives its
// slot back before etcd answers, and far above a normal commit (ms). The
// error it ends with may hide a write that still commits: a retry with the
// same idempotency key is answered with that write (see SubmitWorkload).
const groupCommitTimeout = 5 * time.Second

// groupCommitSlowAfter is groupCommitter.slowAfter for the API: a commit
// takes a few ms and end-to-end submits on the loaded 2-core soak machine
// have a p50 of ~150 ms, so a transaction out for 250 ms is almost surely
// stuck (a dead etcd leader holds it for etcd's 7 s request timeout), and
// waiting that long keeps a second transaction rare under plain load.
const groupCommitSlowAfter = 250 * time.Millisecond

// groupCommitMaxInFlight is groupCommitter.maxInFlight for the API. With
// the doubling in mayStartLocked the 2nd, 3rd and 4th transactions go out
// 0.25, 0.75 and 1.75 s after a stuck one: past the 1 to 2 s an etcd
// election takes after its leader dies, so one of them reaches the new
// leader even when the first ones went to the dead one.
const groupCommitMaxInFlight = 4

// groupCommitter merges concurrent submits into shared etcd transactions.
// A caller that finds no commit in flight starts one; callers arriving
// meanwhile queue up and go out together in the next transaction, so under
// load there is about one etcd round trip per batch instead of one per
// submit, and with one caller at a time nothing waits. Every caller still
// gets its own answer: when a shared transaction fails its compares, each
// member is committed alone to learn which one conflicted.
//
// Normally one transaction is in flight at a time. A slow one (a write
// proposed through a dead etcd leader waits for etcd's request timeout)
// stops holding up the queue: once every transaction in flight has been
// out slowAfter (doubled for each one beyond the first), the next queued
// callers go out in another, up to maxInFlight at once. Callers whose ops
// touch a key another transaction in flight touches (unless both only
// Check it) stay queued, and so do later callers sharing a key with them,
// so callers that share a key still commit in the order they came.
// Callers that gave up before their transaction goes out are dropped, and
// a transaction all of whose callers gave up is cancelled.
type groupCommitter struct {
	commit func(ctx context.Context, ops ...store.Op) error
	maxOps int
	// linger is how long a commit waits for more callers when the last
	// one was shared (under load): until as many callers as last time are
	// queued, at most linger. Each transaction is an fsync and a raft
	// round in etcd: at 2,000 submits/s batches of a few callers meant
	// ~470 transactions a second; waiting up to 1 ms halves that. A lone
	// caller (the last transaction had one member) never waits, and
	// callers that all wait on the previous commit (a closed loop) are
	// all queued at once, so they do not wait either.
	linger    time.Duration
	lastBatch atomic.Int64
	arrived   chan struct{} // a caller queued; made on first use, under mu
	// observe, when set, gets the number of callers of each transaction.
	observe func(float64)
	// slowAfter and maxInFlight let queued callers pass a slow
	// transaction (see the type's comment); maxInFlight <= 1 or
	// slowAfter <= 0 keeps one transaction in flight whatever happens.
	slowAfter   time.Duration
	maxInFlight int

	mu    sync.Mutex
	queue []*pendingCommit
	// lanes holds one entry per transaction being gathered or in flight,
	// oldest first.
	lanes []*lane
	// wake re-checks, when the youngest lane turns slow, whether queued
	// callers may go out in another lane; wakeAt is when it is set to
	// fire (zero: not set).
	wake   *time.Timer
	wakeAt time.Time
}

// lane is one transaction being gathered or in flight.
type lane struct {
	start   time.Time
	members []*pendingCommit // set once packed
}

type pendingCommit struct {
	ctx  context.Context // the caller's: done once it no longer waits
	ops  []store.Op
	done chan error // buffered: the committer never blocks on it
	// span is the caller's commit span; it does not record when the
	// caller is not traced.
	span trace.Span
}

func newGroupCommitter(st *store.Store) *groupCommitter {
	return &groupCommitter{
		commit: func(ctx context.Context, ops ...store.Op) error {
			_, err := st.Commit(ctx, nil, ops...)
			return err
		},
		maxOps:      st.MaxTxnOps(),
		linger:      groupCommitLinger,
		slowAfter:   groupCommitSlowAfter,
		maxInFlight: groupCommitMaxInFlight,
	}
}

// groupCommitLinger is groupCommitter.linger for the API.
const groupCommitLinger = time.Millisecond

// Commit stores ops atomically, possibly in one transaction with other
// callers' ops, and returns this caller's own outcome. A traced caller gets
// a span for its wait and commit, and the shared transaction a span that
// links to every traced caller's.
func (g *groupCommitter) Commit(ctx context.Context, ops []store.Op) (err error) {
	ctx, span := telemetry.Start(ctx, "meridian.store.commit")
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("meridian.store.ops", len(ops)))
		defer func() { telemetry.Fail(span, err); span.End() }()
	}
	p := &pendingCommit{ctx: ctx, ops: ops, done: make(chan error, 1), span: span}
	g.mu.Lock()
	g.queue = append(g.queue, p)
	if g.arrived == nil {
		g.arrived = make(chan struct{}, 1)
	}
	select {
	case g.arrived <- struct{}{}:
	default:
	}
	l := g.startLaneLocked(time.Now())
	g.mu.Unlock()
	if l != nil {
		// Not in this goroutine: the caller must be free to give up at its
		// deadline while the transaction runs.
		go g.drain(l)
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drain commits queued callers one transaction after another for as long
// as this lane may go on (see startLaneLocked).
func (g *groupCommitter) drain(l *lane) {
	for l != nil {
		l = g.commitOnce(l)
	}
}

// startLaneLocked adds a lane and returns it when queued callers may go
// out now (mayStartLocked); otherwise, when only time stands in the way,
// it sets wake for the moment they may. g.mu is held.
func (g *groupCommitter) startLaneLocked(now time.Time) *lane {
	ok, at := g.mayStartLocked(now)
	if ok {
		l := &lane{start: now}
		g.lanes = append(g.lanes, l)
		return l
	}
	if !at.IsZero() && (g.wakeAt.IsZero() || at.Before(g.wakeAt)) {
		g.wakeAt = at
		if g.wake == nil {
			g.wake = time.AfterFunc(at.Sub(now), g.onWake)
		} else {
			g.wake.Reset(at.Sub(now))
		}
	}
	return nil
}

// mayStartLocked reports whether queued callers may go out in a new lane
// now: when none is in flight, or when fewer than maxInFlight are and the
// youngest has been out slowAfter << (lanes-1), so each extra transaction
// waits twice as long as the one before it (a slow etcd is not sent ever
// more transactions). Otherwise at is when they may, or zero when only a
// lane ending can let them. g.mu is held.
func (g *groupCommitter) mayStartLocked(now time.Time) (ok bool, at time.Time) {
	n := len(g.lanes)
	switch {
	case len(g.queue) == 0:
		return false, time.Time{}
	case n == 0:
		return true, time.Time{}
	case n >= g.maxInFlight || g.slowAfter <= 0:
		return false, time.Time{}
	}
	at = g.lanes[n-1].start.Add(g.slowAfter << (n - 1))
	return !now.Before(at), at
}

// onWake starts a lane if queued callers may go out now.
func (g *groupCommitter) onWake() {
	g.mu.Lock()
	g.wakeAt = time.Time{}
	l := g.startLaneLocked(time.Now())
	g.mu.Unlock()
	if l != nil {
		g.drain(l)
	}
}

// commitOnce gathers one transaction for lane l and commits it. It
// returns the lane to go on with, or nil when l ends: nothing left that it
// may take, or another lane is young enough to take the rest.
func (g *groupCommitter) commitOnce(l *lane) *lane {
	g.lingerForMore()
	g.mu.Lock()
	members, ops, rest := g.pack(g.queue, g.heldLocked(l))
	g.queue = rest
	l.members = members
	if len(members) == 0 {
		// Whatever is queued waits on a key a lane in flight holds; that
		// lane starts another when it ends.
		g.endLocked(l)
		g.mu.Unlock()
		return nil
	}
	g.mu.Unlock()
	g.lastBatch.Store(int64(len(members)))
	g.run(members, ops)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.endLocked(l)
	return g.startLaneLocked(time.Now())
}

func (g *groupCommitter) endLocked(l *lane) {
	g.lanes = slices.DeleteFunc(g.lanes, func(x *lane) bool { return x == l })
}

// heldLocked returns the keys that lanes other than l have in flight,
// each with whether some op writes it (false: only Checks); nil when l is
// the only lane, as it is under normal load. g.mu is held.
func (g *groupCommitter) heldLocked(l *lane) map[string]bool {
	if len(g.lanes) <= 1 {
		return nil
	}
	held := map[string]bool{}
	for _, o := range g.lanes {
		if o != l {
			for _, p := range o.members {
				hold(held, p)
			}
		}
	}
	return held
}

// hold adds p's keys to held.
func hold(held map[string]bool, p *pendingCommit) {
	for _, o := range p.ops {
		held[o.Key()] = held[o.Key()] || o.Writes()
	}
}

// touchesHeld reports whether p touches a key in held, other than by
// Checking a key that is only Checked there: two transactions in flight
// that only read a key cannot change each other's outcome.
func touchesHeld(held map[string]bool, p *pendingCommit) bool {
	for _, o := range p.ops {
		if w, ok := held[o.Key()]; ok && (w || o.Writes()) {
			return true
		}
	}
	return false
}

// lingerForMore waits, under load, until as many callers are queued as
// the last transaction had, or linger passes.
func (g *groupCommitter) lingerForMore() {
	want := g.lastBatch.Load()
	if g.linger <= 0 || want <= 1 {
		return
	}
	deadline := time.NewTimer(g.linger)
	defer deadline.Stop()
	for {
		g.mu.Lock()
		n, arrived := int64(len(g.queue)), g.arrived
		g.mu.Unlock()
		if n >= want {
			return
		}
		select {
		case <-arrived:
		case <-deadline.C:
			return
		}
	}
}

// pack takes callers in order while their ops fit one transaction: no key
// touched twice (two identical Checks may share), at most maxOps ops. ops
// is the members' ops with the shared Checks once. A caller touching a key
// in held (what other transactions in flight touch, see touchesHeld) stays
// in rest, and its keys are held from then on, so no later caller sharing
// one passes it. A caller that gave up is answered and dropped.
func (g *groupCommitter) pack(batch []*pendingCommit, held map[string]bool) (members []*pendingCommit, ops []store.Op, rest []*pendingCommit) {
	seen := map[string]store.Op{}
	for i, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.done <- err
			continue
		}
		if touchesHeld(held, p) {
			rest = append(rest, p)
			hold(held, p)
			continue
		}
		fits := len(ops)+len(p.ops) <= g.maxOps || len(members) == 0
		for _, o := range p.ops {
			if prev, ok := seen[o.Key()]; ok && !prev.SameCheck(o) {
				fits = false
				break
			}
		}
		if !fits {
			if rest == nil {
				return members, ops, batch[i:]
			}
			return members, ops, append(rest, batch[i:]...)
		}
		for _, o := range p.ops {
			if _, ok := seen[o.Key()]; !ok {
				seen[o.Key()] = o
				ops = append(ops, o)
			}
		}
		members = append(members, p)
	}
	return members, ops, rest
}

// run commits members in one transaction of ops, or one by one when it
// fails its compares or is too large. The transaction is cancelled once
// every member has given up: nobody would get its answer.
func (g *groupCommitter) run(members []*pendingCommit, ops []store.Op) {
	ctx, cancel := context.WithTimeout(context.Background(), groupCommitTimeout)
	defer cancel()
	var waiting atomic.Int64
	waiting.Store(int64(len(members)))
	for _, p := range members {
		stop := context.AfterFunc(p.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	if g.observe != nil {
		g.observe(float64(len(members)))
	}
	span := startBatchSpan(members, len(ops))
	if span != nil {
		defer span.End()
	}
	if len(members) == 1 {
		members[0].done <- g.commit(ctx, members[0].ops...)
		return
	}
	err := g.commit(ctx, ops...)
	if err == nil || !(store.IsConflict(err) || store.IsTooManyOps(err)) {
		for _, p := range members {
			p.done <- err
		}
		return
	}
	for _, p := range members {
		if err := p.ctx.Err(); err != nil {
			p.done <- err
			continue
		}
		p.done <- g.commit(ctx, p.ops...)
	}
}

// startBatchSpan starts the span of one shared etcd transaction, linked to
// each traced member's commit span, with the first traced member's
// provider; nil when no member is traced. The span is a root of its own
// trace: it belongs to every member's equally.
func startBatchSpan(members []*pendingCommit, ops int) trace.Span {
	var (
		tp    trace.TracerProvider
		links []trace.Link
	)
	for _, p := range members {
		if p.span != nil && p.span.IsRecording() {
			if tp == nil {
				tp = p.span.TracerProvider()
			}
			links = append(links, trace.Link{SpanContext: p.span.SpanContext()})
		}
	}
	if tp == nil {
		return nil
	}
	_, span := tp.Tracer(telemetry.Scope).Start(context.Background(), "meridian.store.group_commit",
		trace.WithNewRoot(), trace.WithLinks(links...), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "etcd"), attribute.String("db.operation.name", "txn"),
			attribute.Int("meridian.store.callers", len(members)), attribute.Int("meridian.store.ops", ops)))
	return span
}
