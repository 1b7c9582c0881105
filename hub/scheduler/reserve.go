package scheduler

import (
	"fmt"
	"sort"
	"time"
)

// Reservations keep large gangs from starving behind small work.
//
// Capacity frees up a few GPUs at a time, and without a reservation small
// jobs take every hole before a large gang ever fits. So when a gang that its
// queue is owed (it stays within the queue's nominal quota) does not fit, the
// core reserves the nodes it would need in the cluster where it came
// closest: nothing else is placed on them for the rest of the cycle. The
// first gang that fails in fair order (the most deserving queue's) reserves
// too, whether or not it is owed quota, so fairshare reaches large jobs. They
// drain as their work ends, and the gang fits on them. The core keeps no
// state between cycles; the same gang, still first in fair order, makes the
// same reservation again next cycle until it fits.

// maxReservedShare bounds how much of one cluster reservations may hold.
const maxReservedShare = 4 // at most 1/4 of a cluster's nodes

// reserveFor reserves nodes for w in its closest cluster when it is owed its
// quota (or is the first gang of the cycle that failed), and returns the
// pending reason, extended to say so.
func (p *planner) reserveFor(w *Workload, best fitAttempt, reason string) string {
	cs := best.cs
	if cs == nil {
		return reason
	}
	if p.reservedQueues == nil {
		p.reservedQueues = map[string]bool{}
	}
	// A gang the queue is owed reserves; so does the first gang that fails in
	// fair order (the most deserving queue's), owed or not.
	if len(p.reservedQueues) > 0 && !p.withinNominal(cs, w) {
		return reason
	}
	if p.reservedQueues[w.Queue] {
		return reason // one reservation per queue and cycle: its most deserving gang
	}
	var chosen []int32
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.Req.GPUs == 0 {
			continue
		}
		chosen = append(chosen, p.reservationNodes(cs, ps)...)
	}
	if len(chosen) == 0 || cs.reservedCount+len(chosen) > len(cs.nodes)/maxReservedShare+1 {
		return reason
	}
	if cs.reservedBy == nil {
		cs.reservedBy = make([]string, len(cs.nodes))
	}
	for _, i := range chosen {
		cs.reservedBy[i] = w.ID
	}
	cs.reservedCount += len(chosen)
	p.reservedQueues[w.Queue] = true
	p.setShadow(cs, w, chosen)
	return fmt.Sprintf("%s; holding %s on %s for it while they drain", reason, countOf(int64(len(chosen)), "node"), cs.src.ID)
}

// reservationNodes picks the nodes a pod set would need: inside the domain
// with the most free room when it has a topology constraint, the nodes with
// the most free GPU room first, until their GPUs could hold every replica.
func (p *planner) reservationNodes(cs *clusterState, ps *PodSet) []int32 {
	var pool []int32
	switch ps.Topology {
	case TopologyRack, TopologyNVLink:
		var bestFree int64 = -1
		for _, d := range cs.domains(ps.Topology) {
			var free int64
			var nodes []int32
			for _, i := range d.nodes {
				if hostable(cs, i, ps) {
					free += freeMilli(&cs.nodes[i])
					nodes = append(nodes, i)
				}
			}
			if free > bestFree {
				bestFree, pool = free, nodes
			}
		}
	default:
		for i := range cs.nodes {
			if hostable(cs, int32(i), ps) {
				pool = append(pool, int32(i))
			}
		}
	}
	sort.SliceStable(pool, func(a, b int) bool { return freeMilli(&cs.nodes[pool[a]]) > freeMilli(&cs.nodes[pool[b]]) })
	need := int64(ps.Replicas) * ps.Req.TotalMilli()
	if ps.Topology == TopologySameNode && len(pool) > 0 {
		return pool[:1]
	}
	var out []int32
	var room int64
	for _, i := range pool {
		if room >= need {
			break
		}
		out = append(out, i)
		// Whole replicas per node, when empty.
		per := int64(len(cs.nodes[i].GPUs)) / int64(ps.Req.GPUs)
		if ps.Req.Shared() {
			per = int64(len(cs.nodes[i].GPUs)) * int64(1000/ps.Req.Milli)
		}
		room += per * ps.Req.TotalMilli()
	}
	if room < need {
		return nil // the cluster could never hold it: nothing to wait for
	}
	return out
}

// hostable reports whether node i could hold one replica of ps when empty,
// and is not held for someone else.
func hostable(cs *clusterState, i int32, ps *PodSet) bool {
	return classOK(cs, i, ps) && !cs.isReserved(i) && int32(len(cs.nodes[i].GPUs)) >= ps.Req.GPUs
}

// isReserved reports whether node i is held for a gang other than the one
// being placed now, and the work being placed may not backfill there.
func (cs *clusterState) isReserved(i int32) bool {
	return cs.reservedBy != nil && cs.reservedBy[i] != "" && cs.reservedBy[i] != cs.placing && !cs.canBackfill(i)
}

