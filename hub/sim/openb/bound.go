package openb

// The limit of GPU allocation at an arrived load (issue 11, "Know the
// limit").
//
// At arrived load p the replay has shown the scheduler a prefix of the
// arrival order. Whatever a policy did, online or not, what it holds then is
// a packing of a subset of that prefix: each placed pod on one node, within
// the node's CPU, memory and GPUs, on a GPU model the pod allows. So
//
//	online policy <= offline optimum <= UpperBound
//
// and OfflinePack, a real packing with full knowledge of the prefix, is a
// lower bound on the offline optimum. Limit computes both for one seed.
//
// # Why UpperBound is valid
//
// Group the prefix's GPU pods into shapes s (request and allowed models;
// n_s pods each) and the nodes into types t (model, CPU, memory, GPU count;
// N_t nodes each). Take any feasible packing and let x_st be the number of
// pods of shape s it puts on nodes of type t. Then x satisfies:
//
//  1. sum_t x_st <= n_s (a pod is placed at most once);
//  2. x_st = 0 unless one pod of s fits an empty node of t (model allowed,
//     CPU, memory and GPU count) — such pairs get no variable;
//  3. per type, CPU: sum_s cpu_s x_st <= N_t * cpu_t, and the same for
//     memory and for GPU share (sum of gpus_s*milli_s <= N_t*gpus_t*1000),
//     because these sums add up node by node;
//  4. per type and for each dual feasible function u of bin packing (u maps
//     a share in [0,1] GPU to [0,1] such that shares summing to <= 1 have
//     images summing to <= 1): sum over whole-GPU shapes of gpus_s*x_st
//     plus sum over fractional shapes of u(milli_s/1000)*x_st <=
//     N_t*gpus_t, because a GPU holds one whole-GPU pod (u(1) = 1) or
//     fractional pods whose shares sum to <= 1, and the sum adds up GPU by
//     GPU. Two families are used (Fekete and Schepers, "New classes of
//     fast lower bounds for bin packing problems", Math. Prog. 2001):
//     u_k(x) = x when (k+1)x is an integer, else floor((k+1)x)/k, for
//     k = 1..10; and u^e(x) = 1 for x > 1-e, x for e <= x <= 1-e, 0 for
//     x < e, for e = 0.10, 0.15, ..., 0.50. (u_k: if the shares with
//     (k+1)x integer sum to a/(k+1), the others' floors sum to at most
//     k-a, so the images sum to <= (k-a)/k + a/(k+1) <= 1. u^e: a share
//     above 1-e leaves room only for shares below e, which count 0.)
//     These are what stop the LP from filling the 190-milli gap beside an
//     810-milli pod with slices of larger pods.
//
// The allocation is sum_st gpus_s*milli_s*x_st, so its maximum over the
// linear relaxation of 1-4 bounds every packing. CPU-only pods are left
// out: dropping pods from an instance can only raise its optimum. The LP is
// solved in floating point, but the bound is not read off the primal: the
// duals y are clamped to >= 0 and each shape's dual is raised until every
// column's reduced cost is <= 0 (every column has a 1 in its shape's row).
// Such a y is dual feasible, so by weak duality b·y bounds the LP, and
// hence every packing, whatever the round-off in the simplex.
//
// What the bound does not see: integrality on one node (the LP may split a
// node's CPU among fractions of pods) and which GPUs of a node the
// fractional pods share beyond the counting cuts. On the OpenB lists the
// gap between bound and packing is what remains of those.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// LimitConfig is one seed of the limit computation.
type LimitConfig struct {
	Seed int64
	Tune float64 // as Config.Tune; <= 0 keeps the list as is
	Pct  int     // arrived load in percent, 1..MaxArrivalPct; 0 = 100
}

