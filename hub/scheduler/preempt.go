package scheduler

import (
	"fmt"
	"sort"
	"strings"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// preemptPass looks, in fairshare order, for running workloads whose removal
// would let a pending workload in: lower-priority work in the same cluster
// (priority preemption), or work that borrows quota the pending workload's
// queue has lent (reclaim). Victims are whole gangs, never non-preemptible
// ones, and the set is minimal: every victim is needed.
//
// The pending workload is not dispatched in this plan. It waits, with a
// reason that names its victims, until they have released their room.
func (p *planner) preemptPass() {
	attempts := 0
	for _, w := range p.order {
		if p.cfg.MaxPreemptionAttempts > 0 && attempts >= p.cfg.MaxPreemptionAttempts {
			return
		}
		i := p.pendingIdx[w.ID]
		pe := &p.plan.Pending[i]
		if pe.Code != ReasonNoFit && pe.Code != ReasonQuota {
			continue
		}
		attempts++
		sel, ok := p.findVictims(w, pe.Code == ReasonQuota)
		if !ok {
			continue
		}
		if len(sel.victims) == 0 {
			// It fits once work that is already stopping is gone.
			pe.Code = ReasonPreempting
			pe.Reason = fmt.Sprintf("waiting for preempted or cancelled work to stop on %s", sel.cluster)
			continue
		}
		// Reasons reach the owners of both sides, who may be different
		// tenants: they never name the other side's workload or queue (the
		// plan's Preemption.For links them for logs and operators).
		for _, v := range sel.victims {
			p.victims[v.Workload.ID] = true
			why, rule := fmt.Sprintf("preempted for a workload of higher priority (%d > %d)", w.Priority, v.Workload.Priority), PreemptPriority
			if sel.reclaim[v.Workload.ID] {
				why, rule = fmt.Sprintf("reclaimed: another queue wants back the quota that %s borrows", v.Workload.Queue), PreemptReclaim
			}
			p.plan.Preemptions = append(p.plan.Preemptions, Preemption{WorkloadID: v.Workload.ID, Cluster: v.Cluster, For: w.ID, Reason: why, Rule: rule})
		}
		p.plan.Stats.Preemptions += len(sel.victims)
		pe.Code = ReasonPreempting
		pe.Reason = fmt.Sprintf("waiting for %s to stop, then runs on %s%s", countOf(int64(len(sel.victims)), "preempted workload"), sel.cluster, victimsRule(sel))
	}
}

type victimSet struct {
	cluster string
	victims []*Running
	reclaim map[string]bool
	// others are the other clusters where victims could make room.
	others []clusterVictims
}

// findVictims picks the smallest sufficient set of victims for w, or false.
func (p *planner) findVictims(w *Workload, quotaBlocked bool) (victimSet, bool) {
	reclaim := map[string]bool{}
	var quotaVictims []*Running
	if quotaBlocked {
		var ok bool
		quotaVictims, ok = p.quotaVictims(w)
		if !ok {
			return victimSet{}, false
		}
		for _, v := range quotaVictims {
			reclaim[v.Workload.ID] = true
		}
	}
	var best victimSet
	var others []clusterVictims
	found := false
	for _, cs := range p.clusters {
		ok := true
		for _, f := range filters {
			if ok, _ = f.fn(p, cs, w); !ok {
				break
			}
		}
		if !ok {
			continue
		}
		extra, fits := p.capacityVictims(cs, w, quotaVictims)
		if !fits {
			continue
		}
		for _, v := range extra {
			if v.Workload.Priority >= w.Priority {
				reclaim[v.Workload.ID] = true
			}
		}
		set := append(append([]*Running(nil), quotaVictims...), extra...)
		if !found || len(set) < len(best.victims) || (len(set) == len(best.victims) && victimMilli(set) < victimMilli(best.victims)) {
			if found {
				others = append(others, clusterVictims{best.cluster, len(best.victims)})
			}
			best = victimSet{cluster: cs.src.ID, victims: set, reclaim: reclaim}
			found = true
		} else {
			others = append(others, clusterVictims{cs.src.ID, len(set)})
		}
	}
	if !found {
		return victimSet{}, false
	}
	best.others = others
	return best, true
}

// clusterVictims is how many victims a cluster that lost the choice needed.
type clusterVictims struct {
	cluster string
	n       int
}

// victimsRule says why sel's cluster was chosen over the others that could
// have made room too: " (fewest victims: 1 vs 3 on west)", or "" when no
// other cluster could.
func victimsRule(sel victimSet) string {
	if len(sel.others) == 0 {
		return ""
	}
	o := append([]clusterVictims(nil), sel.others...)
	sort.Slice(o, func(a, b int) bool {
		if o[a].n != o[b].n {
			return o[a].n < o[b].n
		}
		return o[a].cluster < o[b].cluster
	})
	if len(o) > 2 {
		o = o[:2]
	}
	rule := "fewest victims"
	if o[0].n == len(sel.victims) {
		rule = "fewest victims, then fewest GPUs preempted"
	}
	var vs []string
	for _, c := range o {
		vs = append(vs, fmt.Sprintf("%d on %s", c.n, c.cluster))
	}
	return fmt.Sprintf(" (%s: %d vs %s)", rule, len(sel.victims), strings.Join(vs, ", "))
}

// quotaVictims chooses borrowers to reclaim from so that w's queue gets its
// lent quota back: newest first within each borrowing queue.
func (p *planner) quotaVictims(w *Workload) ([]*Running, bool) {
	need := map[string]int64{}
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.Req.GPUs == 0 {
			continue
		}
		if ps.Class == "" {
			return nil, false // the class is unknown until placement
		}
		n := ps.MinSize()
		need[ps.Class] += int64(n) * ps.Req.TotalMilli()
	}
	var chosen []*Running
	tree := p.tree.Clone()
	for i := range p.snap.Running {
		if r := &p.snap.Running[i]; r.Terminating && tree.Leaf(r.Workload.Queue) {
			for _, u := range r.Usage {
				tree.Release(r.Workload.Queue, u.Class, u.Milli)
			}
		}
	}
	for _, class := range sortedKeys(need) {
		if tree.Check(w.Queue, class, need[class]).OK {
			continue
		}
		needs, ok := tree.ReclaimNeeds(w.Queue, class, need[class])
		if !ok {
			return nil, false
		}
		for _, n := range needs {
			left := n.Milli
			for _, r := range p.runningIn(func(r *Running) bool { return r.Workload.Queue == n.Queue }) {
				if left <= 0 {
					break
				}
				if m := usageIn(r, class); m > 0 {
					chosen = append(chosen, r)
					for _, u := range r.Usage {
						tree.Release(r.Workload.Queue, u.Class, u.Milli)
					}
					left -= m
				}
			}
			if left > 0 {
				return nil, false
			}
		}
		if !tree.Check(w.Queue, class, need[class]).OK {
			return nil, false
		}
	}
	return chosen, true
}

