package dispatch

import (
	"fmt"
	"sort"
	"time"

	"github.com/meridian-gpu/meridian/hub/scheduler"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// After a restore. etcd restored from a snapshot is older than the
// clusters: a workload the snapshot holds as QUEUED may have been
// dispatched since, and its agent runs it under a dispatch id etcd never
// saw. A hub that went on as usual would dispatch it again (the workload
// would run twice) and tell the agent to cancel the run it does not know.
// With Config.AfterRestore the hub instead
//   - waits, before each term's first dispatch, until every cluster not
//     LOST has sent a heartbeat in this term (at most the cluster
//     timeout), so that it knows what runs where;
//   - adopts a dispatch a heartbeat reports whose workload is QUEUED
//     here: the workload is recorded as running there, under the
//     agent's dispatch id, with the quota its request charges (the
//     placement is the agent's; the hub has none to record);
//   - keeps, in a RegisterAck, the dispatches the agent lists that it
//     does not know, until the agent's heartbeats say what they are (the
//     ones that turn out to belong to nothing are cancelled then, as
//     always).
// A workload submitted after the snapshot is not in it: its run is
// cancelled, as any dispatch the hub cannot place is. docs/operators.md
// has the whole procedure.

// awaitReports reports whether a term may dispatch: always, unless the
// hub runs after a restore and some cluster that is not LOST has not sent
// a heartbeat since the term began (waiting at most the cluster timeout).
func (l *Loop) awaitReports(t *term, now time.Time) bool {
	if !l.cfg.AfterRestore || t.reportsIn {
		return true
	}
	var missing []string
	for _, id := range l.fleet.IDs() {
		if st, ok := l.fleet.State(id); ok && st == scheduler.ClusterLost {
			continue
		}
		// A report counts once the adoption pass has looked at it: one
		// that arrived after this cycle's pass waits for the next.
		if at, ok := t.adoptChecked[id]; !ok || at.Before(t.startedClock) {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 || now.Sub(t.startedClock) > l.fleet.Timeout() {
		t.reportsIn = true
		l.log.Info("after restore: every cluster reported its work; dispatching", "waited", now.Sub(t.startedClock).String(), "silent", missing)
		return true
	}
	if !t.awaitLogged {
		t.awaitLogged = true
		l.log.Info("after restore: waiting for every cluster's heartbeat before the first dispatch", "clusters", missing)
	}
	return false
}

// adoptReported records, as their workloads' current dispatches, the
// dispatches the clusters' latest heartbeats report whose workloads are
// QUEUED here (see above). Only with Config.AfterRestore, and only for
// heartbeats it has not looked at yet.
func (l *Loop) adoptReported(t *term, s *state, now time.Time) []mutation {
	if !l.cfg.AfterRestore {
		return nil
	}
	var ms []mutation
	var views map[string]*scheduler.Cluster
	for _, cluster := range l.fleet.IDs() {
		ids, at, ok := l.fleet.Reported(cluster)
		if !ok || t.adoptChecked[cluster].Equal(at) {
			continue
		}
		if t.adoptChecked == nil {
			t.adoptChecked = map[string]time.Time{}
		}
		first := t.adoptChecked[cluster].Before(t.startedClock)
		t.adoptChecked[cluster] = at
		if first && !at.Before(t.startedClock) {
			l.settleUnreported(t, s, cluster, ids)
		}
		for _, id := range ids {
			if _, cur := s.current[id]; cur {
				continue
			}
			wid, ok := l.fleet.ReportedWorkload(cluster, id)
			w := s.queued[wid]
			if !ok || w == nil || w.sw == nil || s.cancelReq[wid] != nil {
				continue
			}
			if views == nil {
				views = map[string]*scheduler.Cluster{}
				for _, v := range l.fleet.Views() {
					views[v.Cluster.ID] = &v.Cluster
				}
			}
			m, err := l.adopt(t, w, cluster, id, views[cluster], now)
			if err != nil {
				l.log.Error("adopt a reported dispatch", "dispatch", id, "workload", wid, "err", err)
				continue
			}
			l.log.Warn("after restore: adopted a dispatch its cluster runs and etcd did not know", "dispatch", id, "workload", wid, "cluster", cluster)
			ms = append(ms, m)
		}
	}
	return ms
}

// settleUnreported asks cluster how each run ended that the restored
// state holds as running there (acknowledged, from before this term) and
// that the cluster's first heartbeat of the term does not list: it ended
// after the snapshot, and the hub that applied its last event took that
// write with it. The ask is a cancel, which the agent answers from its
// memory of finished dispatches (the last agent.MaxRemembered) with the
// run's own final event, or, for a run it has forgotten, with CANCELLED.
// An event the agent published within the bus's duplicate window before
// the restore (2 minutes) is dropped as a duplicate when sent again, so
// such a run stays RUNNING until cancelled by hand (docs/operators.md).
func (l *Loop) settleUnreported(t *term, s *state, cluster string, reported []string) {
	listed := make(map[string]bool, len(reported))
	for _, id := range reported {
		listed[id] = true
	}
	var ask []string
	for id, c := range s.current {
		r := c.r.r
		if r.Cluster == cluster && !listed[id] && acked(r, c.w.doc()) && r.CreatedAt.Before(t.startedClock) {
			ask = append(ask, id)
		}
	}
	sort.Strings(ask)
	for _, id := range ask {
		wid := s.current[id].r.r.WorkloadID
		l.log.Warn("after restore: a run the restored state holds as running is not on its cluster; asking how it ended", "dispatch", id, "workload", wid, "cluster", cluster)
		l.sendCancel(t, cluster, id, wid, "after a restore: the restored state held it as running, but its cluster no longer runs it", false)
	}
}

// adoptable reports whether, after a restore, a reported dispatch that is
// not current belongs to a workload queued here: adoption takes it, so
// it must not be cancelled meanwhile (a heartbeat may arrive between a
// cycle's adoption pass and its check of the reports).
func (l *Loop) adoptable(b *built, cluster, id string) bool {
	if !l.cfg.AfterRestore {
		return false
	}
	wid, ok := l.fleet.ReportedWorkload(cluster, id)
	w := b.byID[wid]
	return ok && w != nil && w.phase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED && !hasCondition(w.doc(), ConditionCancelRequested)
}

// adopt returns the write that makes dispatch id on cluster the current
// dispatch of the queued workload w, running (the agent reports it).
func (l *Loop) adopt(t *term, w *wl, cluster, id string, c *scheduler.Cluster, now time.Time) (mutation, error) {
	nw := cloneWorkload(w.doc())
	st := nw.Status
	st.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING
	st.Cluster, st.DispatchId = cluster, id
	st.Attempts++
	st.DispatchTime, st.AcceptTime, st.StartTime = tsOf(now), tsOf(now), tsOf(now)
	st.EndTime, st.ExitCode = nil, nil
	st.PendingReason, st.PendingReasonCode = "", ""
	st.Message = "adopted after a restore: its cluster reported it running under a dispatch the restored state did not hold"
	st.Placement = nil
	r := &Record{DispatchID: id, WorkloadID: nw.GetId(), Queue: nw.GetQueue(), Cluster: cluster, Attempt: st.Attempts,
		Usage: requestUsage(w.sw, c), CreatedAt: now, LeaderTerm: t.fence.Rev}
	foldRecord(st, r)
	m, err := l.rewrite(w, nw, now)
	if err != nil {
		return mutation{}, fmt.Errorf("encode: %w", err)
	}
	return m, nil
}

// requestUsage is the quota a workload's request charges when there is no
// placement to read classes from: each pod set's class, or, for a pod set
// that names none, the class of the cluster's GPU nodes when they have one.
func requestUsage(w *scheduler.Workload, c *scheduler.Cluster) []scheduler.ClassMilli {
	only := ""
	if c != nil {
		for i := range c.Nodes {
			n := &c.Nodes[i]
			if len(n.Res.GPUs) == 0 {
				continue
			}
			if only == "" {
				only = n.Res.Class
			} else if only != n.Res.Class {
				only = ""
				break
			}
		}
	}
	by := map[string]int64{}
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		m := int64(max(ps.Replicas, 1)) * ps.Req.TotalMilli()
		if m == 0 {
			continue
		}
		class := ps.Class
		if class == "" {
			class = only
		}
		by[class] += m
	}
	out := make([]scheduler.ClassMilli, 0, len(by))
	for class, m := range by {
		out = append(out, scheduler.ClassMilli{Class: class, Milli: m})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Class < out[b].Class })
	return out
}

// keepUnknown is what a RegisterAck lists as current after a restore: the
// dispatches etcd holds for the cluster and those the agent lists that it
// does not know, which the agent's heartbeats will settle.
func keepUnknown(current []string, req *agentv1.Register) []string {
	seen := make(map[string]bool, len(current))
	for _, id := range current {
		seen[id] = true
	}
	for _, id := range req.GetKnownDispatchIds() {
		if !seen[id] {
			seen[id] = true
			current = append(current, id)
		}
	}
	sort.Strings(current)
	return current
}
