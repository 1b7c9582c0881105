package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/hub/leader"
	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/ctxtime"
	"github.com/meridian-gpu/meridian/internal/protofast"
	"github.com/meridian-gpu/meridian/internal/telemetry"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

func decodeEvent(b []byte) (*agentv1.DispatchEvent, error) {
	ev := &agentv1.DispatchEvent{}
	if err := protofast.Unmarshal(b, ev); err != nil {
		return nil, err
	}
	if err := checkEvent(ev); err != nil {
		return nil, err
	}
	return ev, nil
}

// checkEvent says what makes an event unusable.
func checkEvent(ev *agentv1.DispatchEvent) error {
	if ev.GetDispatchId() == "" {
		return errors.New("dispatch_id: is empty")
	}
	if ev.GetType() == agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_UNSPECIFIED {
		return errors.New("type: is unspecified")
	}
	return nil
}

// ---- a working set of records, committed together ----

// txItem is one key read for an event transaction and its pending change.
type txItem struct {
	key     string
	origRev int64 // 0: did not exist
	w       *meridianv1.Workload
	r       *Record
	dirty   bool
	deleted bool
	cached  bool // read from the watch cache, not etcd
}

// evTx gathers the reads and writes of one or more events so they commit in
// one fenced transaction with compare-and-swap on every key read.
type evTx struct {
	l         *Loop
	ctx       context.Context
	fromCache bool
	items     map[string]*txItem
	// committed runs once the transaction's writes commit (metrics).
	committed []func()
}

func (l *Loop) newTx(ctx context.Context, fromCache bool) *evTx {
	return &evTx{l: l, ctx: ctx, fromCache: fromCache, items: map[string]*txItem{}}
}