// Limit is what any online policy could reach at one arrived load of one
// seed, from both sides.
type Limit struct {
	Seed          int64 `json:"seed"`
	Pct           int   `json:"arrived_pct"`
	Pods          int   `json:"pods"`     // arrived pods up to the load (the prefix)
	GPUPods       int   `json:"gpu_pods"` // of which request a GPU
	CapacityMilli int64 `json:"capacity_milli"`
	ArrivedMilli  int64 `json:"arrived_milli"` // GPU request of the prefix
	// BoundMilli is a provable upper bound on the GPU milli that any
	// packing of the prefix allocates (see UpperBound).
	BoundMilli int64 `json:"bound_milli"`
	// PackedMilli is the best offline packing found (OfflinePack), by the
	// heuristic PackedBy; it places PackedPods pods.
	PackedMilli int64  `json:"packed_milli"`
	PackedBy    string `json:"packed_by"`
	PackedPods  int    `json:"packed_pods"`
}

func (l *Limit) pct(v int64) float64 { return float64(v) / float64(l.CapacityMilli) * 100 }

// ArrivedPct is the prefix's GPU request as a percentage of capacity.
func (l *Limit) ArrivedPct() float64 { return l.pct(l.ArrivedMilli) }

// BoundPct is BoundMilli as a percentage of capacity.
func (l *Limit) BoundPct() float64 { return l.pct(l.BoundMilli) }

// PackedPct is PackedMilli as a percentage of capacity.
func (l *Limit) PackedPct() float64 { return l.pct(l.PackedMilli) }

// ComputeLimit takes the seed's arrivals exactly as Replay does (same
// Arrivals, same tune), keeps the prefix up to cfg.Pct arrived load
// (ArrivedPrefix) and bounds the allocation of any packing of it from above
// (UpperBound) and below (OfflinePack).
func ComputeLimit(ctx context.Context, nodes []NodeSpec, pods []Pod, cfg LimitConfig) (*Limit, error) {
	if cfg.Pct == 0 {
		cfg.Pct = 100
	}
	if cfg.Pct < 1 || cfg.Pct > MaxArrivalPct {
		return nil, fmt.Errorf("openb: limit: arrived pct must be in 1..%d, got %d", MaxArrivalPct, cfg.Pct)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("openb: nodes: empty node list")
	}
	sorted := slices.Clone(nodes)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	arrivals, _ := Arrivals(sorted, pods, cfg.Seed, cfg.Tune)
	var capMilli int64
	for _, n := range sorted {
		capMilli += int64(n.GPUs) * gpufit.MilliPerGPU
	}
	prefix := ArrivedPrefix(arrivals, capMilli, cfg.Pct)
	l := &Limit{Seed: cfg.Seed, Pct: cfg.Pct, Pods: len(prefix), CapacityMilli: capMilli}
	for _, p := range prefix {
		l.ArrivedMilli += p.Req.TotalMilli()
		if p.Req.GPUs > 0 {
			l.GPUPods++
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("openb: limit: %w", err)
	}
	ub, err := upperBound(sorted, prefix)
	if err != nil {
		return nil, err
	}
	l.BoundMilli = ub.milli
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("openb: limit: %w", err)
	}
	pk := offlinePack(sorted, prefix, ub)
	l.PackedMilli, l.PackedBy, l.PackedPods = pk.Milli, pk.By, pk.Placed
	if l.PackedMilli > l.BoundMilli {
		// Would mean the bound's argument or its code is wrong.
		return nil, fmt.Errorf("openb: limit: packing %d milli exceeds the bound %d (a bug)", l.PackedMilli, l.BoundMilli)
	}
	return l, nil
}

// ArrivedPrefix returns the arrivals up to arrived load pct: the longest
// prefix whose cumulative GPU request, rounded half-to-even to a whole
// percent of capMilli as curve() rounds it, is at most pct. Replay's
// Curve[pct] averages samples taken within that prefix (where no sample
// rounds to pct, curve() falls back to pct±1 and the prefix extends to
// pct+1), and a placed pod stays, so every such sample's allocation, and
// their mean, is at most what some packing of the prefix allocates.
func ArrivedPrefix(arrivals []Pod, capMilli int64, pct int) []Pod {
	if capMilli <= 0 {
		return nil
	}
	round := func(cum int64) float64 { return math.RoundToEven(float64(cum) / float64(capMilli) * 100) }
	lim := float64(pct)
	var cum int64
	exact := round(0) == lim
	for _, p := range arrivals {
		cum += p.Req.TotalMilli()
		if round(cum) == lim {
			exact = true
		}
	}
	if !exact {
		lim++
	}
	cum = 0
	end := 0
	for k, p := range arrivals {
		cum += p.Req.TotalMilli()
		if round(cum) > lim {
			break
		}
		end = k + 1
	}
	return arrivals[:end]
}