// Backfill (EASY backfill, as in Slurm and Maui). A held gang's expected
// start (its "shadow" time) is when enough running work with a known end
// (start + MaxRuntime) on its held nodes has ended for the gang's GPUs to be
// free there. Work whose own MaxRuntime ends by then may use the held nodes:
// it is gone before the gang could start, so it never delays it. Work
// without a MaxRuntime never backfills, and a hold whose running work has
// no known end has no shadow time and admits nothing.

// holdState is a cluster's backfill bookkeeping for one cycle.
type holdState struct {
	// shadow is each holding gang's expected start; absent: unknown.
	shadow map[string]time.Time
	// ends is when the workload being placed now will have ended at the
	// latest (Now + MaxRuntime); zero when it has no limit or is not
	// being placed for real.
	ends time.Time
}

// backfillAs lets w use held nodes whose gang starts after w ends, for the
// placements schedule makes; the returned func ends that.
func (p *planner) backfillAs(w *Workload) func() {
	if w.MaxRuntime <= 0 || len(p.holds) == 0 {
		return func() {}
	}
	end := p.snap.Now.Add(w.MaxRuntime)
	for _, h := range p.holds {
		h.ends = end
	}
	return func() {
		for _, h := range p.holds {
			h.ends = time.Time{}
		}
	}
}

// mayBackfill reports whether w could use held nodes this cycle, so that a
// gang-shape failure remembered for other work must not be reused for it.
func (p *planner) mayBackfill(w *Workload) bool { return w.MaxRuntime > 0 && len(p.holds) > 0 }

// backfilled reports whether a placement on cs (the log of t) uses nodes
// held for another gang, and that gang's expected start.
func backfilled(t *txn, owner string) (time.Time, bool) {
	cs := t.cs
	if cs.reservedBy == nil || cs.hold == nil {
		return time.Time{}, false
	}
	for _, a := range t.log {
		if g := cs.reservedBy[a.node]; g != "" && g != owner {
			return cs.hold.shadow[g], true
		}
	}
	return time.Time{}, false
}

// canBackfill reports whether the work being placed on cs ends before the
// gang holding node i can start.
func (cs *clusterState) canBackfill(i int32) bool {
	h := cs.hold
	if h == nil || h.ends.IsZero() {
		return false
	}
	s, ok := h.shadow[cs.reservedBy[i]]
	return ok && !h.ends.After(s)
}

// setShadow computes the expected start of gang w holding the nodes chosen
// on cs and records it for backfill. Running work on the held nodes frees
// its GPUs at its known end (terminating work: now); the gang starts when
// the free GPUs there reach its need.
func (p *planner) setShadow(cs *clusterState, w *Workload, chosen []int32) {
	var need, free int64
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		need += int64(ps.MinSize()) * ps.Req.TotalMilli()
	}
	for _, i := range chosen {
		free += freeMilli(&cs.nodes[i])
	}
	type release struct {
		at    time.Time
		milli int64
	}
	var rel []release
	for _, r := range p.runningOn(cs.src.ID) {
		var m int64
		for _, pp := range r.Placement {
			ps := podSetByName(r.Workload, pp.PodSet)
			if ps == nil {
				continue
			}
			for _, rp := range pp.Replicas {
				if i, ok := cs.nodeIndex(rp.Node); ok && cs.reservedBy[i] == w.ID {
					m += ps.Req.TotalMilli()
				}
			}
		}
		if m == 0 {
			continue
		}
		switch {
		case r.Terminating:
			rel = append(rel, release{p.snap.Now, m})
		case r.Workload.MaxRuntime > 0:
			start := r.StartedAt
			if start.IsZero() || start.After(p.snap.Now) {
				start = p.snap.Now
			}
			rel = append(rel, release{start.Add(r.Workload.MaxRuntime), m})
		}
	}
	sort.Slice(rel, func(a, b int) bool { return rel[a].at.Before(rel[b].at) })
	shadow, known := p.snap.Now, free >= need
	for _, x := range rel {
		if known {
			break
		}
		free += x.milli
		if free >= need {
			shadow, known = x.at, true
		}
	}
	if !known {
		return // no promise can be made: nothing backfills here
	}
	if shadow.Before(p.snap.Now) {
		shadow = p.snap.Now
	}
	if cs.hold == nil {
		cs.hold = &holdState{shadow: map[string]time.Time{}}
		p.holds = append(p.holds, cs.hold)
	}
	cs.hold.shadow[w.ID] = shadow
}

// runningOn lists the running work on one cluster (indexed on first use).
func (p *planner) runningOn(cluster string) []*Running {
	if p.byCluster == nil {
		p.byCluster = map[string][]*Running{}
		for i := range p.snap.Running {
			r := &p.snap.Running[i]
			p.byCluster[r.Cluster] = append(p.byCluster[r.Cluster], r)
		}
	}
	return p.byCluster[cluster]
}
