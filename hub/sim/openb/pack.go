package openb

import (
	"cmp"
	"slices"
	"strings"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// Packing is an offline placement of a pod list with full knowledge of it.
type Packing struct {
	Milli  int64  // GPU milli allocated
	Placed int    // pods placed (CPU-only ones included)
	By     string // the heuristic that found it: "<order>/<rule>[+lp][+repair]" or "exact"
	// Placement[k] is the index (in nodes sorted by name) of the node that
	// holds pods[k], or -1.
	Placement []int
	// GPUs[k] are the GPU indices pods[k] holds on its node (nil if unplaced).
	GPUs [][]int
}

// OfflinePack packs pods onto nodes knowing all of them in advance and
// returns the best of several heuristics (see offlinePack). Every result is
// a feasible packing built with gpufit.Fits and Node.Apply, so its
// allocation is a lower bound on the offline optimum. nodes need not be
// sorted.
func OfflinePack(nodes []NodeSpec, pods []Pod) (*Packing, error) {
	sorted := slices.Clone(nodes)
	slices.SortStableFunc(sorted, func(a, b NodeSpec) int { return cmp.Compare(a.Name, b.Name) })
	b, err := upperBound(sorted, pods)
	if err != nil {
		return nil, err
	}
	return offlinePack(sorted, pods, b), nil
}

// exactMaxGPUPods is the size up to which offlinePack also searches
// exhaustively.
const exactMaxGPUPods = 10

// offlinePack tries every combination of three orders (GPU request then
// CPU, GPU request then memory, dominant share of a node, all largest first
// and CPU-only pods last), two node rules (the paper's BestFit leftover
// score; least GPU share left, then least CPU share left) and with or
// without the LP's shape-to-type quotas as a first preference; each
// packing is then improved by single evictions (repair). It keeps the best,
// and on small instances the exhaustive optimum.
func offlinePack(nodes []NodeSpec, pods []Pod, b *bound) *Packing {
	in := b.in
	var best *Packing
	keep := func(p *Packing) {
		if best == nil || p.Milli > best.Milli || (p.Milli == best.Milli && p.Placed > best.Placed) {
			best = p
		}
	}
	for _, ord := range packOrders(in) {
		for _, rule := range []packRule{ruleBestFit, ruleGPUTight} {
			for _, guided := range []bool{false, true} {
				ps := newPackState(in)
				var quota [][]float64
				name := ord.name + "/" + rule.String()
				if guided {
					quota = make([][]float64, len(b.quota))
					for s := range quota {
						quota[s] = slices.Clone(b.quota[s])
					}
					name += "+lp"
				}
				for _, k := range ord.idx {
					ps.place(k, rule, quota)
				}
				if ps.repair(ord.idx, rule) {
					name += "+repair"
				}
				keep(ps.result(name))
			}
		}
	}
	for _, ord := range []string{"gpu-cpu", "gpu-mem", "dominant"} {
		for _, rule := range []packRule{ruleBestFit, ruleGPUTight} {
			ps := newPackState(in)
			name := "bundle-" + ord + "/" + rule.String()
			ps.packBundles(ord, rule)
			if ps.repair(packOrders(in)[0].idx, rule) {
				name += "+repair"
			}
			keep(ps.result(name))
		}
	}
	arrival := make([]int, len(pods))
	for k := range arrival {
		arrival[k] = k
	}
	for _, pol := range []string{PolicyMeridian, PolicyFGD} {
		sc, err := NewScorer(pol, pods, 0)
		if err != nil {
			continue
		}
		for _, ord := range []packOrder{{"arrival", arrival}, packOrders(in)[0]} {
			ps := newPackState(in)
			ps.scoredPack(ord.idx, sc)
			name := ord.name + "/" + pol
			if ps.repair(packOrders(in)[0].idx, ruleGPUTight) {
				name += "+repair"
			}
			keep(ps.result(name))
		}
	}
	if gpuPods(pods) <= exactMaxGPUPods && len(nodes) <= 6 {
		if ex := exactPack(in); ex.Milli > best.Milli {
			best = ex
		}
	}
	return best
}

func gpuPods(pods []Pod) int {
	n := 0
	for _, p := range pods {
		if p.Req.GPUs > 0 {
			n++
		}
	}
	return n
}

type packOrder struct {
	name string
	idx  []int
}

func packOrders(in *instance) []packOrder {
	var maxCPU, maxMem int64
	maxGPU := 1
	for _, n := range in.nodes {
		maxCPU, maxMem, maxGPU = max(maxCPU, n.CPUMilli), max(maxMem, n.MemMiB), max(maxGPU, n.GPUs)
	}
	dominant := func(r *gpufit.Request) float64 {
		d := float64(r.TotalMilli()) / float64(maxGPU*gpufit.MilliPerGPU)
		if maxCPU > 0 {
			d = max(d, float64(r.CPUMilli)/float64(maxCPU))
		}
		if maxMem > 0 {
			d = max(d, float64(r.MemMiB)/float64(maxMem))
		}
		return d
	}
	byKeys := func(keys func(r *gpufit.Request) [3]float64) []int {
		idx := make([]int, len(in.pods))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			ra, rb := &in.pods[a].Req, &in.pods[b].Req
			ka, kb := keys(ra), keys(rb)
			for i := range ka {
				if c := cmp.Compare(kb[i], ka[i]); c != 0 {
					return c
				}
			}
			return 0
		})
		// CPU-only pods last: they add no GPU allocation.
		gpu := idx[:0:0]
		var cpuOnly []int
		for _, k := range idx {
			if in.pods[k].Req.GPUs > 0 {
				gpu = append(gpu, k)
			} else {
				cpuOnly = append(cpuOnly, k)
			}
		}
		return append(gpu, cpuOnly...)
	}
	return []packOrder{
		{"gpu-cpu", byKeys(func(r *gpufit.Request) [3]float64 {
			return [3]float64{float64(r.TotalMilli()), float64(r.CPUMilli), float64(r.MemMiB)}
		})},
		{"gpu-mem", byKeys(func(r *gpufit.Request) [3]float64 {
			return [3]float64{float64(r.TotalMilli()), float64(r.MemMiB), float64(r.CPUMilli)}
		})},
		{"dominant", byKeys(func(r *gpufit.Request) [3]float64 {
			return [3]float64{dominant(r), float64(r.TotalMilli()), float64(r.CPUMilli)}
		})},
	}
}