// instance groups an OpenB packing problem into node types and pod shapes.
type instance struct {
	nodes   []NodeSpec
	pods    []Pod
	types   []nodeType
	typeOf  []int // per node
	shapes  []podShape
	shapeOf []int // per pod; -1 for CPU-only pods
}

type nodeType struct {
	model       string
	cpu, mem    int64
	gpus, count int
}

type podShape struct {
	req     gpufit.Request
	classes []string
	count   int
}

func newInstance(nodes []NodeSpec, pods []Pod) *instance {
	in := &instance{nodes: nodes, pods: pods, typeOf: make([]int, len(nodes)), shapeOf: make([]int, len(pods))}
	tidx := map[nodeType]int{}
	for i, n := range nodes {
		k := nodeType{model: n.Model, cpu: n.CPUMilli, mem: n.MemMiB, gpus: n.GPUs}
		t, ok := tidx[k]
		if !ok {
			t = len(in.types)
			tidx[k] = t
			in.types = append(in.types, k)
		}
		in.types[t].count++
		in.typeOf[i] = t
	}
	sidx := map[shapeKey]int{}
	for i, p := range pods {
		if p.Req.GPUs == 0 {
			in.shapeOf[i] = -1
			continue
		}
		k := shapeKey{p.Req, strings.Join(p.Classes, "|")}
		s, ok := sidx[k]
		if !ok {
			s = len(in.shapes)
			sidx[k] = s
			in.shapes = append(in.shapes, podShape{req: p.Req, classes: p.Classes})
		}
		in.shapes[s].count++
		in.shapeOf[i] = s
	}
	return in
}

// admits reports whether one pod of shape s fits an empty node of type t.
func (t *nodeType) admits(s *podShape) bool {
	r := &s.req
	return classAllowed(s.classes, t.model, r) && r.CPUMilli <= t.cpu && r.MemMiB <= t.mem && int(r.GPUs) <= t.gpus
}

// bound is UpperBound's result: the bound and the LP's fractional
// assignment of shapes to node types (quota[s][t]), which guides packing.
type bound struct {
	milli int64
	lp    float64 // the simplex's own objective, in milli (for diagnostics)
	quota [][]float64
	in    *instance
}

// UpperBound returns a provable upper bound on the GPU milli that any
// feasible packing of pods onto nodes allocates (the argument is at the top
// of bound.go). It never exceeds the pods' total GPU request.
func UpperBound(nodes []NodeSpec, pods []Pod) (int64, error) {
	b, err := upperBound(nodes, pods)
	if err != nil {
		return 0, err
	}
	return b.milli, nil
}

// dffs are the dual feasible functions of the GPU cuts (item 4 above),
// each mapping a fractional share in milli to its image in GPUs.
var dffs = func() []func(milli int32) float64 {
	var out []func(int32) float64
	for k := 1; k <= 10; k++ {
		out = append(out, func(m int32) float64 {
			if (k+1)*int(m)%gpufit.MilliPerGPU == 0 {
				return float64(m) / gpufit.MilliPerGPU
			}
			return float64((k+1)*int(m)/gpufit.MilliPerGPU) / float64(k)
		})
	}
	for e := int32(100); e <= 500; e += 50 {
		out = append(out, func(m int32) float64 {
			switch {
			case m > gpufit.MilliPerGPU-e:
				return 1
			case m >= e:
				return float64(m) / gpufit.MilliPerGPU
			}
			return 0
		})
	}
	return out
}()