// runningIn lists preemptible, not yet chosen running workloads matching
// keep, in victim order: lowest priority, then newest, then id.
func (p *planner) runningIn(keep func(*Running) bool) []*Running {
	var out []*Running
	for i := range p.snap.Running {
		r := &p.snap.Running[i]
		if !r.Workload.Preemptible || p.victims[r.Workload.ID] || !keep(r) {
			continue
		}
		out = append(out, r)
	}
	sort.Slice(out, func(a, b int) bool {
		x, y := out[a], out[b]
		if x.Workload.Priority != y.Workload.Priority {
			return x.Workload.Priority < y.Workload.Priority
		}
		if !x.StartedAt.Equal(y.StartedAt) {
			return x.StartedAt.After(y.StartedAt)
		}
		return x.Workload.ID < y.Workload.ID
	})
	return out
}

func usageIn(r *Running, class string) int64 {
	var m int64
	for _, u := range r.Usage {
		if u.Class == class {
			m += u.Milli
		}
	}
	return m
}

func victimMilli(vs []*Running) int64 {
	var m int64
	for _, v := range vs {
		for _, u := range v.Usage {
			m += u.Milli
		}
	}
	return m
}

// capacityVictims finds lower-priority victims in cs that, together with the
// already chosen quota victims, make room for w. It adds victims in victim
// order until the gang fits, then drops every victim the gang can do
// without, so the set is minimal. The cluster state is restored afterwards.
func (p *planner) capacityVictims(cs *clusterState, w *Workload, given []*Running) ([]*Running, bool) {
	var released []*Running
	defer func() {
		for i := len(released) - 1; i >= 0; i-- {
			p.occupy(cs, released[i])
		}
	}()
	for _, v := range given {
		if v.Cluster == cs.src.ID && p.release(cs, v) {
			released = append(released, v)
		}
	}
	// Whom w may preempt (Kueue's defaults): lower-priority work of its own
	// queue, always; when w stays within its queue's nominal quota, also
	// lower-priority work of other queues and work of queues that borrow
	// (reclaim of lent capacity, at node level). A workload that needs
	// borrowed quota never preempts other queues: it would only be
	// reclaimed in turn.
	entitled := p.withinNominal(cs, w)
	mayPreempt := func(r *Running) bool {
		if !r.Workload.Preemptible {
			return false
		}
		if r.Workload.Queue == w.Queue {
			return r.Workload.Priority < w.Priority
		}
		return entitled && (r.Workload.Priority < w.Priority || p.borrowing(r))
	}
	// Work already stopping here frees its room without new victims.
	waitable := false
	for i := range p.snap.Running {
		r := &p.snap.Running[i]
		if r.Terminating && r.Cluster == cs.src.ID && p.release(cs, r) {
			released = append(released, r)
			waitable = waitable || mayPreempt(r)
		}
	}
	var cands []*Running
	candsOf := func() []*Running {
		return p.runningIn(func(r *Running) bool { return r.Cluster == cs.src.ID && mayPreempt(r) })
	}
	if p.fitsNow(cs, w) {
		// w waits for that room only where it could preempt: work it may
		// preempt is among what stops, or still runs here. Anyone else
		// just does not fit yet, and takes the room in fair order once it
		// is free (the hub keeps work that stopped as stopping until its
		// cluster advertises, so this is common: it must not make every
		// pending workload a preemptor).
		if len(given) > 0 || waitable {
			return nil, true
		}
		if cands = candsOf(); len(cands) > 0 {
			return nil, true
		}
		return nil, false
	}
	cands = candsOf()
	var extra []*Running
	fits := false
	// A borrower is reclaimed only as far as its queue borrows: after the
	// preemption its queue is still at or above its nominal quota, so it has
	// no claim to reclaim back (no ping-pong).
	borrowLeft := map[[2]string]int64{}
	for _, v := range cands {
		if v.Workload.Priority >= w.Priority && !p.takeBorrowed(borrowLeft, v) {
			continue
		}
		if !p.release(cs, v) {
			continue
		}
		released = append(released, v)
		extra = append(extra, v)
		if p.fitsNow(cs, w) {
			fits = true
			break
		}
	}
	if !fits {
		return nil, false
	}
	// Reprieve: put back each victim, latest first, if the gang still fits.
	keep := extra[:0:0]
	for i := len(extra) - 1; i >= 0; i-- {
		v := extra[i]
		p.occupy(cs, v)
		if p.fitsNow(cs, w) {
			released = removeRunning(released, v)
			continue
		}
		p.release(cs, v)
		keep = append(keep, v)
	}
	sort.Slice(keep, func(a, b int) bool { return keep[a].Workload.ID < keep[b].Workload.ID })
	return keep, true
}