type packRule int

const (
	ruleBestFit  packRule = iota // the paper's BestFit leftover (CPU and GPU, fixed scales)
	ruleGPUTight                 // least GPU share left, then least CPU share left
)

func (r packRule) String() string {
	if r == ruleBestFit {
		return "bestfit"
	}
	return "gpu-tight"
}

type placed struct {
	pod  int
	gpus []int
}

type packState struct {
	in    *instance
	state []gpufit.Node
	on    [][]placed // pods on each node
	where []int      // node of each pod, -1
	milli int64
	buf   []int
	ver   []uint32 // per node, bumped on every change
}

func newPackState(in *instance) *packState {
	ps := &packState{in: in, state: make([]gpufit.Node, len(in.nodes)), on: make([][]placed, len(in.nodes)), where: make([]int, len(in.pods)),
		ver: make([]uint32, len(in.nodes))}
	for i, n := range in.nodes {
		g := make([]gpufit.GPU, n.GPUs)
		for k := range g {
			g[k] = gpufit.GPU{FreeMilli: gpufit.MilliPerGPU}
		}
		ps.state[i] = gpufit.Node{Class: n.Model, CPUMilliFree: n.CPUMilli, MemMiBFree: n.MemMiB, GPUs: g}
	}
	for i := range ps.where {
		ps.where[i] = -1
	}
	return ps
}

