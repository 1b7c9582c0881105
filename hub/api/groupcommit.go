package api

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/telemetry"
)

// groupCommitTimeout bounds one shared transaction. It is not any one
// caller's deadline: a caller that gives up early must not fail the others.
const groupCommitTimeout = 10 * time.Second

// groupCommitter merges concurrent submits into shared etcd transactions.
// The first caller to find no commit in flight commits; callers arriving
// meanwhile queue up and go out together in the next transaction, so under
// load there is about one etcd round trip per batch instead of one per
// submit, and with one caller at a time nothing waits. Every caller still
// gets its own answer: when a shared transaction fails its compares, each
// member is committed alone to learn which one conflicted.
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

	mu    sync.Mutex
	queue []*pendingCommit
	busy  bool
}

type pendingCommit struct {
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
		maxOps: st.MaxTxnOps(),
		linger: groupCommitLinger,
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
	p := &pendingCommit{ops: ops, done: make(chan error, 1), span: span}
	g.mu.Lock()
	g.queue = append(g.queue, p)
	if g.arrived == nil {
		g.arrived = make(chan struct{}, 1)
	}
	select {
	case g.arrived <- struct{}{}:
	default:
	}
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		g.drainOnce()
	} else {
		g.mu.Unlock()
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drainOnce commits what is queued now. If more arrived meanwhile, another
// goroutine takes over, so the caller that started it is not held up by
// other callers' work.
func (g *groupCommitter) drainOnce() {
	g.lingerForMore()
	g.mu.Lock()
	batch := g.queue
	g.queue = nil
	g.mu.Unlock()
	g.lastBatch.Store(int64(len(batch)))
	for len(batch) > 0 {
		members, ops, rest := g.pack(batch)
		g.run(members, ops)
		batch = rest
	}
	g.mu.Lock()
	if len(g.queue) == 0 {
		g.busy = false
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	go g.drainOnce()
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
// is the members' ops with the shared Checks once.
func (g *groupCommitter) pack(batch []*pendingCommit) (members []*pendingCommit, ops []store.Op, rest []*pendingCommit) {
	seen := map[string]store.Op{}
	for i, p := range batch {
		fits := len(ops)+len(p.ops) <= g.maxOps || len(members) == 0
		for _, o := range p.ops {
			if prev, ok := seen[o.Key()]; ok && !prev.SameCheck(o) {
				fits = false
				break
			}
		}
		if !fits {
			return members, ops, batch[i:]
		}
		for _, o := range p.ops {
			if _, ok := seen[o.Key()]; !ok {
				seen[o.Key()] = o
				ops = append(ops, o)
			}
		}
		members = append(members, p)
	}
	return members, ops, nil
}

// run commits members in one transaction of ops, or one by one when it
// fails its compares or is too large.
func (g *groupCommitter) run(members []*pendingCommit, ops []store.Op) {
	ctx, cancel := context.WithTimeout(context.Background(), groupCommitTimeout)
	defer cancel()
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