// withinNominal reports whether w, placed on cs, keeps its queue within the
// queue's own nominal quota for every class it uses. A pod set of any class
// takes the class of cs when cs has only one.
func (p *planner) withinNominal(cs *clusterState, w *Workload) bool {
	need := map[string]int64{}
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.Req.GPUs == 0 {
			continue
		}
		class := ps.Class
		if class == "" {
			if len(cs.classes) != 1 {
				return false
			}
			class = cs.classes[0].class
		}
		n := ps.MinSize()
		need[class] += int64(n) * ps.Req.TotalMilli()
	}
	for class, m := range need {
		if p.tree.Usage(w.Queue, class)+m > p.tree.Nominal(w.Queue, class) {
			return false
		}
	}
	return len(need) > 0
}

// borrowing reports whether r's queue uses more than its nominal quota in
// any class r holds.
func (p *planner) borrowing(r *Running) bool {
	for _, u := range r.Usage {
		if p.tree.Borrowing(r.Workload.Queue, u.Class) > 0 {
			return true
		}
	}
	return false
}

// takeBorrowed charges v's usage against what its queue borrows, if there is
// enough left; it changes nothing otherwise.
func (p *planner) takeBorrowed(left map[[2]string]int64, v *Running) bool {
	for _, u := range v.Usage {
		k := [2]string{v.Workload.Queue, u.Class}
		b, ok := left[k]
		if !ok {
			b = p.tree.Borrowing(k[0], k[1])
		}
		if b < u.Milli {
			return false
		}
	}
	for _, u := range v.Usage {
		k := [2]string{v.Workload.Queue, u.Class}
		if _, ok := left[k]; !ok {
			left[k] = p.tree.Borrowing(k[0], k[1])
		}
		left[k] -= u.Milli
	}
	return true
}