// load reads key (cache first when allowed); nil when it does not exist.
func (x *evTx) load(key string, decode func(*txItem, []byte) error) (*txItem, error) {
	if it, ok := x.items[key]; ok {
		if it.deleted || it.origRev == 0 && !it.dirty {
			return nil, nil
		}
		return it, nil
	}
	var (
		b   []byte
		rev int64
		err error
	)
	cached := false
	if x.fromCache {
		if ci, ok := x.l.cache.Get(key); ok {
			b, rev, cached = ci.Value, ci.ModRev, true
		}
	}
	if b == nil {
		b, rev, err = x.l.st.Get(x.ctx, key)
		if store.IsNotFound(err) {
			x.items[key] = &txItem{key: key}
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
	}
	it := &txItem{key: key, origRev: rev, cached: cached}
	if err := decode(it, b); err != nil {
		return nil, err
	}
	x.items[key] = it
	return it, nil
}

func (x *evTx) record(key string) (*txItem, error) {
	return x.load(key, func(it *txItem, b []byte) error {
		r, err := decodeRecord(b)
		it.r = r
		return err
	})
}

func (x *evTx) workload(key string) (*txItem, error) {
	return x.load(key, func(it *txItem, b []byte) error {
		if w := x.l.recent.copyAt(key, it.origRev); w != nil {
			it.w = w
			return nil
		}
		w, err := decodeWorkload(b)
		it.w = w
		return err
	})
}

// handOff gives the mirror the workloads the transaction wrote, committed
// at rev, so that it does not decode them again (ownWrites), and keeps
// them for the next event of each (recentWrites). A finished one is left
// out of both: the mirror tells it from its summary without a decode, and
// no event rewrites it.
func (x *evTx) handOff(rev int64) {
	for k, it := range x.items {
		if !it.dirty || it.origRev == 0 || it.w == nil {
			continue
		}
		if it.deleted {
			x.l.recent.drop(k)
			continue
		}
		x.l.recent.put(k, rev, it.w) // forgets a finished one
		if !finished(it.w.GetStatus().GetPhase()) {
			x.l.own.add(k, rev, it.w)
		}
	}
}

// ops turns the changes into compare-and-swap ops, sorted by key.
func (x *evTx) ops(now time.Time) ([]store.Op, error) {
	var ops []store.Op
	for _, k := range sortedKeys(x.items) {
		it := x.items[k]
		if !it.dirty || it.origRev == 0 {
			continue
		}
		if it.deleted {
			ops = append(ops, store.Delete(k, it.origRev))
			continue
		}
		var (
			b   []byte
			err error
		)
		if it.w != nil {
			b, err = x.l.stamp(it.w, now)
		} else {
			b, err = encodeRecord(it.r)
		}
		if err != nil {
			return nil, err
		}
		ops = append(ops, store.PutIfModRev(k, b, it.origRev))
	}
	return ops, nil
}

// ---- applying events ----

// applyEvent applies one event to the working set. Unknown and stale
// dispatch ids are ignored (logged); a stale dispatch the agent says it
// still runs gets a DispatchCancel. An event that looks stale on cached
// reads is decided again on fresh reads from etcd: the cache may lag a
// dispatch this loop committed a moment ago.
func (l *Loop) applyEvent(t *term, x *evTx, subjectCluster string, ev *agentv1.DispatchEvent) error {
	err := l.applyEventOnce(t, x, subjectCluster, ev)
	if !errors.Is(err, errCheckEtcd) {
		return err
	}
	for k, it := range x.items {
		if it.cached && !it.dirty {
			delete(x.items, k)
		}
	}
	saved := x.fromCache
	x.fromCache = false
	defer func() { x.fromCache = saved }()
	return l.applyEventOnce(t, x, subjectCluster, ev)
}

func (l *Loop) applyEventOnce(t *term, x *evTx, subjectCluster string, ev *agentv1.DispatchEvent) error {
	now := l.clock()
	id := ev.GetDispatchId()
	cluster := ev.GetClusterId()
	if cluster == "" {
		cluster = subjectCluster
	}
	if subjectCluster != "" && cluster != subjectCluster {
		// NATS permissions already keep an agent to its own subjects
		// (docs/design/spoke-identity.md); a body that names another
		// cluster is dropped all the same, and never answered with a
		// cancel, so one cluster cannot act for another.
		l.m.forgedEvents.Inc()
		l.log.Warn("dropped an event whose body names another cluster than its subject", "subject_cluster", subjectCluster,
			"body_cluster", cluster, "dispatch", id, "type", ev.GetType().String())
		return nil
	}
	stillRuns := ev.GetType() == agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED || ev.GetType() == agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING
	stale := func(why string) error {
		if x.fromCache {
			// The cache may lag a commit this very loop just made (the
			// agent can answer within milliseconds): decide from etcd.
			return errCheckEtcd
		}
		l.m.staleEvents.Inc()
		l.log.Info("ignored event for a dispatch that is not current", "dispatch", id, "type", ev.GetType().String(), "cluster", cluster, "why", why)
		// A dispatch that ended needs no cancel: its ACCEPTED or RUNNING
		// is a redelivery (a hub that applied it died before the ack).
		// Work an agent really still runs is in its heartbeat, and the
		// heartbeat check (reconcileReports) cancels what is not current.
		if stillRuns && why != whyFinished {
			l.sendCancel(t, cluster, id, ev.GetWorkloadId(), "dispatch is no longer current", false)
		}
		return nil
	}
	r, ri, wi, why, err := l.findDispatch(x, id, ev.GetWorkloadId())
	if err != nil {
		return err
	}
	if why != "" {
		return stale(why)
	}
	if r.Cluster != cluster {
		return stale(fmt.Sprintf("dispatch belongs to cluster %s", r.Cluster))
	}
	w := wi.w
	when := now
	if ev.GetTime() != nil {
		when = ev.GetTime().AsTime()
	}
	st := w.Status
	// The acceptance goes into the workload, which the event writes
	// anyway, not into the record: one write fewer per dispatch.
	ack := func() {
		if !acked(r, w) {
			st.AcceptTime = tsOf(now)
			wi.dirty = true
		}
	}
	switch ev.GetType() {
	case agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED:
		if st.Phase == meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED {
			st.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_ACCEPTED
			wi.dirty = true
		}
		ack()
	case agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING:
		if st.Phase != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING {
			st.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING
			st.StartTime = tsOf(when)
			wi.dirty = true
			if dt := st.GetDispatchTime(); dt != nil {
				wait := max(0, when.Sub(dt.AsTime())).Seconds()
				x.committed = append(x.committed, func() { l.m.toRunning.Observe(wait) })
			}
		}
		ack()
	case agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_FAILED,
		agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_CANCELLED:
		l.finalAccrual(t, w, r, when)
		switch ev.GetType() {
		case agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED:
			st.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
		case agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_FAILED:
			st.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED
		default:
			st.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED
		}
		st.EndTime = tsOf(when)
		if ev.ExitCode != nil {
			st.ExitCode = proto.Int32(ev.GetExitCode())
		}
		st.Message = clip(ev.GetReason(), 1024)
		if st.Phase == meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED {
			// The agent only knows that the hub stopped it ("cancelled by
			// the hub"); the request says who asked and why.
			st.Message = cancelMessage(w, st.Message)
		}
		st.PendingReason, st.PendingReasonCode = "", ""
		wi.dirty = true
		ri.drop()
		l.markFinished(t, id)
	case agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_PREEMPTED, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_REJECTED:
		rejected := ev.GetType() == agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_REJECTED
		why := fmt.Sprintf("preempted on cluster %s", cluster)
		if rejected {
			why = fmt.Sprintf("cluster %s rejected the dispatch", cluster)
		}
		if ev.GetReason() != "" {
			why += ": " + ev.GetReason()
		}
		if !rejected {
			l.finalAccrual(t, w, r, when)
			reason := evictClusterPreemption
			t.mu.Lock()
			if _, asked := t.cancelled[id]; asked {
				reason = evictHubPreemption
			}
			t.mu.Unlock()
			x.committed = append(x.committed, func() { l.m.evictions.WithLabelValues(reason).Inc() })
		}
		l.requeueStatus(w, now, why, rejected)
		if !rejected && w.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
			n := preemptions(w) + 1
			until := now.Add(backoffFor(n, l.cfg.PreemptBackoff, l.cfg.PreemptBackoffMax))
			setPreemptHold(w, n, until)
			w.Status.PendingReason = clip(fmt.Sprintf("requeued: %s; held until %s (preemption %d), then scheduled again", why, until.UTC().Format(time.RFC3339), n), 512)
			w.Status.PendingReasonCode = CodeWaitingForScheduler
		}
		wi.dirty = true
		ri.drop()
		l.markFinished(t, id)
		l.log.Info("requeueing", "workload", r.WorkloadID, "dispatch", id, "why", why)
	}
	return nil
}

