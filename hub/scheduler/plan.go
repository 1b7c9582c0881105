package scheduler

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// planner is the working state of one Plan call. It owns copies of
// everything it changes; the Snapshot stays untouched.
type planner struct {
	snap     *Snapshot
	cfg      Config
	tree     *quota.Tree
	clusters []*clusterState
	placer   placer
	plan     *Plan
	// failed memoises placement failures by gang shape: capacity only shrinks
	// during the main pass, so a shape that did not fit will not fit later.
	failed map[string]memoFail
	// victims marks running workloads already chosen for preemption.
	victims map[string]bool
	// pendingIdx finds a workload's Pending entry to rewrite it after preemption.
	pendingIdx map[string]int
	order      []*Workload
	filtered   map[string]filterResult
	scoredBuf  []scoredCluster
	// reservedQueues have made their one reservation this cycle.
	reservedQueues map[string]bool
	// owed lists, per class, queues with pending work that fits their own
	// nominal quota but not the cohort's room: borrowers must not take it.
	owed map[string]map[string]bool
	// holds are the clusters' backfill states and byCluster the running
	// work per cluster, both built on first need (reserve.go).
	holds     []*holdState
	byCluster map[string][]*Running
	// caps is every cluster's capacity when empty, and never the
	// never-fits verdicts by shape; both built on first need (neverfits.go).
	caps  []*clusterCaps
	never map[string]neverVerdict
}

// Decide decides what to do with the pending workloads of a snapshot. It is
// pure and deterministic; see the package documentation for the contract.
func Decide(s *Snapshot, cfg Config) *Plan {
	p := &planner{
		snap:       s,
		plan:       &Plan{},
		failed:     map[string]memoFail{},
		victims:    map[string]bool{},
		pendingIdx: map[string]int{},
		filtered:   map[string]filterResult{},
	}
	var known, invalid []*Workload
	for _, w := range s.Pending {
		if !s.Queues.Leaf(w.Queue) {
			p.pend(w, ReasonInvalid, fmt.Sprintf("queue %q does not exist or is not a leaf queue", w.Queue))
			invalid = append(invalid, w)
			continue
		}
		known = append(known, w)
	}
	// Everything below sees only the head of each queue (window.go), so a
	// backlog behind it costs nothing, and a caller that hands the core
	// only the heads gets the same plan for them.
	known = p.window(known, cfg.MaxConsidered)
	if cfg.Scorer == nil {
		cfg.Scorer = scorerFor(cfg.Policy, cfg.Target, append(invalid, known...))
	}
	if cfg.NodeCandidates <= 0 {
		cfg.NodeCandidates = 1
	}
	cfg.NodeCandidates = candidatesPerReplica(cfg, known)
	if cfg.ClusterCandidates <= 0 {
		cfg.ClusterCandidates = 1
	}
	p.cfg = cfg
	p.placer.cfg = &p.cfg
	p.tree = s.Queues.Clone()
	alloc := chargeRunning(p.tree, s.Running, s.Charged, p.victims)
	for i := range s.Clusters {
		p.clusters = append(p.clusters, newClusterState(&s.Clusters[i], cfg.Scratch.cluster(i)))
	}
	sort.Slice(p.clusters, func(a, b int) bool { return p.clusters[a].src.ID < p.clusters[b].src.ID })

	horizon := usageHorizon(s.Ledger)
	// Nominated workloads first: they preempted work in an earlier cycle and
	// the room they made is theirs (as Kubernetes' nominated node).
	var nominated, rest []*Workload
	for _, w := range known {
		if w.Nominated {
			nominated = append(nominated, w)
		} else {
			rest = append(rest, w)
		}
	}
	sortQueue(nominated)
	p.owed = owedClasses(known, p.tree)
	for _, w := range nominated {
		p.plan.Stats.Considered++
		if d, out := p.schedule(w, true); out == admitted {
			alloc[w.Queue] += usageMilli(d.Usage)
		}
	}
	// Then fair order. With NominalFirst, two passes: first the work that
	// fits in its queue's own nominal quota, then the work that must borrow
	// (Kueue's guarantee); otherwise one pass where fairshare alone orders
	// owed and borrowing work, and reclaim preemption returns lent quota.
	var deferred []*Workload
	for pass := 0; pass < 2; pass++ {
		if pass == 0 && !p.cfg.NominalFirst {
			continue
		}
		input := rest
		if pass == 1 && p.cfg.NominalFirst {
			input = deferred
		}
		fo := newFairOrder(input, p.tree, s.Ledger, s.Now, alloc, horizon)
		for {
			w, leaf := fo.next()
			if w == nil {
				break
			}
			if p.cfg.MaxConsidered > 0 && p.plan.Stats.Considered >= p.cfg.MaxConsidered {
				p.pend(w, ReasonDeferred, "not considered yet: this scheduling cycle reached its budget; it will be tried in the next cycle")
				continue
			}
			if pass == 0 || !p.cfg.NominalFirst {
				p.plan.Stats.Considered++
			}
			d, out := p.schedule(w, pass == 1)
			switch out {
			case admitted:
				m := usageMilli(d.Usage)
				alloc[w.Queue] += m
				fo.addUsage(leaf, m, horizon)
			case mustBorrow:
				deferred = append(deferred, w)
			}
		}
	}
	p.preemptPass()
	return p.plan
}

