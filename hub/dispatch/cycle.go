package dispatch

import (
	"context"
	"fmt"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meridian-gpu/meridian/hub/convert"
	"github.com/meridian-gpu/meridian/hub/leader"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/fifomap"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// mutation is a set of ops on distinct keys that must apply together, plus
// what to do once they did.
type mutation struct {
	ops   []store.Op
	size  int // bytes of values written, to keep transactions under etcd's request limit
	after func()
	// wrote is the workload one of ops puts, as encoded, for the mirror
	// to take once committed (ownWrites); its w is nil for none. more are
	// further ones, when ops put several (a submitted batch the loop
	// creates: intake.go).
	wrote ownPut
	more  []ownPut
	// failed, when set, hears the error of a commit of the mutation
	// whose outcome is unknown (not a conflict: it may have applied).
	failed func(error)
}

// ownPut is a workload a mutation puts, as encoded, at key.
type ownPut struct {
	key string
	w   *meridianv1.Workload
}

// handOver gives the mirror (ownWrites) and the event path (recentWrites)
// the workload p committed at rev; a zero p gives nothing.
func (l *Loop) handOver(p ownPut, rev int64) {
	if p.w != nil {
		l.own.add(p.key, rev, p.w)
		l.recent.put(p.key, rev, p.w)
	}
}

// settleTime is how long a new term waits before it writes pending
// reasons, so that the fleet has replayed the clusters' adverts.
const settleTime = time.Second

// maxTxnBytes keeps one transaction well under etcd's default 1.5 MiB
// request size limit.
const maxTxnBytes = 1 << 20

// applyMutations commits mutations in as few fenced transactions as the
// store allows. A mutation is never split. A conflicting transaction is
// skipped (the next cycle sees fresher state); ErrNotLeader stops at once.
// It returns the highest committed revision and whether any conflict
// happened.
func (l *Loop) applyMutations(t *term, ms []mutation) (int64, bool, error) {
	return l.applyMutationsStop(t, ms, false)
}

// applyMutationsStop is applyMutations; with stopOnConflict the first
// conflicting transaction drops every later one (a plan is not applied past
// a conflict; the next cycle rebuilds it).
func (l *Loop) applyMutationsStop(t *term, ms []mutation, stopOnConflict bool) (int64, bool, error) {
	var (
		rev      int64
		conflict bool
		batch    []store.Op
		afters   []func()
		tracked  []mutation // those of the batch that put a workload or hear a failure
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		ops, a, own := batch, afters, tracked
		batch, afters, tracked = nil, nil, nil
		r, err := l.commit(t, ops...)
		switch {
		case err == nil:
			rev = max(rev, r)
			for _, m := range own {
				l.handOver(m.wrote, r)
				for _, p := range m.more {
					l.handOver(p, r)
				}
			}
			t.mu.Lock()
			t.lastCommitRev = max(t.lastCommitRev, r)
			t.mu.Unlock()
			for _, f := range a {
				if f != nil {
					f()
				}
			}
		case leader.IsNotLeader(err):
			return err
		case store.IsConflict(err):
			conflict = true
			l.m.conflicts.Inc()
			l.log.Debug("commit conflict; will retry on a fresh snapshot", "err", err)
		default:
			conflict = true
			l.log.Warn("commit failed", "err", err)
			for _, m := range own {
				if m.failed != nil {
					m.failed(err)
				}
			}
		}
		return nil
	}
	limit := l.st.MaxTxnOps()
	size := 0
	for _, m := range ms {
		if len(batch)+len(m.ops) > limit || size+m.size > maxTxnBytes {
			if err := flush(); err != nil {
				return rev, conflict, err
			}
			size = 0
			if conflict && stopOnConflict {
				return rev, conflict, nil
			}
		}
		batch = append(batch, m.ops...)
		afters = append(afters, m.after)
		if m.wrote.w != nil || m.failed != nil {
			tracked = append(tracked, m)
		}
		size += m.size
	}
	err := flush()
	return rev, conflict, err
}

// waitRev lets the cache catch up with our own writes, so the next snapshot
// includes them.
func (l *Loop) waitRev(t *term, rev int64) {
	if rev <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(t.ctx, 5*time.Second)
	defer cancel()
	if err := l.cache.WaitForRevision(ctx, rev); err != nil && t.ctx.Err() == nil {
		l.log.Warn("cache did not reach our commit", "rev", rev, "err", err)
	}
}

// requeueStatus sends an active workload back to QUEUED (or CANCELLED when
// a cancel was requested), in place. avoid backs its cluster off.
func (l *Loop) requeueStatus(w *meridianv1.Workload, now time.Time, why string, avoid bool) {
	st := w.Status
	cluster := st.GetCluster()
	if hasCondition(w, ConditionCancelRequested) {
		st.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED
		st.EndTime = tsOf(now)
		st.Message = cancelMessage(w, clip("cancelled: "+why, 512))
		st.PendingReason, st.PendingReasonCode = "", ""
	} else {
		st.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED
		st.PendingReason = clip("requeued: "+why, 512)
		st.PendingReasonCode = CodeWaitingForScheduler
		st.Message = st.PendingReason
		st.StartTime, st.AcceptTime = nil, nil
		if avoid && cluster != "" {
			n := rejections(w, cluster) + 1
			until := now.Add(backoffFor(n, l.cfg.RejectBackoff, l.cfg.RejectBackoffMax))
			setBackoff(w, cluster, n, why, until)
		}
	}
	// Attempts count dispatches; a requeue keeps them.
	st.Cluster, st.DispatchId = "", ""
	clearFolded(st)
}

// requeue returns a mutation that requeues an active workload (see
// requeueStatus) and deletes its dispatch record when an older hub wrote
// one.
func (l *Loop) requeue(w *wl, r *rec, now time.Time, why string, avoid bool) (mutation, error) {
	nw := cloneWorkload(w.doc())
	l.requeueStatus(nw, now, why, avoid)
	m, err := l.rewrite(w, nw, now)
	if err != nil {
		return mutation{}, err
	}
	if r != nil && r.key != "" { // a folded record goes with the workload's put
		m.ops = append(m.ops, store.Delete(r.key, r.modRev))
	}
	return m, nil
}

// rewrite is the mutation that stores nw, stamped at now, over w, guarded
// by the revision w was read at (the write gate checks it; gate.go).
func (l *Loop) rewrite(w *wl, nw *meridianv1.Workload, now time.Time) (mutation, error) {
	b, err := l.stamp(nw, now)
	if err != nil {
		return mutation{}, err
	}
	return mutation{ops: []store.Op{store.PutIfModRev(w.key, b, w.modRev)}, size: len(b) + len(w.key)}, nil
}

// setBackoff records or refreshes the ClusterBackoff condition for cluster.
func setBackoff(w *meridianv1.Workload, cluster string, n int, why string, until time.Time) {
	c := &meridianv1.Condition{
		Type: ConditionClusterBackoff, Status: meridianv1.ConditionStatus_CONDITION_STATUS_TRUE, Reason: cluster,
		Message:            clip(fmt.Sprintf("rejections=%d; avoided until %s; last: %s", n, until.UTC().Format(time.RFC3339), why), 512),
		LastTransitionTime: tsOf(until),
	}
	for i, old := range w.Status.Conditions {
		if old.GetType() == ConditionClusterBackoff && old.GetReason() == cluster {
			w.Status.Conditions[i] = c
			return
		}
	}
	w.Status.Conditions = append(w.Status.Conditions, c)
}

// cycle runs one scheduling cycle. It returns ErrNotLeader (wrapped) when
// the fence failed; other errors are logged by the caller.
func (l *Loop) cycle(t *term) (err error) {
	start := time.Now()
	defer func() { l.m.cycle.Observe(time.Since(start).Seconds()) }()
	now := l.clock()
	l.sweep()

	// The mirror stays locked for the cycle: the state is its maps, not a
	// copy (see lockState).
	s := l.lockState()
	defer l.unlockState()
	// Housekeeping first: lost clusters, cancel requests, orphans.
	ms := l.housekeeping(t, s, now)
	if len(ms) > 0 {
		rev, _, err := l.applyMutations(t, ms)
		if err != nil {
			return err
		}
		l.waitRev(t, rev)
		s = l.advance()
	}
	// After a restore, work the clusters run that etcd did not know is
	// adopted before anything could dispatch it again (adopt.go).
	if ms := l.adoptReported(t, s, now); len(ms) > 0 {
		rev, _, err := l.applyMutations(t, ms)
		if err != nil {
			return err
		}
		l.waitRev(t, rev)
		s = l.advance()
	}

	// Submits the API handed the loop join the queued work (intake.go).
	// Whatever of them this cycle does not store goes back to the API
	// before the mirror is unlocked.
	in := l.takeIntake()
	defer in.settle(l)

	t.mu.Lock()
	ledger := t.ledger.Clone()
	t.mu.Unlock()
	b := l.buildSnapshot(s, ledger, now, stoppingDispatches(t, s), nominatedNow(t, now), true)
	defer b.release() // before the mirror is unlocked (defers run last in, first out)
	t.mu.Lock()
	caughtUp := s.rev >= t.lastCommitRev
	t.mu.Unlock()
	if caughtUp {
		// Only a snapshot that includes every dispatch this term committed
		// may call an agent's dispatch "not current".
		l.reconcileReports(t, b, now)
	}

	if !l.awaitReports(t, now) {
		return nil
	}
	plan, perr := safeDecide(b.snap, l.schedulerConfig())
	if perr != nil {
		l.m.panics.Inc()
		l.log.Error("scheduler panic recovered; cycle skipped", "err", perr, "pending", pendingIDs(b.snap))
		return nil
	}
	rememberNominations(t, plan, now)
	ct := l.startCycleTrace(start, plan, b, t.fence.Rev)

	// Pending reasons and their codes, only when they changed.
	reasons := map[string]string{}
	codes := map[string]string{}
	counts := map[string]int{}
	for _, p := range plan.Pending {
		reasons[p.WorkloadID] = p.Reason
		codes[p.WorkloadID] = p.Code.String()
		counts[p.Code.String()]++
	}
	for id, why := range b.invalid {
		reasons[id] = why
		codes[id] = scheduler.ReasonInvalid.String()
		counts[scheduler.ReasonInvalid.String()]++
	}
	counts[scheduler.ReasonDeferred.String()] += b.behind
	l.m.setPending(counts)
	windowReason := func(q string) string { return clip(scheduler.WindowReason(q, l.cfg.Scheduler.MaxConsidered), 1024) }
	for id, q := range fellBehind(t, b, s, now, windowReason) {
		reasons[id] = windowReason(q)
		codes[id] = scheduler.ReasonDeferred.String()
	}
	if time.Since(t.started) < settleTime {
		// The fleet is still replaying adverts; reasons would flap.
		reasons = nil
	}

	// Commit dispatches.
	type committed struct {
		w *meridianv1.Workload
		r *Record
	}
	var (
		cmu  sync.Mutex
		done []committed
	)
	var dms []mutation
	dispatched := map[string]bool{}
	for _, d := range plan.Dispatches {
		w := b.byID[d.WorkloadID]
		if w == nil || w.doc().GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
			continue
		}
		nw := cloneWorkload(w.doc())
		id := newDispatchID()
		observeWait := l.submitWait(w.doc(), now)
		st := nw.Status
		st.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED
		st.Cluster, st.DispatchId = d.Cluster, id
		st.Attempts++
		st.DispatchTime = tsOf(now)
		st.AcceptTime = nil // this attempt is not accepted yet
		st.PendingReason, st.PendingReasonCode, st.Message = "", "", ""
		st.StartTime, st.EndTime, st.ExitCode = nil, nil, nil
		st.Placement = placementOf(d.Decision)
		r := &Record{DispatchID: id, WorkloadID: d.WorkloadID, Queue: nw.GetQueue(), Cluster: d.Cluster, Attempt: st.Attempts,
			Placement: d.Placement, Usage: d.Usage, CreatedAt: now, LeaderTerm: t.fence.Rev, TraceParent: ct.traceParent(d.WorkloadID)}
		ct.describe(r)
		// The dispatch record lives in the workload: one put commits both
		// the decision and the outbox entry that republishStale works from.
		foldRecord(st, r)
		wb, err := l.stamp(nw, now)
		if err != nil {
			l.log.Error("encode workload", "workload", d.WorkloadID, "err", err)
			continue
		}
		dispatched[d.WorkloadID] = true
		after := func() {
			observeWait()
			cmu.Lock()
			done = append(done, committed{w: nw, r: r})
			cmu.Unlock()
		}
		if slot, ok := in.slot(w.key); ok {
			slot.set(nw, wb, after) // created with its submit, below
			continue
		}
		dms = append(dms, mutation{
			ops:  []store.Op{store.PutIfModRev(w.key, wb, w.modRev)},
			size: len(wb) + len(w.key), wrote: ownPut{key: w.key, w: nw},
			after: after,
		})
	}
	// The submits, after the stored work's dispatches (a conflict drops
	// the transactions after it, and a submit that conflicts is stored by
	// the API instead), each created as the cycle left it: dispatched,
	// or queued with its pending reason.
	in.queueWithReasons(l, reasons, codes, now)
	dms = append(dms, in.mutations()...)
	rev, conflict, err := l.applyMutationsStop(t, dms, true)
	if len(done) > 0 {
		l.m.dispatches.Add(float64(len(done)))
		publishAll(l, t, done, func(c committed) (*meridianv1.Workload, *Record) { return c.w, c.r })
	}
	if ct != nil {
		ok := make(map[string]bool, len(done))
		for _, c := range done {
			ok[c.r.WorkloadID] = true
		}
		ct.end(ok, err)
	}
	if err != nil {
		return err
	}

	// Preemptions, only after the commit.
	if !conflict {
		for _, p := range plan.Preemptions {
			w := b.byID[p.WorkloadID]
			if w == nil || !active(w.doc().GetStatus().GetPhase()) {
				continue
			}
			if l.sendCancel(t, w.doc().GetStatus().GetCluster(), w.doc().GetStatus().GetDispatchId(), p.WorkloadID, "preempted: "+p.Reason, true) {
				l.m.preemptions.WithLabelValues(p.Rule.String()).Inc()
			}
		}
	}

	var pms []mutation
	for _, id := range sortedKeys(reasons) {
		w := b.byID[id]
		why, code := clip(reasons[id], 1024), codes[id]
		if w == nil || dispatched[id] || in.has(w.key) || (w.doc().GetStatus().GetPendingReason() == why && w.doc().GetStatus().GetPendingReasonCode() == code) {
			continue
		}
		nw := cloneWorkload(w.doc())
		nw.Status.PendingReason, nw.Status.PendingReasonCode = why, code
		wb, err := l.stamp(nw, now)
		if err != nil {
			continue
		}
		pms = append(pms, mutation{ops: []store.Op{store.PutIfModRev(w.key, wb, w.modRev)}, size: len(wb) + len(w.key)})
	}
	prev, _, err := l.applyMutations(t, pms)
	if err != nil {
		return err
	}
	rev = max(rev, prev)

	l.republishStale(t, s, now)
	l.prune(t, s)
	if err := l.accrue(t, b, now); err != nil {
		return err
	}
	l.waitRev(t, rev)
	if conflict {
		// Run again soon on a fresh snapshot.
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

func pendingIDs(s *scheduler.Snapshot) []string {
	ids := make([]string, 0, len(s.Pending))
	for _, w := range s.Pending {
		ids = append(ids, w.ID)
	}
	if len(ids) > 50 {
		ids = append(ids[:50], fmt.Sprintf("... and %d more", len(ids)-50))
	}
	return ids
}

// schedulerConfig is the core's configuration for this cycle: the loop's,
// with the history of submitted shapes as the meridian policy's target
// unless the configuration fixes one. The mirror must be locked.
func (l *Loop) schedulerConfig() scheduler.Config {
	cfg := l.cfg.Scheduler
	// Only the cycle decides with the loop's scratch: what-if callers
	// (Explain) run beside it with their own.
	cfg.Scratch = &l.scratch
	if cfg.Target == nil && cfg.Scorer == nil && cfg.Policy == scheduler.PolicyMeridian && l.mirror.shapes != nil {
		t := l.mirror.shapes.Target()
		cfg.Target = &t
	}
	return cfg
}

// safeDecide runs the core and turns a panic into an error.
func safeDecide(s *scheduler.Snapshot, cfg scheduler.Config) (p *scheduler.Plan, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("scheduler.Decide panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return decideFn(s, cfg), nil
}

// decideFn is scheduler.Decide; tests swap it to inject a panic.
var decideFn = scheduler.Decide

// housekeeping finds the writes the state itself calls for: work of LOST
// clusters, cancel requests, and records nobody points at.
func (l *Loop) housekeeping(t *term, s *state, now time.Time) []mutation {
	var ms []mutation
	lost := lostClusters(l.fleet)
	handled := map[string]bool{}
	// Only a few records need action in any cycle: find them without
	// sorting every key, then act on them in a stable order.
	var orphanOrLost []string
	for id := range s.orphans {
		orphanOrLost = append(orphanOrLost, id)
	}
	if len(lost) > 0 {
		for id, c := range s.current {
			if lost[c.r.r.Cluster] {
				orphanOrLost = append(orphanOrLost, id)
			}
		}
	}
	sort.Strings(orphanOrLost)
	for _, id := range orphanOrLost {
		r := s.dispatches[id]
		w := s.workloads[r.r.WorkloadID]
		if w == nil || w.doc().GetStatus().GetDispatchId() != id || !active(w.doc().GetStatus().GetPhase()) {
			// An orphan: its workload moved on. Drop it and make sure the
			// agent stops it.
			l.sendCancel(t, r.r.Cluster, id, r.r.WorkloadID, "dispatch is no longer current", false)
			ms = append(ms, mutation{ops: []store.Op{store.Delete(r.key, r.modRev)}})
			continue
		}
		if !lost[r.r.Cluster] {
			continue
		}
		wasAcked := acked(r.r, w.doc())
		if wasAcked && !w.doc().GetRequeueOnClusterLoss() {
			continue // keeps running there; the agent may come back
		}
		why := fmt.Sprintf("cluster %s was lost before it acknowledged the dispatch", r.r.Cluster)
		if wasAcked {
			why = fmt.Sprintf("cluster %s was lost and the workload asks to be requeued on cluster loss", r.r.Cluster)
		}
		m, err := l.requeue(w, r, now, why, true)
		if err != nil {
			continue
		}
		l.sendCancel(t, r.r.Cluster, id, r.r.WorkloadID, why, false)
		handled[w.doc().GetId()] = true
		l.m.lostRequeues.Inc()
		if wasAcked {
			m.after = func() { l.m.evictions.WithLabelValues(evictClusterLost).Inc() }
		}
		ms = append(ms, m)
	}
	var cancelRequested []string
	for id := range s.cancelReq {
		if !handled[id] {
			cancelRequested = append(cancelRequested, id)
		}
	}
	sort.Strings(cancelRequested)
	for _, id := range cancelRequested {
		w := s.workloads[id]
		ph := w.doc().GetStatus().GetPhase()
		r := s.dispatches[w.doc().GetStatus().GetDispatchId()]
		req := s.requests[id]
		switch {
		case ph == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED || (active(ph) && r == nil):
			nw := withCancelCondition(w.doc(), req)
			nw.Status.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED
			nw.Status.EndTime = tsOf(now)
			nw.Status.PendingReason, nw.Status.PendingReasonCode = "", ""
			nw.Status.Message = cancelMessage(nw, "cancelled by request")
			if m, err := l.rewrite(w, nw, now); err == nil {
				ms = append(ms, foldRequest(m, req))
			}
		case active(ph):
			if req != nil {
				// The request becomes the workload's condition, which
				// outlives a leader change as the request did.
				m := mutation{}
				if !hasCondition(w.doc(), ConditionCancelRequested) {
					var err error
					if m, err = l.rewrite(w, withCancelCondition(w.doc(), req), now); err != nil {
						continue
					}
				}
				ms = append(ms, foldRequest(m, req))
			}
			l.sendCancel(t, r.r.Cluster, r.r.DispatchID, id, "cancelled by request", false)
		}
	}
	// A request for a workload the loop no longer holds (finished, or
	// deleted) has nothing left to do.
	var spent []string
	for id := range s.requests {
		if s.workloads[id] == nil {
			spent = append(spent, id)
		}
	}
	sort.Strings(spent)
	for _, id := range spent {
		ms = append(ms, foldRequest(mutation{}, s.requests[id]))
	}
	return ms
}

// withCancelCondition is a copy of w carrying req's CancelRequested
// condition, unless w carries one already (or req is nil).
func withCancelCondition(w *meridianv1.Workload, req *cancelRequest) *meridianv1.Workload {
	nw := cloneWorkload(w)
	if req != nil && !hasCondition(nw, ConditionCancelRequested) {
		nw.Status.Conditions = append(nw.Status.Conditions, req.cond)
	}
	return nw
}

// foldRequest adds the deletion of a cancel request to m, the mutation
// that acts on it, so that the request goes exactly when its effect is
// stored. A nil request leaves m as it is.
func foldRequest(m mutation, req *cancelRequest) mutation {
	if req == nil {
		return m
	}
	m.ops = append(m.ops, store.Delete(req.key, req.modRev))
	m.size += len(req.key)
	return m
}

// reconcileReports cancels dispatches an agent says it holds that are not
// current for that cluster (a returning agent's stale work). A cluster's
// report is checked once per heartbeat: a stale dispatch is listed again in
// the next one, so checking every cycle would only repeat the walk over
// every running dispatch.
func (l *Loop) reconcileReports(t *term, b *built, now time.Time) {
	for _, cluster := range l.fleet.IDs() {
		at, ok := l.fleet.ReportedAt(cluster)
		t.mu.Lock()
		seen := t.reportChecked[cluster].Equal(at)
		t.mu.Unlock()
		if !ok || seen {
			continue
		}
		ids, at, ok := l.fleet.Reported(cluster)
		if !ok {
			continue
		}
		t.mu.Lock()
		if t.reportChecked == nil {
			t.reportChecked = map[string]time.Time{}
		}
		t.reportChecked[cluster] = at
		var stale []string
		for _, id := range ids {
			if c, cur := b.current[id]; (cur && c.r.r.Cluster == cluster) || t.finished.Has(id) {
				continue // current, or stopped and reported by the agent itself
			}
			if l.adoptable(b, cluster, id) {
				continue // after a restore: the next cycle adopts it (adopt.go)
			}
			stale = append(stale, id)
		}
		t.mu.Unlock()
		for _, id := range stale {
			l.sendCancel(t, cluster, id, "", "dispatch is no longer current for this cluster", false)
		}
	}
}

// stoppingDispatches lists the current dispatches this term has already
// asked to stop, so that the core waits for their room instead of choosing
// more victims every cycle while they shut down.
func stoppingDispatches(t *term, s *state) map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	stopping := map[string]bool{}
	for id := range t.cancelled {
		if _, ok := s.current[id]; ok {
			stopping[id] = true
		}
	}
	return stopping
}

// nominationTTL bounds how long a workload keeps first pick after it
// preempted: long enough for its victims to stop.
const nominationTTL = 5 * time.Minute

// fellBehind finds the workloads the last cycle handed the core that this
// one did not, though they still wait: work of higher priority arrived
// ahead of them and pushed them out of their queue's window. They get the
// window's reason (why, by queue) once; the rest of a backlog keeps the
// reason it has, so a backlog costs no writes. One stays owed its reason
// until the mirror shows it stored, so a write that did not commit (a
// conflict, the fleet still settling) is made by a later cycle.
func fellBehind(t *term, b *built, s *state, now time.Time, why func(queue string) string) map[string]string {
	// Two maps take turns, so a cycle does not allocate one per head.
	cur := t.headsSpare
	if cur == nil {
		cur = make(map[string]string, len(b.snap.Pending))
	}
	clear(cur)
	for _, w := range b.snap.Pending {
		cur[w.ID] = w.Queue
	}
	if t.heads == nil {
		// A term's first cycle: the last term's heads are unknown here
		// (another hub may have led it, or this one forgot them with its
		// term). A queued workload outside the heads that carries a
		// reason other than the window's was told it as a head, so it
		// is owed the window's reason now. One walk per term, reading
		// compact workloads without decoding them.
		deferred, invalid := scheduler.ReasonDeferred.String(), scheduler.ReasonInvalid.String()
		for id, w := range s.queued {
			if _, head := cur[id]; head || w.sw == nil {
				continue
			}
			if c := w.pendingCode(); c != "" && c != deferred && c != invalid {
				if t.behind == nil {
					t.behind = map[string]string{}
				}
				t.behind[id] = w.sw.Queue
			}
		}
	}
	for id, q := range t.heads {
		if _, ok := cur[id]; !ok {
			if t.behind == nil {
				t.behind = map[string]string{}
			}
			t.behind[id] = q
		}
	}
	t.heads, t.headsSpare = cur, t.heads
	var out map[string]string
	for id, q := range t.behind {
		w := s.queued[id]
		if _, head := cur[id]; head || w == nil || s.cancelReq[id] != nil || held(w.doc(), now) {
			delete(t.behind, id) // back in the head, gone, or told why elsewhere
			continue
		}
		if st := w.doc().GetStatus(); st.GetPendingReasonCode() == scheduler.ReasonDeferred.String() && st.GetPendingReason() == why(q) {
			delete(t.behind, id) // told
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[id] = q
	}
	return out
}

// nominatedNow lists the workloads that preempted in an earlier cycle,
// so that they take the room their victims free before anyone else.
func nominatedNow(t *term, now time.Time) map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out map[string]bool
	for id, at := range t.nominated {
		if now.Sub(at) < nominationTTL {
			if out == nil {
				out = map[string]bool{}
			}
			out[id] = true
		}
	}
	return out
}

// rememberNominations records which workloads preempted in this plan and
// forgets those that were dispatched or have waited too long.
func rememberNominations(t *term, plan *scheduler.Plan, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.nominated == nil {
		t.nominated = map[string]time.Time{}
	}
	for _, pe := range plan.Pending {
		if pe.Code == scheduler.ReasonPreempting {
			if _, ok := t.nominated[pe.WorkloadID]; !ok {
				t.nominated[pe.WorkloadID] = now
			}
		}
	}
	for _, d := range plan.Dispatches {
		delete(t.nominated, d.WorkloadID)
	}
	for id, at := range t.nominated {
		if now.Sub(at) >= nominationTTL {
			delete(t.nominated, id)
		}
	}
}

// sendCancel publishes a DispatchCancel once per dispatch id and term. It
// reports whether it published.
func (l *Loop) sendCancel(t *term, cluster, dispatchID, workloadID, reason string, preempt bool) bool {
	if cluster == "" || dispatchID == "" {
		return false
	}
	t.mu.Lock()
	if _, sent := t.cancelled[dispatchID]; sent {
		t.mu.Unlock()
		return false
	}
	t.cancelled[dispatchID] = time.Now()
	t.mu.Unlock()
	msg := &agentv1.DispatchCancel{DispatchId: dispatchID, WorkloadId: workloadID, Reason: clip(reason, 512), Preempt: preempt,
		ClusterId: cluster, SentAt: tsOf(l.clock())}
	if preempt {
		msg.GracePeriod = durationpb.New(30 * time.Second)
	}
	b, err := marshalDet(&agentv1.HubMessage{Kind: &agentv1.HubMessage_Cancel{Cancel: msg}})
	if err == nil {
		ctx, cancel := context.WithTimeout(t.ctx, 5*time.Second)
		_, err = l.bus.PublishDispatch(ctx, cluster, convert.CancelMsgID(dispatchID), b)
		cancel()
	}
	if err != nil {
		t.mu.Lock()
		delete(t.cancelled, dispatchID) // try again next cycle
		t.mu.Unlock()
		l.log.Warn("publish cancel", "dispatch", dispatchID, "cluster", cluster, "err", err)
		return false
	}
	l.m.cancels.Inc()
	l.log.Info("cancel sent", "dispatch", dispatchID, "workload", workloadID, "cluster", cluster, "preempt", preempt, "reason", reason)
	return true
}

// dispatchMsg builds the agent's Dispatch for a record.
func dispatchMsg(w *meridianv1.Workload, r *Record) *agentv1.Dispatch {
	spec := dispatchSpec(w)
	return &agentv1.Dispatch{
		DispatchId: r.DispatchID, WorkloadId: r.WorkloadID, Attempt: r.Attempt, Workload: spec,
		Placement: convert.Placement(r.Placement), ClusterId: r.Cluster, LeaderTerm: r.LeaderTerm, CreatedAt: tsOf(r.CreatedAt),
	}
}

// dispatchSpec is the workload as a dispatch carries it: without its status
// and trace parent (the message headers carry the trace). It shares the
// spec's fields with w instead of cloning them: the message is encoded and
// dropped before w can change, and a deep clone of every dispatched
// workload was a fifth of the cost of publishing it.
// TestDispatchSpecCarriesEveryField fails when a new Workload field is
// missing here.
func dispatchSpec(w *meridianv1.Workload) *meridianv1.Workload {
	spec := withoutStatus(w)
	spec.TraceParent = ""
	return spec
}

// publishAll publishes dispatches in batches of async publishes, one
// round trip per batch (natsbus.PublishDispatches), in dispatch id order. A
// failed publish is retried by republishStale later.
func publishAll[T any](l *Loop, t *term, items []T, get func(T) (*meridianv1.Workload, *Record)) {
	sort.SliceStable(items, func(a, b int) bool {
		_, ra := get(items[a])
		_, rb := get(items[b])
		return ra.DispatchID < rb.DispatchID
	})
	for len(items) > 0 {
		n := min(len(items), natsbus.MaxPublishBatch)
		publishBatch(l, t, items[:n], get)
		items = items[n:]
	}
}

func publishBatch[T any](l *Loop, t *term, items []T, get func(T) (*meridianv1.Workload, *Record)) {
	// Each message carries one dispatch, or, for a cluster whose agent
	// reads them, up to maxDispatchesPerMessage of this batch's
	// dispatches for that cluster (dispatchMessage).
	type group struct {
		ws []*meridianv1.Workload
		rs []*Record
	}
	groups := map[string]*group{}
	var clusters []string // in the items' order
	for _, it := range items {
		w, r := get(it)
		g := groups[r.Cluster]
		if g == nil {
			g = &group{}
			groups[r.Cluster] = g
			clusters = append(clusters, r.Cluster)
		}
		g.ws, g.rs = append(g.ws, w), append(g.rs, r)
	}
	var (
		msgs  []natsbus.Dispatch
		carry [][]*Record // carry[i]: the dispatches msgs[i] holds
	)
	for _, c := range clusters {
		g := groups[c]
		per := 1
		if len(g.rs) > 1 && l.fleet.Capable(c, agentv1.CapabilityDispatchBatch) {
			per = maxDispatchesPerMessage
		}
		for lo := 0; lo < len(g.rs); lo += per {
			hi := min(lo+per, len(g.rs))
			m, err := l.dispatchMessage(g.ws[lo:hi], g.rs[lo:hi])
			if err != nil {
				l.log.Error("encode dispatch", "dispatch", g.rs[lo].DispatchID, "dispatches", hi-lo, "err", err)
				continue
			}
			msgs, carry = append(msgs, m), append(carry, g.rs[lo:hi])
		}
	}
	var (
		errs []error
		dups []bool
	)
	if l.dropPublishes.Load() {
		errs, dups = make([]error, len(msgs)), make([]bool, len(msgs))
	} else {
		ctx, cancel := context.WithTimeout(t.ctx, 5*time.Second)
		errs, dups = l.bus.PublishDispatches(ctx, msgs)
		cancel()
	}
	now := time.Now()
	t.mu.Lock()
	for _, rs := range carry {
		for _, r := range rs {
			t.published[r.DispatchID] = now
		}
	}
	t.mu.Unlock()
	if l.dropPublishes.Load() {
		return
	}
	for i, rs := range carry {
		if len(rs) > 1 {
			l.m.batches.Inc()
		}
		for _, r := range rs {
			switch {
			case errs[i] != nil:
				l.log.Warn("publish dispatch; will retry", "dispatch", r.DispatchID, "cluster", r.Cluster, "err", errs[i])
			case dups[i]:
				l.m.published.Inc()
				l.m.duplicates.Inc()
			default:
				l.m.published.Inc()
			}
		}
	}
}

// maxDispatchesPerMessage bounds a DispatchBatch: a dispatch carries its
// workload's spec, and the message must stay well under NATS's payload
// limit (1 MiB by default; the API bounds a workload far below 4 KiB
// times this).
const maxDispatchesPerMessage = 64

// dispatchMessage encodes one dispatch as it always was (the trace in the
// message headers, its dispatch id as the message id), or several for one
// cluster as a DispatchBatch: each keeps its trace in its workload's
// trace_parent, and the message id is derived from every dispatch id in
// it, so that a retried publish of the same batch is deduplicated.
func (l *Loop) dispatchMessage(ws []*meridianv1.Workload, rs []*Record) (natsbus.Dispatch, error) {
	if len(rs) == 1 {
		b, err := marshalDet(&agentv1.HubMessage{Kind: &agentv1.HubMessage_Dispatch{Dispatch: dispatchMsg(ws[0], rs[0])}})
		return natsbus.Dispatch{Cluster: rs[0].Cluster, MsgID: rs[0].DispatchID, Payload: b, Trace: l.recordTrace(rs[0])}, err
	}
	batch := &agentv1.DispatchBatch{Dispatches: make([]*agentv1.Dispatch, len(rs))}
	for i, r := range rs {
		d := dispatchMsg(ws[i], r)
		if sc := l.recordTrace(r); sc.IsValid() {
			d.Workload.TraceParent = r.TraceParent
		}
		batch.Dispatches[i] = d
	}
	b, err := marshalDet(&agentv1.HubMessage{Kind: &agentv1.HubMessage_Batch{Batch: batch}})
	id := agentv1.BatchMsgID(len(rs), func(i int) string { return rs[i].DispatchID })
	return natsbus.Dispatch{Cluster: rs[0].Cluster, MsgID: id, Payload: b}, err
}

// republishStale publishes again every current, unacknowledged dispatch
// whose last publish is older than RepublishAfter.
func (l *Loop) republishStale(t *term, s *state, now time.Time) {
	type item struct {
		w *meridianv1.Workload
		r *Record
	}
	var due []item
	t.mu.Lock()
	for id, c := range s.unacked {
		last, ok := t.published[id]
		if ok && time.Since(last) < l.cfg.RepublishAfter {
			continue
		}
		if !ok {
			// Not published in this term (committed by an earlier one and
			// missed by republishUnacked, or newer): publish now.
			t.published[id] = time.Time{}
		}
		due = append(due, item{w: c.w.doc(), r: c.r.r})
	}
	t.mu.Unlock()
	if len(due) > 0 {
		publishAll(l, t, due, func(i item) (*meridianv1.Workload, *Record) { return i.w, i.r })
	}
}

// republishUnacked runs when a term starts: every unacknowledged dispatch
// an older hub recorded under its own key is published again, read
// straight from etcd. Dispatches kept in their workloads need no walk
// here: the term's first cycle finds them unacknowledged in the mirror and
// publishes them (republishStale), since this term has published none.
func (l *Loop) republishUnacked(t *term) error {
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	items, _, err := l.st.List(ctx, prefDispatches, 0)
	if err != nil {
		return err
	}
	type item struct {
		w *meridianv1.Workload
		r *Record
	}
	var due []item
	for _, it := range items {
		r, err := decodeRecord(it.Value)
		if err != nil || r.Acked {
			continue // an older hub's acknowledgement
		}
		wk, err := WorkloadKey(r.WorkloadID)
		if err != nil {
			continue
		}
		wb, _, err := l.st.Get(ctx, wk)
		if err != nil {
			continue
		}
		w, err := decodeWorkload(wb)
		if err != nil || w.GetStatus().GetDispatchId() != r.DispatchID || acked(r, w) {
			continue
		}
		due = append(due, item{w: w, r: r})
	}
	publishAll(l, t, due, func(i item) (*meridianv1.Workload, *Record) { return i.w, i.r })
	l.m.republished.Add(float64(len(due)))
	if len(due) > 0 {
		l.log.Info("republished unacknowledged dispatches", "count", len(due))
	}
	return nil
}

// forgetAfter bounds how long a term remembers sent cancels; a heartbeat
// older than this cannot still list them.
const forgetAfter = 10 * time.Minute

// forgetFinishedAfter bounds how long a term remembers finished dispatches,
// so a heartbeat sent before one finished does not draw a cancel for it.
// Heartbeats go every few seconds and are never queued for long, and at
// 2,000 workloads/s each minute remembered costs about 10 MB of live heap
// that every collection marks. A heartbeat delayed past this window costs
// one cancel that the agent answers from its record of finished dispatches.
const forgetFinishedAfter = 2 * time.Minute

// maxFinishedRemembered bounds the finished dispatches a term remembers
// whatever their age (eight minutes at 2,000/s): past it the oldest is
// forgotten early, at the price forgetFinishedAfter describes.
const maxFinishedRemembered = 1 << 20

// newFinishedMemory is a term's record of finished dispatches: in a
// fifomap, which the collector does not walk (a map of ids to times was
// 240,000 keys and as many pointers at 2,000/s).
func newFinishedMemory() *fifomap.Map { return fifomap.New(maxFinishedRemembered) }

// pruneEvery spaces out the walks over what a term remembers of cancels
// and finished dispatches (many at a high rate).
const pruneEvery = 10 * time.Second

// prune drops term memory that can no longer matter.
func (l *Loop) prune(t *term, s *state) {
	now := time.Now()
	cut, cutFinished := now.Add(-forgetAfter), now.Add(-forgetFinishedAfter)
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.prunedAt) >= pruneEvery {
		t.prunedAt = now
		for id, at := range t.cancelled {
			if at.Before(cut) {
				delete(t.cancelled, id)
			}
		}
		// Entries go in as reports arrive, so oldest first is time order.
		t.finished.ForgetOldestWhile(func(v []byte) bool {
			at, ok := fifomap.Uint64(v)
			return !ok || int64(at) < cutFinished.UnixNano()
		})
	}
	for id, at := range t.published {
		// An acknowledged dispatch is never published again. One not in the
		// state may have been committed after it was read: keep what was
		// published lately, or the next cycle would publish it again.
		if c, ok := s.current[id]; (ok && acked(c.r.r, c.w.doc())) || (!ok && now.Sub(at) > time.Minute) {
			delete(t.published, id)
		}
	}
}

// sweep marks silent clusters LOST, unless the hub itself cannot hear
// anyone: before it has listened for one cluster timeout (after a hub
// outage the last adverts are old, and heartbeats need time to arrive),
// while its NATS connection is down, and for one cluster timeout after it
// comes back, silence proves nothing.
func (l *Loop) sweep() {
	if !l.bus.Conn().IsConnected() {
		l.natsDownAt = time.Now()
		return
	}
	if time.Since(l.listeningSince) < l.fleet.Timeout() {
		return
	}
	if !l.natsDownAt.IsZero() && time.Since(l.natsDownAt) < l.fleet.Timeout() {
		return
	}
	l.fleet.Sweep()
}