func removeRunning(list []*Running, v *Running) []*Running {
	for i, r := range list {
		if r == v {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

// fitsNow tries the gang on cs and rolls the attempt back.
func (p *planner) fitsNow(cs *clusterState, w *Workload) bool {
	t := &txn{cs: cs}
	_, res := p.placer.placeGang(t, w)
	t.rollbackTo(0)
	return res.ok
}

// release returns a running workload's resources to cs's nodes (what-if).
// It refuses, changing nothing, when the placement does not match the
// cluster's state (an unknown node, or a GPU that would overflow).
func (p *planner) release(cs *clusterState, r *Running) bool {
	type step struct {
		node int32
		req  *gpufit.Request
		gpus []int
	}
	var steps []step
	for _, pp := range r.Placement {
		ps := podSetByName(r.Workload, pp.PodSet)
		if ps == nil {
			return false
		}
		for _, rp := range pp.Replicas {
			i, ok := cs.nodeIndex(rp.Node)
			if !ok || len(rp.GPUs) != int(ps.Req.GPUs) {
				return false
			}
			steps = append(steps, step{i, &ps.Req, rp.GPUs})
		}
	}
	// Check every step against a scratch copy before touching the state.
	scratch := map[int32]gpufit.Node{}
	for _, s := range steps {
		n, ok := scratch[s.node]
		if !ok {
			n = cs.nodes[s.node].Clone()
		}
		for _, g := range s.gpus {
			if g < 0 || g >= len(n.GPUs) {
				return false
			}
			gpu := &n.GPUs[g]
			if gpu.FreeMilli+s.req.Milli > gpufit.MilliPerGPU || (gpu.TotalMemMiB > 0 && gpu.FreeMemMiB+s.req.GPUMemMiB > gpu.TotalMemMiB) {
				return false
			}
			gpu.FreeMilli += s.req.Milli
			gpu.FreeMemMiB += s.req.GPUMemMiB
		}
		scratch[s.node] = n
	}
	for _, s := range steps {
		cs.undo(s.node, s.req, s.gpus)
	}
	return true
}

// occupy is the inverse of release.
func (p *planner) occupy(cs *clusterState, r *Running) {
	for _, pp := range r.Placement {
		ps := podSetByName(r.Workload, pp.PodSet)
		for _, rp := range pp.Replicas {
			i, _ := cs.nodeIndex(rp.Node)
			cs.apply(i, &ps.Req, rp.GPUs)
		}
	}
}

func podSetByName(w *Workload, name string) *PodSet {
	for i := range w.PodSets {
		if w.PodSets[i].Name == name {
			return &w.PodSets[i]
		}
	}
	return nil
}