// findDispatch finds the current dispatch id an event names: in the
// workload the event names when that workload keeps its dispatch (every
// dispatch this hub commits), else as an older hub's record and the
// workload that record names. why says, when not empty, why the dispatch
// is not current; ri is nil for a folded record, and a folded record
// comes without its placement (recordHeadOf), which events do not read.
func (l *Loop) findDispatch(x *evTx, id, workloadID string) (r *Record, ri, wi *txItem, why string, err error) {
	if workloadID != "" {
		wk, kerr := WorkloadKey(workloadID)
		if kerr != nil {
			return nil, nil, nil, kerr.Error(), nil
		}
		if wi, err = x.workload(wk); err != nil {
			return nil, nil, nil, "", err
		}
		if wi != nil && wi.w.GetStatus().GetDispatchId() == id {
			switch ph := wi.w.GetStatus().GetPhase(); {
			case finished(ph):
				// Its record, if an older hub wrote one, went with the
				// finish.
				return nil, nil, nil, whyFinished, nil
			case active(ph) && folded(wi.w):
				return recordHeadOf(wi.w), nil, wi, "", nil
			}
		}
	}
	rk, err := DispatchKey(id)
	if err != nil {
		return nil, nil, nil, err.Error(), nil
	}
	if ri, err = x.record(rk); err != nil {
		return nil, nil, nil, "", err
	}
	if ri == nil {
		return nil, nil, nil, "no dispatch record", nil
	}
	r = ri.r
	wk, err := WorkloadKey(r.WorkloadID)
	if err != nil {
		return nil, nil, nil, err.Error(), nil
	}
	if wi, err = x.workload(wk); err != nil {
		return nil, nil, nil, "", err
	}
	if wi == nil {
		return nil, nil, nil, "workload is gone", nil
	}
	if wi.w.GetStatus().GetDispatchId() != id || !active(wi.w.GetStatus().GetPhase()) {
		return nil, nil, nil, "workload points at another dispatch", nil
	}
	return r, ri, wi, "", nil
}