// candidatesPerReplica is the node candidates each replica of this cycle
// may compare: NodeCandidates, raised towards MaxNodeCandidates when the
// cycle's CandidateBudget spread over its pending replicas allows more.
func candidatesPerReplica(cfg Config, pending []*Workload) int {
	k := cfg.NodeCandidates
	if cfg.CandidateBudget <= 0 || cfg.MaxNodeCandidates <= k {
		return k
	}
	var replicas int
	for _, w := range pending {
		for i := range w.PodSets {
			replicas += int(max(w.PodSets[i].Replicas, 1))
		}
	}
	per := cfg.CandidateBudget / max(replicas, 1)
	return max(k, min(per, cfg.MaxNodeCandidates))
}

// scorerFor builds the node scorer of a policy. Meridian's fragmentation
// gradient is measured against target, the decayed history of submitted
// shapes, when the caller keeps one; otherwise against the shapes pending
// in this snapshot (FGD's target workload: what arrives at the free
// capacity next).
func scorerFor(policy string, target *gpufit.TargetWorkload, pending []*Workload) gpufit.Scorer {
	if policy == PolicyBestFit {
		return gpufit.BestFit()
	}
	if target != nil && !target.Empty() {
		return gpufit.Meridian(*target)
	}
	var shapes []gpufit.Shape
	for _, w := range pending {
		for i := range w.PodSets {
			ps := &w.PodSets[i]
			sh := gpufit.Shape{CPUMilli: ps.Req.CPUMilli, GPUs: ps.Req.GPUs, MemMiB: ps.Req.MemMiB, Weight: float64(ps.Replicas)}
			if ps.Req.GPUs > 0 {
				sh.Milli = ps.Req.Milli
				if ps.Class != "" {
					sh.Classes = []string{ps.Class}
				}
			}
			shapes = append(shapes, sh)
		}
	}
	if len(shapes) == 0 {
		return gpufit.BestFit()
	}
	return gpufit.Meridian(gpufit.NewTargetWorkload(shapes))
}

// usageHorizon is how long a current allocation counts for in fairshare
// ordering: the ledger's mean decay time, or an hour without a ledger.
func usageHorizon(l *quota.Ledger) time.Duration {
	if l != nil {
		if h := l.HalfLife(); h > 0 {
			return time.Duration(float64(h) / 0.6931471805599453)
		}
	}
	return time.Hour
}

