package gpufit

import (
	"math"
	"slices"
	"sort"
	"strings"
)

// Shape is one pod shape of a target workload: what FGD calls a "typical
// pod". Memory is not part of a shape, as in the reference simulator.
type Shape struct {
	CPUMilli int64
	GPUs     int32
	Milli    int32    // per-GPU share; 0 for CPU-only shapes
	Classes  []string // allowed accelerator classes; empty = any
	Weight   float64  // popularity (count or probability); >= 0
	// MemMiB is the shape's host memory need. It is not part of a shape's
	// identity: merged shapes keep the weighted mean. FGD ignores it (as the
	// reference does); Meridian uses it.
	MemMiB int64
}

// mergeInto adds s into m, keeping the weighted mean memory.
func mergeInto(m *Shape, s Shape) {
	tw := m.Weight + s.Weight
	if tw > 0 {
		m.MemMiB = int64((float64(m.MemMiB)*m.Weight + float64(s.MemMiB)*s.Weight) / tw)
	}
	m.Weight = tw
}

func (s *Shape) key() shapeKey {
	return shapeKey{0, s.CPUMilli, s.GPUs, s.Milli, strings.Join(s.Classes, "|")}
}

type shapeKey struct {
	mem     int64
	cpu     int64
	gpus    int32
	milli   int32
	classes string
}

// TargetWorkload is the popularity-weighted distribution of pod shapes that
// FGD measures fragmentation against. It is immutable after construction and
// safe for concurrent use. The zero value is an empty workload (no
// fragmentation anywhere).
type TargetWorkload struct {
	shapes  []Shape // merged, weights normalised to sum 1
	totalW  float64 // sum of weights (1, or 0 when empty)
	groups  []fragGroup
	cpuOnly float64 // weight of CPU-only shapes
	// pressure[c] is the expected GPU demand (whole GPUs per pod) of shapes
	// that are constrained to a set of classes containing c, shared equally
	// among the classes of each shape.
	pressure map[string]float64
}

// fragGroup gathers the GPU shapes that share (milli, gpus, classes); they
// differ only by CPU, so a node's fragmentation for the whole group follows
// from one GPU scan and a CPU prefix sum.
type fragGroup struct {
	milli, gpus int32
	classes     []string // nil = any
	cpu         []int64  // ascending CPU thresholds
	cumW        []float64
	mem         []int64 // memory need of each shape, in cpu order
	w           []float64
}

// NewTargetWorkload builds a target workload from shapes. Identical shapes
// (same CPU, GPUs, Milli and Classes) are merged; weights are normalised to
// sum to 1. Shapes with a non-positive or non-finite weight are dropped.
func NewTargetWorkload(shapes []Shape) TargetWorkload {
	idx := map[shapeKey]int{}
	var merged []Shape
	var total float64
	for _, s := range shapes {
		if !(s.Weight > 0) || math.IsInf(s.Weight, 0) {
			continue
		}
		k := s.key()
		k.mem = s.MemMiB
		if i, ok := idx[k]; ok {
			mergeInto(&merged[i], s)
		} else {
			idx[k] = len(merged)
			c := s
			c.Classes = slices.Clone(s.Classes)
			merged = append(merged, c)
		}
		total += s.Weight
	}
	tw := TargetWorkload{shapes: merged}
	if total == 0 {
		return tw
	}
	gidx := map[shapeKey]int{}
	for i := range merged {
		merged[i].Weight /= total
		s := &merged[i]
		tw.totalW += s.Weight
		if s.Milli == 0 || s.GPUs == 0 {
			tw.cpuOnly += s.Weight
			continue
		}
		gk := shapeKey{0, 0, s.GPUs, s.Milli, strings.Join(s.Classes, "|")}
		gi, ok := gidx[gk]
		if !ok {
			gi = len(tw.groups)
			gidx[gk] = gi
			var cls []string
			if len(s.Classes) > 0 {
				cls = s.Classes
			}
			tw.groups = append(tw.groups, fragGroup{milli: s.Milli, gpus: s.GPUs, classes: cls})
		}
		if len(s.Classes) > 0 {
			if tw.pressure == nil {
				tw.pressure = map[string]float64{}
			}
			for _, c := range s.Classes {
				tw.pressure[c] += s.Weight * float64(int64(s.GPUs)*int64(s.Milli)) / MilliPerGPU / float64(len(s.Classes))
			}
		}
		g := &tw.groups[gi]
		g.cpu = append(g.cpu, s.CPUMilli)
		g.cumW = append(g.cumW, s.Weight)
		g.mem = append(g.mem, s.MemMiB)
	}
	for gi := range tw.groups {
		g := &tw.groups[gi]
		order := make([]int, len(g.cpu))
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return g.cpu[order[a]] < g.cpu[order[b]] })
		cpu := make([]int64, len(order))
		cum := make([]float64, len(order))
		mem := make([]int64, len(order))
		w := make([]float64, len(order))
		var acc float64
		for i, o := range order {
			cpu[i] = g.cpu[o]
			mem[i] = g.mem[o]
			w[i] = g.cumW[o]
			acc += g.cumW[o]
			cum[i] = acc
		}
		g.cpu, g.cumW, g.mem, g.w = cpu, cum, mem, w
	}
	return tw
}

// TargetFromRequests builds a target workload from a pod list: each request
// counts with weights[i] (1 when weights is nil). Memory and GPU memory are
// not part of a shape; requests carry no class constraint.
func TargetFromRequests(reqs []Request, weights []float64) TargetWorkload {
	shapes := make([]Shape, len(reqs))
	for i := range reqs {
		w := 1.0
		if weights != nil && i < len(weights) {
			w = weights[i]
		}
		shapes[i] = Shape{CPUMilli: reqs[i].CPUMilli, GPUs: reqs[i].GPUs, Milli: reqs[i].Milli, Weight: w}
	}
	return NewTargetWorkload(shapes)
}