// leftover rates placing r on node i (which fits); lower is tighter.
func (ps *packState) leftover(i int, r *gpufit.Request, rule packRule) float64 {
	n := &ps.state[i]
	cpu := float64(n.CPUMilliFree - r.CPUMilli)
	gpu := float64(n.FreeMilli() - r.TotalMilli())
	if rule == ruleBestFit {
		return 0.5*cpu/bestFitCPUScale + 0.5*gpu/bestFitGPUScale
	}
	spec := &ps.in.nodes[i]
	c := 0.0
	if spec.CPUMilli > 0 {
		c = cpu / float64(spec.CPUMilli)
	}
	return gpu/gpufit.MilliPerGPU + 0.5*c
}

// The reference BestFit's normalisation (the largest node of the trace).
const (
	bestFitCPUScale = 128000
	bestFitGPUScale = 8000
)

// choose returns the tightest node for pod k among nodes where it fits
// (and, with want set, whose type want accepts), or -1.
func (ps *packState) choose(k int, rule packRule, skip int, want func(t int) bool) int {
	p := &ps.in.pods[k]
	r := &p.Req
	best, bestScore := -1, 0.0
	for i := range ps.state {
		if i == skip || (want != nil && !want(ps.in.typeOf[i])) {
			continue
		}
		n := &ps.state[i]
		if !classAllowed(p.Classes, n.Class, r) || !gpufit.Fits(n, r) {
			continue
		}
		if s := ps.leftover(i, r, rule); best < 0 || s < bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

func (ps *packState) apply(k, i int) {
	_, g := gpufit.BestFit().Score(&ps.state[i], &ps.in.pods[k].Req, ps.buf[:0])
	ps.applyOn(k, i, slices.Clone(g))
}

// applyOn puts pod k on node i on GPUs g.
func (ps *packState) applyOn(k, i int, g []int) {
	r := &ps.in.pods[k].Req
	ps.state[i].Apply(r, g)
	ps.ver[i]++
	ps.on[i] = append(ps.on[i], placed{k, g})
	ps.where[k] = i
	ps.milli += r.TotalMilli()
}

// remove takes pod k off its node and returns the GPUs it held there.
func (ps *packState) remove(k int) []int {
	i := ps.where[k]
	var g []int
	for j, pl := range ps.on[i] {
		if pl.pod == k {
			g = pl.gpus
			ps.state[i].Undo(&ps.in.pods[k].Req, g)
			ps.ver[i]++
			ps.on[i] = slices.Delete(ps.on[i], j, j+1)
			break
		}
	}
	ps.where[k] = -1
	ps.milli -= ps.in.pods[k].Req.TotalMilli()
	return g
}

// place puts pod k on the tightest node, preferring the node types where
// the LP quota of its shape is not used up.
func (ps *packState) place(k int, rule packRule, quota [][]float64) bool {
	s := ps.in.shapeOf[k]
	i := -1
	if quota != nil && s >= 0 {
		i = ps.choose(k, rule, -1, func(t int) bool { return quota[s][t] >= 0.5 })
	}
	if i < 0 {
		i = ps.choose(k, rule, -1, nil)
	}
	if i < 0 {
		return false
	}
	ps.apply(k, i)
	if quota != nil && s >= 0 {
		quota[s][ps.in.typeOf[i]]--
	}
	return true
}

// repair tries, for each unplaced GPU pod (in order), to evict one placed
// pod with a smaller GPU request (or a CPU-only pod) from some node so that
// the unplaced one fits there, then to put the evicted pod elsewhere. A
// move is taken when the evicted pod finds a new node, or else when the
// allocation still grows. It reports whether any move was made.
func (ps *packState) repair(order []int, rule packRule) bool {
	moved := false
	for pass := 0; pass < 2; pass++ {
		any := false
		failed := map[int]bool{} // shapes that found no move since the last change
		for _, u := range order {
			s := ps.in.shapeOf[u]
			if ps.where[u] >= 0 || s < 0 || failed[s] {
				continue
			}
			if ps.place(u, rule, nil) || ps.evictFor(u, rule) {
				any = true
				clear(failed)
				continue
			}
			failed[s] = true
		}
		moved = moved || any
		if !any {
			break
		}
	}
	// The evictions may have freed room for CPU-only pods.
	for _, u := range order {
		if ps.where[u] < 0 && ps.in.pods[u].Req.GPUs == 0 {
			ps.place(u, rule, nil)
		}
	}
	return moved
}

func (ps *packState) evictFor(u int, rule packRule) bool {
	pu := &ps.in.pods[u]
	ru := &pu.Req
	bestGain, bestNode, bestVictim := int64(0), -1, -1
	for i := range ps.state {
		n := &ps.state[i]
		if !classAllowed(pu.Classes, n.Class, ru) || len(n.GPUs) < int(ru.GPUs) {
			continue
		}
		if n.CPUMilliFree+ps.spec(i).CPUMilli < ru.CPUMilli { // cheap reject
			continue
		}
		for j := 0; j < len(ps.on[i]); j++ {
			v := ps.on[i][j].pod
			rv := &ps.in.pods[v].Req
			if rv.TotalMilli() >= ru.TotalMilli() && rv.GPUs > 0 {
				continue
			}
			if !fitsWithout(n, rv, ps.on[i][j].gpus, ru) {
				continue
			}
			gv := ps.remove(v)
			restore := func() { // v back on the same GPUs, in the same slot
				ps.applyOn(v, i, gv)
				l := len(ps.on[i]) - 1
				ps.on[i] = slices.Insert(ps.on[i][:l], j, ps.on[i][l])
			}
			if !gpufit.Fits(n, ru) {
				restore()
				continue
			}
			ps.apply(u, i)
			if w := ps.choose(v, rule, i, nil); w >= 0 {
				ps.apply(v, w)
				return true
			}
			if gain := ru.TotalMilli() - rv.TotalMilli(); gain > bestGain {
				bestGain, bestNode, bestVictim = gain, i, v
			}
			ps.remove(u)
			restore()
		}
	}
	if bestNode < 0 {
		return false
	}
	ps.remove(bestVictim)
	ps.apply(u, bestNode)
	return true
}

func (ps *packState) spec(i int) *NodeSpec { return &ps.in.nodes[i] }

func (ps *packState) result(by string) *Packing {
	p := &Packing{Milli: ps.milli, By: by, Placement: slices.Clone(ps.where), GPUs: make([][]int, len(ps.where))}
	for i := range ps.on {
		for _, pl := range ps.on[i] {
			p.GPUs[pl.pod] = slices.Clone(pl.gpus)
		}
	}
	for _, w := range ps.where {
		if w >= 0 {
			p.Placed++
		}
	}
	return p
}

// exactPack is the exhaustive optimum for tiny instances: every GPU pod
// (largest first) goes on each node where it fits, on each distinct choice
// of GPUs, or nowhere; branches that cannot beat the best are cut.
func exactPack(in *instance) *Packing {
	var order []int
	for k, p := range in.pods {
		if p.Req.GPUs > 0 {
			order = append(order, k)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(in.pods[b].Req.TotalMilli(), in.pods[a].Req.TotalMilli()) })
	rest := make([]int64, len(order)+1)
	for d := len(order) - 1; d >= 0; d-- {
		rest[d] = rest[d+1] + in.pods[order[d]].Req.TotalMilli()
	}
	ps := newPackState(in)
	best := ps.result("exact")
	var dfs func(d int)
	dfs = func(d int) {
		if ps.milli+rest[d] <= best.Milli {
			return
		}
		if d == len(order) {
			best = ps.result("exact")
			return
		}
		k := order[d]
		p := &in.pods[k]
		r := &p.Req
		for i := range ps.state {
			n := &ps.state[i]
			if !classAllowed(p.Classes, n.Class, r) || !gpufit.Fits(n, r) {
				continue
			}
			for _, g := range gpuChoices(n, r) {
				ps.applyOn(k, i, g)
				dfs(d + 1)
				ps.remove(k)
			}
		}
		dfs(d + 1)
	}
	dfs(0)
	return best
}

// gpuChoices lists the GPU index sets for r on n that can lead to different
// outcomes: for a fractional pod one GPU per distinct free share; for
// whole GPUs the first idle ones (idle GPUs are interchangeable).
func gpuChoices(n *gpufit.Node, r *gpufit.Request) [][]int {
	if !r.Shared() {
		var g []int
		for i := range n.GPUs {
			if len(g) < int(r.GPUs) && n.GPUs[i].FreeMilli >= r.Milli {
				g = append(g, i)
			}
		}
		return [][]int{g}
	}
	var out [][]int
	seen := map[int32]bool{}
	for i := range n.GPUs {
		f := n.GPUs[i].FreeMilli
		if f >= r.Milli && !seen[f] {
			seen[f] = true
			out = append(out, []int{i})
		}
	}
	return out
}

// item is what the bundle packer places in one go: a whole-GPU pod, or a
// bundle of fractional pods (same allowed models) that share one GPU.
type item struct {
	pods    []int
	req     gpufit.Request // the pod's, or the bundle's sums on one GPU
	classes []string
}

// bundles groups the fractional GPU pods, per set of allowed models, into
// GPUs by best-fit decreasing on their share (1-D bin packing that ignores
// CPU and memory), and returns them with the whole-GPU pods as items.
func (ps *packState) bundles() []item {
	in := ps.in
	var items []item
	groups := map[string][]int{}
	var keys []string
	for k, p := range in.pods {
		switch {
		case p.Req.GPUs == 0:
		case !p.Req.Shared():
			items = append(items, item{pods: []int{k}, req: p.Req, classes: p.Classes})
		default:
			key := strings.Join(p.Classes, "|")
			if _, ok := groups[key]; !ok {
				keys = append(keys, key)
			}
			groups[key] = append(groups[key], k)
		}
	}
	for _, key := range keys {
		g := groups[key]
		slices.SortStableFunc(g, func(a, b int) int {
			ra, rb := &in.pods[a].Req, &in.pods[b].Req
			if c := cmp.Compare(rb.Milli, ra.Milli); c != 0 {
				return c
			}
			return cmp.Compare(ra.CPUMilli, rb.CPUMilli)
		})
		// open[rem] lists the bins (indices into bins) with rem milli free.
		var open [gpufit.MilliPerGPU + 1][]int
		var bins []item
		for _, k := range g {
			r := &in.pods[k].Req
			b := -1
			for rem := r.Milli; rem <= gpufit.MilliPerGPU && b < 0; rem++ {
				if l := len(open[rem]); l > 0 {
					b = open[rem][l-1]
					open[rem] = open[rem][:l-1]
				}
			}
			if b < 0 {
				b = len(bins)
				bins = append(bins, item{req: gpufit.Request{GPUs: 1}, classes: in.pods[k].Classes})
			}
			it := &bins[b]
			it.pods = append(it.pods, k)
			it.req.Milli += r.Milli
			it.req.CPUMilli += r.CPUMilli
			it.req.MemMiB += r.MemMiB
			open[gpufit.MilliPerGPU-it.req.Milli] = append(open[gpufit.MilliPerGPU-it.req.Milli], b)
		}
		items = append(items, bins...)
	}
	return items
}

// packBundles places the items of bundles() largest first (order as in
// packOrders), each on the tightest node with room for all of it; the pods
// of an item that fits nowhere are then placed one by one, and CPU-only
// pods last.
func (ps *packState) packBundles(order string, rule packRule) {
	in := ps.in
	items := ps.bundles()
	var maxCPU, maxMem int64
	maxGPU := 1
	for _, n := range in.nodes {
		maxCPU, maxMem, maxGPU = max(maxCPU, n.CPUMilli), max(maxMem, n.MemMiB), max(maxGPU, n.GPUs)
	}
	key := func(r *gpufit.Request) [3]float64 {
		g, c, m := float64(r.TotalMilli()), float64(r.CPUMilli), float64(r.MemMiB)
		switch order {
		case "gpu-mem":
			return [3]float64{g, m, c}
		case "dominant":
			d := g / float64(maxGPU*gpufit.MilliPerGPU)
			if maxCPU > 0 {
				d = max(d, c/float64(maxCPU))
			}
			if maxMem > 0 {
				d = max(d, m/float64(maxMem))
			}
			return [3]float64{d, g, c}
		}
		return [3]float64{g, c, m}
	}
	slices.SortStableFunc(items, func(a, b item) int {
		ka, kb := key(&a.req), key(&b.req)
		for i := range ka {
			if c := cmp.Compare(kb[i], ka[i]); c != 0 {
				return c
			}
		}
		return 0
	})
	var left []int
	for _, it := range items {
		best, bestScore := -1, 0.0
		for i := range ps.state {
			n := &ps.state[i]
			if !classAllowed(it.classes, n.Class, &it.req) || !gpufit.Fits(n, &it.req) {
				continue
			}
			if s := ps.leftover(i, &it.req, rule); best < 0 || s < bestScore {
				best, bestScore = i, s
			}
		}
		if best < 0 {
			left = append(left, it.pods...)
			continue
		}
		if len(it.pods) == 1 {
			ps.apply(it.pods[0], best)
			continue
		}
		_, g := gpufit.BestFit().Score(&ps.state[best], &it.req, ps.buf[:0])
		gpu := g[0]
		for _, k := range it.pods {
			ps.applyOn(k, best, []int{gpu})
		}
	}
	slices.SortStableFunc(left, func(a, b int) int {
		return cmp.Compare(in.pods[b].Req.TotalMilli(), in.pods[a].Req.TotalMilli())
	})
	for _, k := range left {
		ps.place(k, rule, nil)
	}
	for k, p := range in.pods {
		if p.Req.GPUs == 0 {
			ps.place(k, rule, nil)
		}
	}
}

// fitsWithout reports whether u would fit on n once v (on GPUs gv) left.
func fitsWithout(n *gpufit.Node, v *gpufit.Request, gv []int, u *gpufit.Request) bool {
	if n.CPUMilliFree+v.CPUMilli < u.CPUMilli || n.MemMiBFree+v.MemMiB < u.MemMiB {
		return false
	}
	need := u.GPUs
	for i := range n.GPUs {
		free := n.GPUs[i].FreeMilli
		if slices.Contains(gv, i) {
			free += v.Milli
		}
		if free >= u.Milli {
			need--
		}
	}
	return need <= 0
}

// scoredPack places pods in order, each on the node a gpufit scorer rates
// highest (ties to the lowest index), with the scorer's GPU choice; scores
// are cached per pod shape and node version like the replay's.
func (ps *packState) scoredPack(order []int, sc gpufit.Scorer) {
	type entry struct {
		ver   uint32
		fits  bool
		score float64
		gpus  []int
	}
	cache := make([][]entry, len(ps.in.shapes))
	for _, k := range order {
		p := &ps.in.pods[k]
		s := ps.in.shapeOf[k]
		if s < 0 {
			ps.place(k, ruleBestFit, nil)
			continue
		}
		if cache[s] == nil {
			cache[s] = make([]entry, len(ps.state))
			for i := range cache[s] {
				cache[s][i].ver = ^uint32(0)
			}
		}
		best := -1
		for i := range ps.state {
			e := &cache[s][i]
			if e.ver != ps.ver[i] {
				n := &ps.state[i]
				e.ver = ps.ver[i]
				e.fits = classAllowed(p.Classes, n.Class, &p.Req) && gpufit.Fits(n, &p.Req)
				if e.fits {
					e.score, e.gpus = sc.Score(n, &p.Req, e.gpus[:0])
				}
			}
			if e.fits && (best < 0 || e.score > cache[s][best].score) {
				best = i
			}
		}
		if best >= 0 {
			ps.applyOn(k, best, slices.Clone(cache[s][best].gpus))
		}
	}
}