// whyFinished is findDispatch's reason for a dispatch whose workload has
// ended with it.
const whyFinished = "the dispatch has finished"

// drop deletes a stored dispatch record with the transaction; nothing for a
// folded one (nil), which goes with its workload's write.
func (it *txItem) drop() {
	if it != nil {
		it.dirty, it.deleted = true, true
	}
}

// applyBatch applies events in order as one transaction set; it returns the
// commit error (conflicts included) so the caller can fall back.
func (l *Loop) applyBatch(t *term, evs []batchEvent, fromCache bool) error {
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	x := l.newTx(ctx, fromCache)
	for _, e := range evs {
		if err := l.applyEvent(t, x, e.cluster, e.ev); err != nil {
			return err
		}
	}
	ops, err := x.ops(l.clock())
	if err != nil || len(ops) == 0 {
		return err
	}
	if len(ops) > min(l.st.MaxTxnOps(), 1024) {
		// A workload and an older hub's record must commit together;
		// rather than pair them up, let the caller go one event at a time.
		return errBatchTooLarge
	}
	rev, err := l.commit(t, ops...)
	if err != nil {
		return err
	}
	x.handOff(rev)
	for _, f := range x.committed {
		f()
	}
	return nil
}

var errBatchTooLarge = errors.New("event batch too large for one transaction")

// errCheckEtcd means an event looked stale on cached data; it is applied
// again on fresh reads before it is ignored.
var errCheckEtcd = errors.New("event looks stale in the cache; re-reading etcd")

type batchEvent struct {
	msg     jetstream.Msg
	cluster string
	ev      *agentv1.DispatchEvent
	span    trace.Span // nil when tracing is off (tracing.go)
}

// handleOne applies a single event, retrying conflicts on fresh reads.
func (l *Loop) handleOne(t *term, e batchEvent) error {
	for attempt := 0; attempt < 20; attempt++ {
		if t.ctx.Err() != nil {
			return fmt.Errorf("term ended: %w", t.ctx.Err())
		}
		err := l.applyBatch(t, []batchEvent{e}, attempt == 0)
		switch {
		case err == nil:
			return nil
		case leader.IsNotLeader(err):
			t.cancel()
			return err
		case store.IsConflict(err):
			continue
		default:
			return err
		}
	}
	return fmt.Errorf("event %s for dispatch %s: still conflicting after 20 attempts", e.ev.GetType(), e.ev.GetDispatchId())
}