// Shapes returns a copy of the workload's merged shapes with normalised
// weights.
func (tw *TargetWorkload) Shapes() []Shape {
	out := make([]Shape, len(tw.shapes))
	for i, s := range tw.shapes {
		out[i] = s
		out[i].Classes = slices.Clone(s.Classes)
	}
	return out
}

// TypicalShapes keeps the most popular shapes that together cover at least
// the fraction popularity (0..1] of the total weight, as the reference
// simulator's GetTypicalPods does with its default threshold of 0.95: shapes
// are merged, ordered by weight (descending; ties by larger CPU, Milli, GPUs,
// then class string), and taken one by one until the covered weight reaches
// the threshold. Weights are returned unnormalised.
func TypicalShapes(shapes []Shape, popularity float64) []Shape {
	idx := map[shapeKey]int{}
	var merged []Shape
	var total float64
	for _, s := range shapes {
		if !(s.Weight > 0) {
			continue
		}
		k := s.key()
		if i, ok := idx[k]; ok {
			mergeInto(&merged[i], s)
		} else {
			idx[k] = len(merged)
			c := s
			c.Classes = slices.Clone(s.Classes)
			merged = append(merged, c)
		}
		total += s.Weight
	}
	sort.Slice(merged, func(a, b int) bool {
		x, y := &merged[a], &merged[b]
		if x.Weight != y.Weight {
			return x.Weight > y.Weight
		}
		if x.CPUMilli != y.CPUMilli {
			return x.CPUMilli > y.CPUMilli
		}
		if x.Milli != y.Milli {
			return x.Milli > y.Milli
		}
		if x.GPUs != y.GPUs {
			return x.GPUs > y.GPUs
		}
		return strings.Join(x.Classes, "|") > strings.Join(y.Classes, "|")
	})
	if popularity <= 0 || popularity > 1 {
		popularity = 1
	}
	want := popularity * total
	var cum float64
	i := 0
	for i < len(merged) && cum < want {
		cum += merged[i].Weight
		i++
	}
	return merged[:i]
}

// accessible reports whether a node of class cls may host a shape with the
// allowed classes (nil = any). A node without a class (a CPU node) hosts only
// unconstrained shapes.
func accessible(classes []string, cls string) bool {
	if classes == nil {
		return true
	}
	if cls == "" {
		return false
	}
	for _, c := range classes {
		if c == cls {
			return true
		}
	}
	return false
}

// frag is FGD's fragmentation of a node state (class, free CPU, per-GPU free
// milli): the expected amount of free GPU share that a pod drawn from the
// target workload could not use.
//
// For each shape with probability p, the whole free share F counts as
// fragment unless the node can host the shape (class allowed, enough CPU, and
// GPUs distinct GPUs with >= Milli free each), in which case only the free
// share of GPUs too small for the shape counts. CPU-only shapes count F in
// full, as in the reference.
func (tw *TargetWorkload) frag(cls string, cpuFree int64, free []int32) float64 {
	return tw.fragMem(cls, cpuFree, -1, free)
}

// fragMem is frag with a host-memory check as well: a shape is hostable only
// if memFree >= its MemMiB. memFree < 0 disables the check (FGD).
func (tw *TargetWorkload) fragMem(cls string, cpuFree, memFree int64, free []int32) float64 {
	var total int64
	for _, f := range free {
		total += int64(f)
	}
	if total == 0 || tw.totalW == 0 {
		return 0
	}
	ft := float64(total)
	out := ft * tw.totalW
	for gi := range tw.groups {
		g := &tw.groups[gi]
		if !accessible(g.classes, cls) {
			continue
		}
		var count int32
		var small int64
		for _, f := range free {
			if f >= g.milli {
				count++
			} else {
				small += int64(f)
			}
		}
		if count < g.gpus {
			continue
		}
		// weight of this group's shapes with CPU <= cpuFree
		k := sort.Search(len(g.cpu), func(i int) bool { return g.cpu[i] > cpuFree })
		if k == 0 {
			continue
		}
		hw := g.cumW[k-1]
		if memFree >= 0 {
			hw = 0
			for i := 0; i < k; i++ {
				if g.mem[i] <= memFree {
					hw += g.w[i]
				}
			}
		}
		out -= hw * (ft - float64(small))
	}
	return out
}

// maxStackGPUs bounds the per-call scratch buffer that keeps scoring
// allocation-free; nodes with more GPUs fall back to a heap buffer.
const maxStackGPUs = 16

// Fragmentation is FGD's node fragmentation measure: the expected free
// milli-GPU on n that a pod drawn from dist could not use (see the package
// design note). It is 0 for a node without free GPU share.
func Fragmentation(n *Node, dist TargetWorkload) float64 {
	var buf [maxStackGPUs]int32
	free := freeMilli(n, buf[:0])
	return dist.frag(n.Class, n.CPUMilliFree, free)
}

func freeMilli(n *Node, buf []int32) []int32 {
	if len(n.GPUs) > cap(buf) {
		buf = make([]int32, 0, len(n.GPUs))
	}
	for i := range n.GPUs {
		buf = append(buf, n.GPUs[i].FreeMilli)
	}
	return buf
}

// Empty reports whether the workload has no shape (no fragmentation
// anywhere).
func (tw *TargetWorkload) Empty() bool { return tw.totalW == 0 }