func (p *planner) pend(w *Workload, code ReasonCode, reason string) {
	p.pendingIdx[w.ID] = len(p.plan.Pending)
	p.plan.Pending = append(p.plan.Pending, Pending{WorkloadID: w.ID, Code: code, Reason: reason})
	p.order = append(p.order, w)
}

// schedule tries to admit one workload: quota, then cluster filters, then a
// whole-gang placement on the best clusters, then the final quota charge.
func (p *planner) schedule(w *Workload, allowBorrow bool) (Dispatch, outcome) {
	v, borrows, ok := p.quotaPrecheck(w)
	if !ok {
		// Waiting for quota helps only if the queue could ever hold it.
		if why, never := p.neverFits(w, ""); never {
			p.pend(w, ReasonNeverFits, why)
			return Dispatch{}, pending
		}
		p.pend(w, ReasonQuota, v)
		return Dispatch{}, pending
	}
	if borrows && !allowBorrow {
		return Dispatch{}, mustBorrow
	}
	w = p.capElastic(w)
	key := shapeKey(w)
	if f, ok := p.failed[key]; ok && !p.mayBackfill(w) {
		reason := f.Reason
		if f.Code == ReasonNoFit {
			reason = p.reserveFor(w, f.best, reason)
		}
		p.pend(w, f.Code, reason)
		return Dispatch{}, pending
	}
	cands, tooFull, why := p.eligible(w)
	if len(cands) == 0 {
		// Nowhere now: say so plainly when it is nowhere ever. Such a gang
		// reserves nothing and is never a reason to preempt.
		if why, never := p.neverFits(w, key); never {
			p.failed[key] = memoFail{Pending: Pending{Code: ReasonNeverFits, Reason: why}}
			p.pend(w, ReasonNeverFits, why)
			return Dispatch{}, pending
		}
	}
	if len(cands) == 0 && len(tooFull) > 0 {
		// Nothing has the room; try the emptiest few only to say how close
		// the gang comes.
		var best fitAttempt
		for i, cs := range tooFull {
			if i >= p.cfg.ClusterCandidates {
				break
			}
			t := &txn{cs: cs}
			_, res := p.placer.placeGang(t, w)
			t.rollbackTo(0)
			if a := (fitAttempt{cluster: cs.src.ID, cs: cs, res: res}); a.better(best) {
				best = a
			}
		}
		f := Pending{Code: ReasonNoFit, Reason: noFitReason(w, best, 0, 0)}
		p.failed[key] = memoFail{f, best}
		p.pend(w, f.Code, p.reserveFor(w, best, f.Reason))
		return Dispatch{}, pending
	}
	if len(cands) == 0 {
		f := Pending{Code: ReasonNoCluster, Reason: why}
		p.failed[key] = memoFail{Pending: f}
		p.pend(w, f.Code, f.Reason)
		return Dispatch{}, pending
	}
	defer p.backfillAs(w)()
	var best fitAttempt
	tried := 0
	sawBorrow := false
	// failed records the tighter clusters where the gang did not fit node by
	// node, for the decision record (decision.go).
	var failed [maxDecisionClusters - 1]ClusterScore
	nf := 0
	for ci, cs := range cands {
		if tried >= p.cfg.ClusterCandidates {
			break
		}
		tried++
		t := &txn{cs: cs}
		placement, res := p.placer.placeGang(t, w)
		if !res.ok {
			if a := (fitAttempt{cluster: cs.src.ID, cs: cs, res: res}); a.better(best) {
				best = a
			}
			if nf < len(failed) {
				failed[nf] = ClusterScore{Cluster: cs.src.ID, SlackMilli: p.scoredBuf[ci].slack, Tried: true, Placed: res.placed, Need: res.need}
				nf++
			}
			continue
		}
		usage := usageOf(t)
		reason, borrowed, ok := p.checkAndCharge(w.Queue, usage, allowBorrow)
		switch {
		case !ok && borrowed:
			// Here it would borrow; another cluster (another class) may
			// still have room within the queue's own quota.
			t.rollbackTo(0)
			sawBorrow = true
			tried--
			continue
		case !ok:
			t.rollbackTo(0)
			code := ReasonQuota
			placed := make(map[string]int64, len(usage))
			for _, u := range usage {
				placed[u.Class] += u.Milli
			}
			if why, never := neverFitsQuota(p.tree, w.Queue, placed); never {
				code, reason = ReasonNeverFits, why
			}
			p.pend(w, code, reason)
			return Dispatch{}, pending
		}
		d := Dispatch{WorkloadID: w.ID, Cluster: cs.src.ID, Placement: placement, Usage: usage, Borrowed: borrowed,
			Decision: decide(p.scoredBuf[:len(cands)], ci, failed[:nf], w.Nominated)}
		if shadow, ok := backfilled(t, w.ID); ok {
			d.Decision.Rule, d.Decision.Shadow = RuleBackfill, shadow
		}
		p.plan.Dispatches = append(p.plan.Dispatches, d)
		p.plan.Stats.Dispatched++
		p.plan.Stats.Placements += len(t.log)
		return d, admitted
	}
	if sawBorrow {
		return Dispatch{}, mustBorrow
	}
	if why, never := p.neverFits(w, key); never {
		p.failed[key] = memoFail{Pending: Pending{Code: ReasonNeverFits, Reason: why}}
		p.pend(w, ReasonNeverFits, why)
		return Dispatch{}, pending
	}
	f := Pending{Code: ReasonNoFit, Reason: noFitReason(w, best, len(cands), tried)}
	p.failed[key] = memoFail{f, best}
	p.pend(w, f.Code, p.reserveFor(w, best, f.Reason))
	return Dispatch{}, pending
}