// consumeEvents reads the hub-events durable consumer in batches while the
// term lasts. Each batch is applied in one transaction (falling back to one
// event at a time on a conflict) and then acknowledged; an event whose write
// failed is left for redelivery. Events are idempotent, so a redelivery
// after a lost ack changes nothing.
func (l *Loop) consumeEvents(t *term) error {
	js := l.bus.JetStream()
	cons, err := js.CreateOrUpdateConsumer(t.ctx, natsbus.StreamEvents, jetstream.ConsumerConfig{
		Durable:       natsbus.HubEventsConsumer,
		Description:   "meridian hub: agent events",
		FilterSubject: "meridian.events.*",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       l.cfg.EventAckWait,
		MaxDeliver:    -1,
		MaxAckPending: 4096,
	})
	if err != nil {
		return fmt.Errorf("dispatch: events consumer: %w", err)
	}
	// Two writes per event at most: keep a batch inside one transaction.
	size := max(1, min(l.cfg.EventBatch, l.st.MaxTxnOps()/2))
	go func() {
		for t.ctx.Err() == nil {
			// Wait for the first event only, then take whatever else is
			// already there: a batch never waits to fill up, so an event is
			// applied as soon as the previous batch is done.
			first, err := cons.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
			if err != nil {
				if t.ctx.Err() == nil {
					l.log.Warn("fetch agent events", "err", err)
					ctxtime.Sleep(t.ctx, 100*time.Millisecond)
				}
				continue
			}
			var evs []batchEvent
			take := func(batch jetstream.MessageBatch) {
				for msg := range batch.Messages() {
					evs = l.decodeEvents(msg, evs)
				}
			}
			take(first)
			if len(evs) > 0 && size > 1 {
				if rest, err := cons.FetchNoWait(size - 1); err == nil {
					take(rest)
				}
			}
			if len(evs) == 0 || t.ctx.Err() != nil {
				continue
			}
			l.processEvents(t, evs, size)
		}
	}()
	return nil
}

// decodeEvents appends the events of one message to evs: a single
// DispatchEvent, or every event of an EventBatch (its message id tells),
// each with its processing span. An event that does not decode is
// dropped; a message with none left is terminated.
func (l *Loop) decodeEvents(msg jetstream.Msg, evs []batchEvent) []batchEvent {
	cluster := clusterOfSubject(msg.Subject())
	if !strings.HasPrefix(msg.Headers().Get(jetstream.MsgIDHeader), agentv1.EventBatchMsgIDPrefix) {
		ev, err := decodeEvent(msg.Data())
		if err != nil {
			l.log.Error("undecodable agent event dropped", "subject", msg.Subject(), "err", err)
			_ = msg.TermWithReason(err.Error())
			return evs
		}
		l.m.events.WithLabelValues(ev.GetType().String()).Inc()
		e := batchEvent{msg: msg, cluster: cluster, ev: ev}
		l.startEventSpan(natsbus.TraceFromHeader(msg.Headers()), msg.Subject(), &e)
		return append(evs, e)
	}
	b := &agentv1.EventBatch{}
	if err := protofast.Unmarshal(msg.Data(), b); err != nil {
		l.log.Error("undecodable agent event batch dropped", "subject", msg.Subject(), "err", err)
		_ = msg.TermWithReason(err.Error())
		return evs
	}
	n := len(evs)
	for i, ev := range b.GetEvents() {
		if err := checkEvent(ev); err != nil {
			l.log.Error("undecodable agent event of a batch dropped", "subject", msg.Subject(), "index", i, "err", err)
			continue
		}
		l.m.events.WithLabelValues(ev.GetType().String()).Inc()
		e := batchEvent{msg: msg, cluster: cluster, ev: ev}
		sc, _ := telemetry.ParseTraceParent(ev.GetTraceParent())
		l.startEventSpan(sc, msg.Subject(), &e)
		evs = append(evs, e)
	}
	if len(evs) == n {
		_ = msg.TermWithReason("no usable event in the batch")
	}
	return evs
}

// processEvents applies events in transactions of about size events and
// then acknowledges their messages: a message once every event it carries
// is applied, and for redelivery otherwise (events are idempotent, so
// those already applied change nothing then).
//
// The transactions commit side by side, up to parallelChunks at once:
// each holds every event of the workloads it touches (chunkByWorkload), so
// none of them can conflict with another, and etcd takes them in one raft
// round. One after another, a consumer that had fallen behind (while the
// collector marked the heap, say) waited a commit per chunk of its
// backlog and took seconds to catch up.
func (l *Loop) processEvents(t *term, evs []batchEvent, size int) {
	defer endEventSpans(evs)
	failed := map[jetstream.Msg]bool{}
	chunks, disjoint := chunkByWorkload(evs, size)
	if !disjoint || len(chunks) == 1 {
		for _, chunk := range chunks {
			if !l.settleChunk(t, chunk, l.applyBatch(t, chunk, true), failed) {
				return
			}
		}
		settleMessages(evs, failed)
		return
	}
	errs := make([]error, len(chunks))
	var wg sync.WaitGroup
	slots := make(chan struct{}, parallelChunks)
	for i, chunk := range chunks {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			errs[i] = l.applyBatch(t, chunk, true)
		}()
	}
	wg.Wait()
	for i, chunk := range chunks {
		if !l.settleChunk(t, chunk, errs[i], failed) {
			return
		}
	}
	settleMessages(evs, failed)
}

