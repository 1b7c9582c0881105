package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meridian-gpu/meridian/hub/convert"
	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// lastView is the accounting of one snapshot, kept for the API.
type lastView struct {
	at      time.Time   // hub clock
	built   time.Time   // wall clock, for reuse
	pos     uint64      // the mirror's position when it was built
	tree    *quota.Tree // running usage charged
	ledger  *quota.Ledger
	fair    map[string]float64
	pending map[string]int32 // leaf -> queued workloads
	running map[string]int32 // leaf -> running workloads
	// demand is the milli-GPUs queued work asks for, by class and leaf
	// (pod sets that name no class are left out), for the fairness error.
	demand map[string]map[string]int64
}

func (l *Loop) viewOf(b *built, now time.Time) *lastView {
	v := &lastView{at: now, tree: b.snap.Queues.Clone(), ledger: b.snap.Ledger, pending: map[string]int32{}, running: map[string]int32{},
		demand: map[string]map[string]int64{}}
	for _, r := range b.snap.Running[:b.live] { // not the work that stopped
		v.running[r.Workload.Queue]++
		for _, u := range r.Usage {
			v.tree.Charge(r.Workload.Queue, u.Class, u.Milli)
		}
	}
	// The backlog keeps these as it changes: no walk over every queued
	// workload.
	v.pending, v.demand = b.queued, b.demand
	v.fair = quota.FairTree(v.tree, v.ledger, now)
	return v
}

// viewReuse is how long an accounting is reused while the state changes,
// and viewReuseStill how long while it does not (the ledger still accrues).
const (
	viewReuse      = 100 * time.Millisecond
	viewReuseStill = time.Second
)

// ledgerNow is a copy of the leader's ledger as it is now, or, on a
// follower, the ledger of the last accounting.
func (l *Loop) ledgerNow() *quota.Ledger {
	l.mu.Lock()
	t, last := l.term, l.last
	l.mu.Unlock()
	if t != nil {
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.ledger.Clone()
	}
	if last != nil {
		return last.ledger
	}
	return nil
}

// currentView returns the accounting of the current state, built when the
// API asks (viewOf walks every running workload, so a busy loop does not
// pay for accounting nobody reads), and reused briefly.
func (l *Loop) currentView() *lastView {
	pos := l.mirrorPos.Load()
	l.mu.Lock()
	v := l.last
	l.mu.Unlock()
	if v != nil && (time.Since(v.built) < viewReuse || (v.pos == pos && time.Since(v.built) < viewReuseStill)) {
		return v
	}
	now := l.clock()
	b := l.snapshotNow(l.ledgerNow(), now, nil)
	v = l.viewOf(b, now)
	v.pos, v.built = pos, time.Now()
	l.mu.Lock()
	if l.last == nil || !v.built.Before(l.last.built) {
		l.last = v
	}
	l.mu.Unlock()
	return v
}

// QueueStatus reports a queue's usage, borrowing and fairshare factor per
// accelerator class, and its pending and running counts (summed over the
// subtree). It returns nil for an unknown queue. It implements the API's
// QueueStatusSource.
func (l *Loop) QueueStatus(path string) *meridianv1.QueueStatus {
	v := l.currentView()
	if _, ok := v.tree.ID(path); !ok {
		return nil
	}
	qs := &meridianv1.QueueStatus{}
	for leaf, n := range v.pending {
		if leaf == path || strings.HasPrefix(leaf, path+"/") {
			qs.PendingWorkloads += n
		}
	}
	for leaf, n := range v.running {
		if leaf == path || strings.HasPrefix(leaf, path+"/") {
			qs.RunningWorkloads += n
		}
	}
	var decayed float64
	if v.ledger != nil {
		decayed = v.ledger.Usage(path, v.at)
	}
	for _, cls := range v.tree.Classes() {
		u := v.tree.Usage(path, cls)
		lim, _ := v.tree.Limits(path, cls)
		if u == 0 && lim.Nominal == 0 {
			continue
		}
		qs.Classes = append(qs.Classes, &meridianv1.ClassUsage{
			AcceleratorClass: cls, UsageMilli: u, BorrowedMilli: v.tree.Borrowing(path, cls), LentMilli: v.tree.Lent(path, cls),
			DecayedGpuSeconds: decayed, FairshareFactor: v.fair[path],
		})
	}
	if len(qs.Classes) == 0 {
		qs.Classes = append(qs.Classes, &meridianv1.ClassUsage{AcceleratorClass: quota.AnyClass, DecayedGpuSeconds: decayed, FairshareFactor: v.fair[path]})
	}
	return qs
}