// memoFail is a remembered placement failure of one gang shape.
type memoFail struct {
	Pending
	best fitAttempt
}

// outcome is what schedule did with a workload.
type outcome uint8

const (
	pending    outcome = iota // given a pending reason
	admitted                  // dispatched
	mustBorrow                // needs borrowed quota; retried in the borrowing pass
)

func usageMilli(u []ClassMilli) int64 {
	var m int64
	for _, x := range u {
		m += x.Milli
	}
	return m
}

// quotaPrecheck checks the quota a workload needs at its minimum size, for
// the pod sets whose class is known before placement.
func (p *planner) quotaPrecheck(w *Workload) (reason string, borrows, ok bool) {
	need := minNeed(w)
	delete(need, "") // any-class pod sets are charged once placed
	for _, c := range sortedKeys(need) {
		v := p.tree.Check(w.Queue, c, need[c])
		if !v.OK {
			return v.Reason, false, false
		}
		if v.Borrowed > 0 {
			borrows = true
		}
	}
	return "", borrows, true
}

// capElastic lowers the replica count of elastic pod sets of a known class
// to what the queue's quota admits (never below MinReplicas), so an elastic
// workload runs smaller instead of waiting. It returns w itself when nothing
// changes, or a copy.
func (p *planner) capElastic(w *Workload) *Workload {
	var out *Workload
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.MinReplicas <= 0 || ps.MinReplicas >= ps.Replicas || ps.Class == "" || ps.Req.GPUs == 0 {
			continue
		}
		// Everything else at its minimum, in this class.
		var others int64
		for j := range w.PodSets {
			o := &w.PodSets[j]
			if j == i || o.Class != ps.Class {
				continue
			}
			n := o.MinSize()
			others += int64(n) * o.Req.TotalMilli()
		}
		per := ps.Req.TotalMilli()
		lo, hi := ps.MinReplicas, ps.Replicas // lo is admissible (precheck passed)
		for lo < hi {
			mid := lo + (hi-lo+1)/2
			if p.tree.Check(w.Queue, ps.Class, others+int64(mid)*per).OK {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		if lo < ps.Replicas {
			if out == nil {
				cp := *w
				cp.PodSets = append([]PodSet(nil), w.PodSets...)
				out = &cp
			}
			out.PodSets[i].Replicas = lo
		}
	}
	if out == nil {
		return w
	}
	return out
}

// checkAndCharge checks the placed gang's usage against quota and charges
// it. Without allowBorrow, usage that needs borrowed quota is refused with
// borrowed set and no reason.
func (p *planner) checkAndCharge(queue string, usage []ClassMilli, allowBorrow bool) (reason string, borrowed, ok bool) {
	for _, u := range usage {
		v := p.tree.Check(queue, u.Class, u.Milli)
		if !v.OK {
			return v.Reason, false, false
		}
		if v.Borrowed > 0 {
			borrowed = true
		}
	}
	if borrowed && !allowBorrow {
		return "", true, false
	}
	if borrowed {
		for _, u := range usage {
			for q := range p.owed[u.Class] {
				if q != queue {
					// Another queue, possibly another tenant's: not named.
					return fmt.Sprintf("would borrow %s quota that another queue is owed and waits for", u.Class), false, false
				}
			}
		}
	}
	for _, u := range usage {
		p.tree.Charge(queue, u.Class, u.Milli)
	}
	return "", borrowed, true
}

// owedClasses finds, before anything is admitted, the classes in which some
// queue has pending work within its own nominal quota that the cohort cannot
// take now because others borrow. Admitting more borrowed work in those
// classes would only be reclaimed again at once.
func owedClasses(pending []*Workload, tree *quota.Tree) map[string]map[string]bool {
	owed := map[string]map[string]bool{}
	for _, w := range pending {
		for i := range w.PodSets {
			ps := &w.PodSets[i]
			if ps.Class == "" || ps.Req.GPUs == 0 {
				continue
			}
			n := ps.MinSize()
			m := int64(n) * ps.Req.TotalMilli()
			if tree.Usage(w.Queue, ps.Class)+m <= tree.Nominal(w.Queue, ps.Class) && !tree.Check(w.Queue, ps.Class, m).OK {
				if owed[ps.Class] == nil {
					owed[ps.Class] = map[string]bool{}
				}
				owed[ps.Class][w.Queue] = true
			}
		}
	}
	return owed
}

// usageOf sums a transaction's GPU milli per accelerator class, sorted by class.
func usageOf(t *txn) []ClassMilli {
	var out []ClassMilli
	for _, a := range t.log {
		m := a.req.TotalMilli()
		if m == 0 {
			continue
		}
		class := t.cs.meta[a.node].class.class
		found := false
		for i := range out {
			if out[i].Class == class {
				out[i].Milli += m
				found = true
				break
			}
		}
		if !found {
			out = append(out, ClassMilli{Class: class, Milli: m})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Class < out[b].Class })
	return out
}

// fitAttempt records the closest a gang came to fitting, for the reason text.
type fitAttempt struct {
	cluster string
	cs      *clusterState
	res     fitResult
}

func (a fitAttempt) better(b fitAttempt) bool {
	if b.cluster == "" {
		return true
	}
	if a.res.podSet != b.res.podSet {
		return a.res.podSet > b.res.podSet
	}
	return int64(a.res.placed)*int64(b.res.need) > int64(b.res.placed)*int64(a.res.need)
}

// shapeKey identifies everything about a workload that decides whether it can
// be placed: two workloads with one key fit (or fail) alike.
func shapeKey(w *Workload) string {
	var b strings.Builder
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		r := &ps.Req
		for _, v := range []int64{int64(ps.Replicas), int64(ps.MinReplicas), r.CPUMilli, r.MemMiB, int64(r.GPUs), int64(r.Milli), int64(r.GPUMemMiB), int64(ps.Mode), int64(ps.Topology)} {
			b.WriteString(strconv.FormatInt(v, 36))
			b.WriteByte(',')
		}
		b.WriteString(ps.Class)
		if !r.MIG.IsZero() {
			b.WriteByte('@')
			b.WriteString(r.MIG.String())
		}
		b.WriteByte(';')
	}
	writePlacementScope(&b, w)
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