// settleChunk deals with a chunk's commit error: a conflict or any other
// failure applies its events one at a time, and the events that still
// fail mark their messages in failed, for redelivery. It returns false
// when the term ended: nothing is acknowledged then, and the next leader
// gets the events.
func (l *Loop) settleChunk(t *term, chunk []batchEvent, err error, failed map[jetstream.Msg]bool) bool {
	if leader.IsNotLeader(err) {
		t.cancel()
		return false
	}
	if err == nil {
		return true
	}
	if !store.IsConflict(err) && !errors.Is(err, errBatchTooLarge) {
		l.log.Warn("apply event batch; retrying one by one", "events", len(chunk), "err", err)
	}
	for _, e := range chunk {
		err := l.handleOne(t, e)
		switch {
		case err == nil:
		case leader.IsNotLeader(err) || t.ctx.Err() != nil:
			return false
		default:
			l.log.Warn("apply event; will redeliver", "dispatch", e.ev.GetDispatchId(), "type", e.ev.GetType().String(), "err", err)
			if e.span != nil {
				telemetry.Fail(e.span, err)
			}
			failed[e.msg] = true
		}
	}
	return true
}

// parallelChunks is how many event transactions commit at once.
const parallelChunks = 4

// chunkByWorkload splits evs into chunks of at most size workloads, each
// with all the events of its workloads in their order (a transaction
// writes each workload once, whatever its events), and says whether the
// chunks are disjoint: then they write different workloads and may commit
// in any order. An event without a workload id (from an agent older than
// the id in events) could be about any workload, so with one among them
// evs are cut in order into chunks of size events instead, to be applied
// one chunk after another.
func chunkByWorkload(evs []batchEvent, size int) (chunks [][]batchEvent, disjoint bool) {
	size = max(1, size)
	if len(evs) <= size {
		return [][]batchEvent{evs}, true
	}
	at := make(map[string]int, len(evs)) // workload id -> its chunk
	var workloads []int                  // per chunk, how many workloads it holds
	for _, e := range evs {
		id := e.ev.GetWorkloadId()
		if id == "" {
			var inOrder [][]batchEvent
			for lo := 0; lo < len(evs); lo += size {
				inOrder = append(inOrder, evs[lo:min(lo+size, len(evs))])
			}
			return inOrder, false
		}
		i, ok := at[id]
		if !ok {
			if len(chunks) == 0 || workloads[len(chunks)-1] >= size {
				chunks, workloads = append(chunks, nil), append(workloads, 0)
			}
			i = len(chunks) - 1
			at[id] = i
			workloads[i]++
		}
		chunks[i] = append(chunks[i], e)
	}
	return chunks, true
}

// settleMessages acknowledges each message of evs once (a batch's events
// sit side by side), or naks it when it is in failed.
func settleMessages(evs []batchEvent, failed map[jetstream.Msg]bool) {
	for i, e := range evs {
		if i > 0 && evs[i-1].msg == e.msg {
			continue
		}
		if failed[e.msg] {
			_ = e.msg.NakWithDelay(200 * time.Millisecond)
		} else {
			_ = e.msg.Ack()
		}
	}
}

func clusterOfSubject(s string) string {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '.' {
			return s[i+1:]
		}
	}
	return s
}

// markFinished remembers that the agent itself reported a dispatch stopped,
// so a heartbeat sent just before does not earn it a cancel.
func (l *Loop) markFinished(t *term, id string) {
	t.mu.Lock()
	t.finished.PutUint64(id, uint64(time.Now().UnixNano()))
	t.mu.Unlock()
}