// Row families per node type: CPU, memory, GPU share, and one GPU cut per
// dual feasible function.
var rowsPerType = 3 + len(dffs)

func upperBound(nodes []NodeSpec, pods []Pod) (*bound, error) {
	in := newInstance(nodes, pods)
	S, T := len(in.shapes), len(in.types)
	var total int64
	for _, p := range pods {
		total += p.Req.TotalMilli()
	}
	type col struct{ s, t int }
	var cols []col
	for s := range in.shapes {
		for t := range in.types {
			if in.types[t].admits(&in.shapes[s]) {
				cols = append(cols, col{s, t})
			}
		}
	}
	b := &bound{in: in, quota: make([][]float64, S)}
	for s := range b.quota {
		b.quota[s] = make([]float64, T)
	}
	if len(cols) == 0 {
		return b, nil
	}
	m, n := S+rowsPerType*T, len(cols)
	A := make([][]float64, m)
	for i := range A {
		A[i] = make([]float64, n)
	}
	rhs := make([]float64, m)
	obj := make([]float64, n)
	for s := range in.shapes {
		rhs[s] = float64(in.shapes[s].count)
	}
	for t, ty := range in.types {
		base := S + rowsPerType*t
		g := float64(ty.count * ty.gpus)
		// CPU and memory rows are scaled by one node's capacity; a type
		// with none of it admits only shapes that need none (all-zero row).
		rhs[base+0], rhs[base+1] = float64(ty.count), float64(ty.count)
		for k := 2; k < rowsPerType; k++ {
			rhs[base+k] = g
		}
	}
	for j, c := range cols {
		sh, ty := &in.shapes[c.s], &in.types[c.t]
		r := &sh.req
		base := S + rowsPerType*c.t
		gpus := float64(r.TotalMilli()) / gpufit.MilliPerGPU
		obj[j] = gpus
		A[c.s][j] = 1
		if ty.cpu > 0 {
			A[base+0][j] = float64(r.CPUMilli) / float64(ty.cpu)
		}
		if ty.mem > 0 {
			A[base+1][j] = float64(r.MemMiB) / float64(ty.mem)
		}
		A[base+2][j] = gpus
		for k, u := range dffs {
			if r.Shared() {
				A[base+3+k][j] = u(r.Milli)
			} else {
				A[base+3+k][j] = float64(r.GPUs)
			}
		}
	}
	x, y, lpObj, err := lpMax(A, rhs, obj)
	if err != nil {
		return nil, fmt.Errorf("openb: upper bound: %w", err)
	}
	for j, c := range cols {
		b.quota[c.s][c.t] += x[j]
	}
	b.lp = lpObj * gpufit.MilliPerGPU
	ub := safeDualBound(A, rhs, obj, y, func(j int) int { return cols[j].s })
	milli := int64(math.Floor(ub*gpufit.MilliPerGPU*(1+1e-9) + 1e-6))
	b.milli = min(milli, total)
	return b, nil
}

// safeDualBound turns approximate duals y of max obj·x, A x <= rhs, x >= 0
// into a valid upper bound: y is clamped to >= 0 and, for every column j
// whose reduced cost obj_j - A_j·y is still positive, the dual of row
// unit(j) (where A[unit(j)][j] == 1) is raised by that amount. The result
// is dual feasible, so rhs·y >= the LP optimum (weak duality).
func safeDualBound(A [][]float64, rhs, obj, y []float64, unit func(j int) int) float64 {
	y = slices.Clone(y)
	for i := range y {
		y[i] = math.Max(0, y[i])
	}
	raise := make([]float64, len(y))
	for j := range obj {
		var ay float64
		for i := range A {
			ay += A[i][j] * y[i]
		}
		if r := obj[j] - ay; r > 0 {
			u := unit(j)
			raise[u] = math.Max(raise[u], r*(1+1e-12))
		}
	}
	var ub float64
	for i := range y {
		ub += rhs[i] * (y[i] + raise[i])
	}
	return ub
}