// ListClusters implements the API's ClusterSource, with the persisted drain
// flags applied.
func (l *Loop) ListClusters() []*meridianv1.Cluster {
	out := l.fleet.ListClusters()
	l.applyDrain(out)
	return out
}

// GetCluster implements the API's ClusterSource.
func (l *Loop) GetCluster(id string) (*meridianv1.Cluster, bool) {
	c, ok := l.fleet.GetCluster(id)
	if ok {
		l.applyDrain([]*meridianv1.Cluster{c})
	}
	return c, ok
}

func (l *Loop) applyDrain(cs []*meridianv1.Cluster) {
	for _, c := range cs {
		k, err := ClusterKey(c.GetId())
		if err != nil {
			continue
		}
		it, ok := l.cache.Get(k)
		if !ok {
			continue
		}
		var s clusterSettings
		if json.Unmarshal(it.Value, &s) == nil && s.Draining && c.State == meridianv1.ClusterState_CLUSTER_STATE_READY {
			c.State = meridianv1.ClusterState_CLUSTER_STATE_DRAINING
			c.DrainReason = s.Reason
		}
	}
}

// SetDraining persists a cluster's drain flag in etcd (so every replica and
// the next leader see it) and applies it to the local registry at once. It
// fails for a cluster no agent has announced. It implements the API's
// ClusterSource.
func (l *Loop) SetDraining(ctx context.Context, id string, draining bool) error {
	return l.SetDrainingReason(ctx, id, draining, "")
}

// SetDrainingReason is SetDraining with the operator's reason, kept with
// the flag (and dropped when the cluster reopens). It implements the
// API's DrainReasonSetter: without it, the reason given to DrainCluster
// was lost.
func (l *Loop) SetDrainingReason(ctx context.Context, id string, draining bool, reason string) error {
	if _, ok := l.fleet.State(id); !ok {
		return fmt.Errorf("dispatch: drain cluster %q: no agent has announced it", id)
	}
	k, err := ClusterKey(id)
	if err != nil {
		return fmt.Errorf("dispatch: drain cluster: %w", err)
	}
	if !draining {
		reason = ""
	}
	b, _ := json.Marshal(clusterSettings{Draining: draining, Reason: reason})
	rev, err := l.st.Commit(ctx, nil, store.Put(k, b))
	if err != nil {
		return fmt.Errorf("dispatch: drain cluster %q: %w", id, err)
	}
	if err := l.fleet.SetDrainingReason(ctx, id, draining, reason); err != nil {
		return err
	}
	return l.cache.WaitForRevision(ctx, rev)
}

// Explain runs the pure core on a snapshot of the current state and reports
// why w waits, with its reason code, plus one entry per cluster, the ones
// where it fits first: eligible or not, and how many of each pod set's
// replicas have room there now (scheduler.ExplainCluster). It never writes.
// A workload that is not QUEUED gets only its header here (id, phase,
// evaluate time) and the placement decision of its current or last
// dispatch (the clusters compared, the deciding rule); the API adds where
// it runs or how it ended. It implements
// the API's Explainer.
func (l *Loop) Explain(ctx context.Context, w *meridianv1.Workload) (*meridianv1.ExplainWorkloadResponse, error) {
	if w == nil {
		return nil, errors.New("dispatch: Explain: workload is nil")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := l.clock()
	resp := &meridianv1.ExplainWorkloadResponse{WorkloadId: w.GetId(), Phase: w.GetStatus().GetPhase(), EvaluateTime: tsOf(now)}
	if w.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
		explainPlacement(w, resp)
		return resp, nil
	}
	sw, err := convert.Workload(w, avoided(w, now))
	if err != nil {
		resp.PendingReason = "cannot be scheduled as stored: " + err.Error()
		resp.PendingReasonCode = scheduler.ReasonInvalid.String()
		return resp, nil
	}
	b := l.snapshotNow(l.ledgerNow(), now, sw)
	found := false
	for i, p := range b.snap.Pending {
		if p.ID == sw.ID {
			b.snap.Pending[i], found = sw, true
		}
	}
	if !found {
		b.snap.Pending = append(b.snap.Pending, sw)
	}
	plan, err := safeDecide(b.snap, l.cfg.Scheduler)
	if err != nil {
		return nil, fmt.Errorf("dispatch: Explain: %w", err)
	}
	resp.PendingReason = "the scheduler would dispatch it in the next cycle"
	resp.PendingReasonCode = CodeWaitingForScheduler
	for _, p := range plan.Pending {
		if p.WorkloadID == sw.ID {
			resp.PendingReason, resp.PendingReasonCode = p.Reason, p.Code.String()
		}
	}
	if k := l.cfg.Scheduler.MaxConsidered; !found && k > 0 && b.position >= k {
		// Behind its queue's window, the cycle does not look at it yet
		// (the plan above saw it only because Explain added it).
		resp.PendingReason, resp.PendingReasonCode = scheduler.WindowReason(sw.Queue, k), scheduler.ReasonDeferred.String()
	}
	switch {
	case hasCondition(w, ConditionCancelRequested):
		resp.PendingReason = cancelMessage(w, "cancelled by request") + "; the hub finishes the cancel in its next cycle"
		resp.PendingReasonCode = CodeWaitingForScheduler
	case held(w, now) && w.GetStatus().GetPendingReason() != "":
		// Preempted a moment ago: the stored reason says until when.
		resp.PendingReason, resp.PendingReasonCode = w.GetStatus().GetPendingReason(), CodeWaitingForScheduler
	}
	resp.QueuePosition = int32(b.position) + 1
	resp.Quota = quotaChecks(b, sw)
	var fit, rest []*meridianv1.ClusterFit
	for _, c := range b.snap.Clusters {
		cf := clusterFit(b, sw, c.ID, l.cfg.Scheduler)
		if cf.Fits {
			fit = append(fit, cf)
		} else {
			rest = append(rest, cf)
		}
	}
	resp.Clusters = append(fit, rest...)
	return resp, nil
}

