package scheduler

import (
	"sort"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// txn places the replicas of one gang on one cluster and can roll every
// placement back, so a gang is committed whole or not at all.
type txn struct {
	cs  *clusterState
	log []applied
}

type applied struct {
	node int32
	req  *gpufit.Request
	gpus []int
}

func (t *txn) apply(node int32, r *gpufit.Request, gpus []int) {
	g := append([]int(nil), gpus...)
	t.cs.apply(node, r, g)
	t.log = append(t.log, applied{node: node, req: r, gpus: g})
}

// mark and rollbackTo undo part of a transaction (one pod set or one domain try).
func (t *txn) mark() int { return len(t.log) }

func (t *txn) rollbackTo(m int) {
	for i := len(t.log) - 1; i >= m; i-- {
		a := t.log[i]
		t.cs.undo(a.node, a.req, a.gpus)
	}
	t.log = t.log[:m]
}

// fitResult says how far a gang got in one cluster: used for pending reasons.
type fitResult struct {
	ok bool
	// podSet is the index of the first pod set that did not fit.
	podSet int
	// placed and need are that pod set's replica counts.
	placed, need int32
}

// placer holds the per-Plan scratch buffers for node choice.
type placer struct {
	cfg *Config
	// states remembers scores by node state (stateKey), across the
	// clusters of one Plan call.
	states  map[stateKey]memoScore
	classes []*classIndex
	cands   []int32
	buf     []int
	best    []int
}

// placeGang tries to place every pod set of w on cs inside t. On failure it
// rolls t back to where it started and says how far it got.
func (p *placer) placeGang(t *txn, w *Workload) ([]PodSetPlacement, fitResult) {
	t.cs.placing = w.ID
	defer func() { t.cs.placing = "" }()
	w = resolveMIG(t.cs, w)
	start := t.mark()
	var out []PodSetPlacement
	for si := range w.PodSets {
		ps := &w.PodSets[si]
		m := t.mark()
		placed := p.placePodSet(t, ps)
		need := ps.MinSize()
		if placed < need {
			t.rollbackTo(m)
			t.rollbackTo(start)
			return out, fitResult{podSet: si, placed: placed, need: need}
		}
		pp := PodSetPlacement{PodSet: ps.Name, Replicas: make([]ReplicaPlacement, 0, placed), MIG: ps.Req.MIG.String()}
		for _, a := range t.log[m:] {
			pp.Replicas = append(pp.Replicas, ReplicaPlacement{Node: t.cs.src.Nodes[a.node].Name, GPUs: a.gpus})
		}
		out = append(out, pp)
	}
	return out, fitResult{ok: true}
}

// placePodSet places as many replicas of ps as it can (up to Replicas) under
// its topology constraint, and returns how many it placed. For a domain
// constraint it returns the best count any single domain reached; the
// transaction then holds only the replicas of the chosen domain.
func (p *placer) placePodSet(t *txn, ps *PodSet) int32 {
	switch ps.Topology {
	case TopologySameNode:
		return p.placeSameNode(t, ps)
	case TopologyRack, TopologyNVLink:
		return p.placeInDomain(t, ps)
	}
	var placed int32
	for placed < ps.Replicas {
		node, ok := p.pickNode(t.cs, ps, nil)
		if !ok {
			break
		}
		t.apply(node, &ps.Req, p.best)
		placed++
	}
	return placed
}

// classesFor lists the class indexes a pod set may use in cs.
func classesFor(cs *clusterState, ps *PodSet) []*classIndex {
	if ps.Class == "" || ps.Req.GPUs == 0 {
		return cs.classes
	}
	if ci := cs.classFor(ps.Class); ci != nil {
		return []*classIndex{ci}
	}
	return nil
}

// pickNode finds the best node for one replica: scan the buckets from the
// tightest that can serve the request, collect up to NodeCandidates nodes that
// fit, and let the scorer choose. allowed, when set, restricts the nodes
// (a topology domain). The chosen GPUs are left in p.best.
func (p *placer) pickNode(cs *clusterState, ps *PodSet, allowed []int32) (int32, bool) {
	r := &ps.Req
	p.cands = p.cands[:0]
	k := p.cfg.NodeCandidates
	if k <= 0 {
		k = 1
	}
	if allowed != nil {
		for _, i := range allowed {
			if len(p.cands) >= k {
				break
			}
			if classOK(cs, i, ps) && !cs.isReserved(i) && gpufit.Fits(&cs.nodes[i], r) {
				p.cands = append(p.cands, i)
			}
		}
	} else if i, ok := p.collect(cs, ps, k); ok {
		return i, true
	}
	if len(p.cands) == 0 {
		return -1, false
	}
	memo := cs.scoreMemo(r)
	bestNode, bestScore := int32(-1), 0.0
	for _, i := range p.cands {
		s, g := p.score(cs, memo, i, r)
		if bestNode < 0 || s > bestScore || (s == bestScore && i < bestNode) {
			bestNode, bestScore = i, s
			p.best = append(p.best[:0], g...)
		}
	}
	return bestNode, true
}

// collect gathers up to k candidate nodes for one replica into p.cands,
// best fit first across every class the pod set may use: for a fraction,
// the nodes with a partly used GPU (a fraction there keeps whole GPUs
// whole); then bucket by bucket from the tightest that can serve the
// request, each bucket over all classes before the next, so a roomier node
// of one class never comes before a tighter node of another. An exact fit
// (a node whose whole free GPUs the request takes, nothing left to
// fragment) ends the search: no scorer can do better; it is returned with
// its GPUs in p.best.
func (p *placer) collect(cs *clusterState, ps *PodSet, k int) (int32, bool) {
	r := &ps.Req
	p.classes = p.classes[:0]
	for _, ci := range classesFor(cs, ps) {
		if r.GPUs > 0 && ci.freeMilli < r.TotalMilli() {
			continue
		}
		p.classes = append(p.classes, ci)
	}
	if r.Shared() && p.cfg.PartialFirst {
		for _, ci := range p.classes {
			for _, i := range ci.partial {
				if len(p.cands) >= k {
					return -1, false
				}
				if !cs.isReserved(i) && gpufit.Fits(&cs.nodes[i], r) {
					p.cands = append(p.cands, i)
				}
			}
		}
		if len(p.cands) > 0 {
			return -1, false
		}
	}
	fb := firstBucket(r)
	for b := fb; len(p.cands) < k; b++ {
		more := false
		for _, ci := range p.classes {
			if b >= len(ci.buckets) {
				continue
			}
			more = true
			for _, i := range ci.buckets[b] {
				if cs.isReserved(i) || !gpufit.Fits(&cs.nodes[i], r) {
					continue
				}
				if b == fb && !r.Shared() && r.GPUs > 0 && !cs.meta[i].partial && p.cfg.ExactFit {
					_, g := exactFit.Score(&cs.nodes[i], r, p.best[:0])
					p.best = g
					return i, true
				}
				p.cands = append(p.cands, i)
				if len(p.cands) >= k {
					return -1, false
				}
			}
		}
		if !more {
			break
		}
	}
	return -1, false
}

// score is the scorer's verdict on node i for r, from the memo while the
// node is unchanged: scorers are pure functions of the node state, so
// this only saves work (a cycle places many replicas of few shapes, and
// each placement changes one node). The GPUs are in p.buf.
func (p *placer) score(cs *clusterState, memo []memoScore, i int32, r *gpufit.Request) (float64, []int) {
	if memo == nil || len(cs.nodes[i].GPUs) > len(memoScore{}.gpus) {
		s, g := p.cfg.Scorer.Score(&cs.nodes[i], r, p.buf[:0])
		p.buf = g
		return s, g
	}
	e := &memo[i]
	if e.ver != cs.ver[i] {
		n := &cs.nodes[i]
		key, keyed := stateKeyOf(n, r)
		if v, ok := p.states[key]; keyed && ok {
			*e = v
		} else {
			s, g := p.cfg.Scorer.Score(n, r, p.buf[:0])
			e.score, e.ngpu = s, uint8(len(g))
			for j, x := range g {
				e.gpus[j] = uint8(x)
			}
			if keyed {
				if p.states == nil {
					p.states = map[stateKey]memoScore{}
				}
				p.states[key] = *e
			}
		}
		e.ver = cs.ver[i]
	}
	g := p.buf[:0]
	for j := 0; j < int(e.ngpu); j++ {
		g = append(g, int(e.gpus[j]))
	}
	p.buf = g
	return e.score, g
}

// stateKey is everything a scorer reads of a node and a request. Nodes in
// the same state score the same, wherever they are: most nodes of a fleet
// are in a few states (empty, full), so one score serves them all.
type stateKey struct {
	req      gpufit.Request
	class    string
	cpu, mem int64
	n        uint8
	gpus     [8]gpufit.GPU
}

// stateKeyOf is n's key for r; false for a node the key cannot describe
// (MIG layouts, more than 8 GPUs).
func stateKeyOf(n *gpufit.Node, r *gpufit.Request) (stateKey, bool) {
	if len(n.MIG) > 0 || len(n.GPUs) > 8 {
		return stateKey{}, false
	}
	k := stateKey{req: *r, class: n.Class, cpu: n.CPUMilliFree, mem: n.MemMiBFree, n: uint8(len(n.GPUs))}
	copy(k.gpus[:], n.GPUs)
	return k, true
}

// exactFit picks GPUs when the node choice is already made.
var exactFit = gpufit.BestFit()

func classOK(cs *clusterState, i int32, ps *PodSet) bool {
	return ps.Class == "" || ps.Req.GPUs == 0 || cs.meta[i].class.class == ps.Class
}

// placeSameNode puts every replica on one node, trying the tightest nodes first.
func (p *placer) placeSameNode(t *txn, ps *PodSet) int32 {
	need := ps.MinSize()
	var best int32
	whole := ps.Req.GPUs * need
	for _, ci := range classesFor(t.cs, ps) {
		fb := firstBucket(&ps.Req)
		clamped := false
		if ps.Req.Milli >= gpufit.MilliPerGPU && ps.Req.GPUs > 0 {
			fb = bucketWhole + int(whole) - 1
			if last := bucketWhole + int(ci.maxGPUs) - 1; fb > last && last >= bucketWhole {
				// No node is that large: one of the largest says how many
				// replicas come closest (they all have the same GPUs free).
				fb, clamped = last, true
			}
		}
		for b := fb; b < len(ci.buckets); b++ {
			// copy: placing replicas moves nodes between buckets
			nodes := append([]int32(nil), ci.buckets[b]...)
			for _, i := range nodes {
				if t.cs.isReserved(i) {
					continue
				}
				m := t.mark()
				var placed int32
				for placed < ps.Replicas && gpufit.Fits(&t.cs.nodes[i], &ps.Req) {
					_, g := p.cfg.Scorer.Score(&t.cs.nodes[i], &ps.Req, p.buf[:0])
					p.buf = g
					t.apply(i, &ps.Req, g)
					placed++
				}
				if placed >= need {
					return placed
				}
				if placed > best {
					best = placed
				}
				t.rollbackTo(m)
				if clamped {
					break
				}
			}
		}
	}
	return best
}

// placeInDomain puts every replica of ps into one rack or NVLink domain. It
// tries the domains with the least free capacity that could still hold the
// pod set first (best fit), so big domains stay whole for big gangs.
func (p *placer) placeInDomain(t *txn, ps *PodSet) int32 {
	need := ps.MinSize()
	doms := t.cs.domains(ps.Topology)
	type cand struct {
		d    int
		free int64
	}
	want := int64(need) * ps.Req.TotalMilli()
	cands := make([]cand, 0, len(doms))
	for d := range doms {
		var free int64
		for _, i := range doms[d].nodes {
			if classOK(t.cs, i, ps) {
				free += freeMilli(&t.cs.nodes[i])
			}
		}
		if free >= want {
			cands = append(cands, cand{d, free})
		}
	}
	sort.SliceStable(cands, func(a, b int) bool { return cands[a].free < cands[b].free })
	if len(cands) == 0 && len(doms) > 0 {
		// No domain has the room in total: try the emptiest one, only to
		// say how far the pod set gets.
		most, mostFree := 0, int64(-1)
		for d := range doms {
			var free int64
			for _, i := range doms[d].nodes {
				free += freeMilli(&t.cs.nodes[i])
			}
			if free > mostFree {
				most, mostFree = d, free
			}
		}
		cands = append(cands, cand{most, mostFree})
	}
	var best int32
	for _, c := range cands {
		m := t.mark()
		var placed int32
		for placed < ps.Replicas {
			node, ok := p.pickNode(t.cs, ps, doms[c.d].nodes)
			if !ok {
				break
			}
			t.apply(node, &ps.Req, p.best)
			placed++
		}
		if placed >= need {
			return placed
		}
		if placed > best {
			best = placed
		}
		t.rollbackTo(m)
	}
	return best
}

type domain struct {
	name  string
	nodes []int32
}

// domains returns the cluster's racks or NVLink domains, built once per plan.
func (cs *clusterState) domains(topo Topology) []domain {
	k := 0
	if topo == TopologyNVLink {
		k = 1
	}
	if cs.doms[k] == nil {
		cs.doms[k] = domainsOf(cs, topo)
	}
	return cs.doms[k]
}

// domainsOf groups a cluster's nodes by rack or NVLink domain, sorted by name.
// A node with no domain label is a domain of its own.
func domainsOf(cs *clusterState, topo Topology) []domain {
	idx := map[string]int{}
	var out []domain
	for i := range cs.src.Nodes {
		n := &cs.src.Nodes[i]
		key := n.Rack
		if topo == TopologyNVLink {
			key = n.NVLink
		}
		if key == "" {
			key = "node:" + n.Name
		}
		d, ok := idx[key]
		if !ok {
			d = len(out)
			idx[key] = d
			out = append(out, domain{name: key})
		}
		out[d].nodes = append(out[d].nodes, int32(i))
	}
	sort.Slice(out, func(a, b int) bool { return out[a].name < out[b].name })
	return out
}