// NeverFits reports whether w can never run as written in the federation
// as the hub knows it now: no registered (non-lost) cluster could hold it
// even if it were empty, or it needs more than its queue could ever hold
// (scheduler.NeverFits). It reads the fleet and the queue limits, never
// writes, and may be called concurrently. It implements the API's
// FitChecker; a workload that does not convert (the API validated it
// already) is not judged.
func (l *Loop) NeverFits(w *meridianv1.Workload) (reason string, never bool) {
	if w == nil {
		return "", false
	}
	// The workload has no id before it is stored; convert only what the
	// core looks at.
	sw, err := convert.Workload(&meridianv1.Workload{Id: "new", Queue: w.GetQueue(), Priority: w.GetPriority(),
		ClusterSelector: w.GetClusterSelector(), PodSets: w.GetPodSets()}, nil)
	if err != nil {
		return "", false
	}
	snap := &scheduler.Snapshot{Queues: l.currentView().tree}
	for _, v := range l.fleet.Views() {
		snap.Clusters = append(snap.Clusters, v.Cluster)
	}
	return scheduler.NeverFits(snap, sw)
}

// quotaChecks reports, per class the workload needs, what its queue could
// still take.
func quotaChecks(b *built, w *scheduler.Workload) []*meridianv1.QuotaCheck {
	tree := b.snap.Queues.Clone()
	for _, r := range b.snap.Running {
		for _, u := range r.Usage {
			tree.Charge(r.Workload.Queue, u.Class, u.Milli)
		}
	}
	need := map[string]int64{}
	for _, ps := range w.PodSets {
		need[ps.Class] += int64(ps.Replicas) * ps.Req.TotalMilli()
	}
	var out []*meridianv1.QuotaCheck
	for _, cls := range sortedKeys(need) {
		if need[cls] == 0 || cls == "" {
			continue
		}
		v := tree.Check(w.Queue, cls, need[cls])
		qc := &meridianv1.QuotaCheck{AcceleratorClass: cls, RequestedMilli: need[cls], AvailableMilli: tree.Headroom(w.Queue, cls), Fits: v.OK, Reason: v.Reason}
		out = append(out, qc)
	}
	return out
}

// clusterFit explains w on one cluster of the snapshot, as if it were the
// only one (scheduler.ExplainCluster).
func clusterFit(b *built, w *scheduler.Workload, cluster string, cfg scheduler.Config) *meridianv1.ClusterFit {
	cf := &meridianv1.ClusterFit{Cluster: cluster}
	ex, err := safeExplainCluster(b.snap, cfg, w, cluster)
	if err != nil {
		cf.Lines = []string{"could not evaluate: " + err.Error()}
		return cf
	}
	cf.Fits, cf.Lines = ex.Fits, ex.Lines
	return cf
}

// safeExplainCluster runs scheduler.ExplainCluster and turns a panic into
// an error, as safeDecide does for Decide.
func safeExplainCluster(s *scheduler.Snapshot, cfg scheduler.Config, w *scheduler.Workload, cluster string) (ex scheduler.ClusterExplanation, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("scheduler.ExplainCluster panicked: %v", r)
		}
	}()
	return scheduler.ExplainCluster(s, cfg, w, cluster), nil
}
