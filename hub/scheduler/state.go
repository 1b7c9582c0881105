package scheduler

import (
	"slices"
	"sort"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// Bucket layout of a class index. Nodes are kept in buckets by how much whole
// GPU room they have, so that candidate retrieval is best-fit by construction:
// a request scans the tightest bucket that can serve it first, which keeps
// whole GPUs and whole nodes free for later large requests.
const (
	bucketNoGPU   = 0 // no free GPU capacity at all (CPU-only work still fits)
	bucketPartial = 1 // some GPU has a fraction free, none is wholly free
	bucketWhole   = 2 // bucketWhole+k: k GPUs are wholly free (k >= 1)
)

// clusterState is the core's working copy of one cluster for one Plan call.
// Nodes are copied out of the snapshot, so the core can place, undo and
// what-if without touching the caller's data.
type clusterState struct {
	// hold is the backfill bookkeeping of its reservations (reserve.go).
	hold    *holdState
	src     *Cluster
	nodes   []gpufit.Node
	meta    []nodeMeta
	classes []*classIndex // sorted by class name
	byName  map[string]int32
	doms    [2][]domain // racks, NVLink domains; built on first use
	// reserved marks nodes held for a large gang in this cycle (see reserve.go).
	reservedBy    []string // workload id per node, "" when free
	reservedCount int
	// placing is the workload being placed now: its own reservation is no
	// obstacle to it.
	placing string
	// mig lists the MIG profiles the cluster's GPUs advertise, smallest
	// first (see mig.go); nil when it has no MIG GPU.
	mig []gpufit.MIGProfile
	// ver counts each node's changes (from 1), and memo keeps, per
	// request shape, each node's score at the version it was made
	// (placer.score).
	ver  []uint32
	memo map[gpufit.Request][]memoScore
	// gpuArena holds every node's GPUs, in node order.
	gpuArena []gpufit.GPU
}

// memoScore is one node's remembered score for one request shape, valid
// while ver matches the node's version.
type memoScore struct {
	ver   uint32
	ngpu  uint8
	gpus  [8]uint8
	score float64
}

// scoreMemo returns the memo of r's shape, made on first use.
func (cs *clusterState) scoreMemo(r *gpufit.Request) []memoScore {
	if cs.memo == nil {
		cs.memo = map[gpufit.Request][]memoScore{}
	}
	m, ok := cs.memo[*r]
	if !ok {
		m = make([]memoScore, len(cs.nodes))
		cs.memo[*r] = m
	}
	return m
}

type nodeMeta struct {
	class   *classIndex
	bucket  int32
	partial bool // listed in class.partial
}

// classIndex indexes the nodes of one accelerator class in one cluster.
// Every list is kept sorted by node index (the snapshot's node order), so
// candidates are found in a stable order and ties go to the first node:
// load consolidates on the same nodes instead of spreading over whichever
// a swap-remove left first, which keeps the other nodes whole (on the
// OpenB trace, unordered buckets cost BestFit six points of allocation).
type classIndex struct {
	class   string
	buckets [][]int32
	// partial lists the nodes with a partly used GPU: the first place to put
	// a fraction, so that whole GPUs stay whole.
	partial []int32
	// freeMilli is the class's total free GPU capacity, for fast rejection.
	freeMilli int64
	maxGPUs   int32
}

func newClusterState(c *Cluster, reuse *clusterState) *clusterState {
	cs := reuse
	if cs == nil {
		cs = &clusterState{}
	}
	// Everything starts afresh; only the buffers' memory is kept.
	old := *cs
	*cs = clusterState{src: c, memo: old.memo}
	clear(cs.memo)
	cs.nodes = resize(old.nodes, len(c.Nodes))
	cs.meta = resize(old.meta, len(c.Nodes))
	cs.ver = resize(old.ver, len(c.Nodes))
	total := 0
	for i := range c.Nodes {
		total += len(c.Nodes[i].Res.GPUs)
	}
	cs.gpuArena = resize(old.gpuArena, total)
	arena := cs.gpuArena
	spare := old.classes // class indexes to reuse
	for i := range c.Nodes {
		src := &c.Nodes[i].Res
		n := copy(arena, src.GPUs)
		cs.nodes[i] = *src
		cs.nodes[i].GPUs = arena[:n:n]
		arena = arena[n:]
		if len(src.MIG) > 0 {
			cs.nodes[i].CloneMIG()
			cs.mig = src.MIGProfiles(cs.mig)
		}
		ci := cs.classNamed(src.Class)
		if ci == nil {
			if k := len(spare); k > 0 {
				ci, spare = spare[k-1], spare[:k-1]
				*ci = classIndex{class: src.Class, buckets: ci.buckets, partial: ci.partial[:0]}
			} else {
				ci = &classIndex{class: src.Class}
			}
			cs.classes = append(cs.classes, ci)
		}
		if g := int32(len(src.GPUs)); g > ci.maxGPUs {
			ci.maxGPUs = g
		}
		cs.meta[i] = nodeMeta{class: ci}
	}
	sort.Slice(cs.classes, func(a, b int) bool { return cs.classes[a].class < cs.classes[b].class })
	sort.Slice(cs.mig, func(a, b int) bool { return cs.mig[a].Less(cs.mig[b]) })
	for _, ci := range cs.classes {
		ci.buckets = resize(ci.buckets, bucketWhole+int(ci.maxGPUs)+1)
		for k := range ci.buckets {
			ci.buckets[k] = ci.buckets[k][:0]
		}
	}
	for i := range cs.nodes {
		cs.ver[i] = 1
		cs.reindex(int32(i), true)
		cs.meta[i].class.freeMilli += freeMilli(&cs.nodes[i])
	}
	return cs
}

// classNamed is the class index being built for class, or nil (a linear
// search: a cluster has a handful of classes).
func (cs *clusterState) classNamed(class string) *classIndex {
	for _, ci := range cs.classes {
		if ci.class == class {
			return ci
		}
	}
	return nil
}

// resize returns s with length n, reusing its memory when it is large
// enough; the elements are not cleared.
func resize[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

// nodeIndex finds a node by name (built on first use: only what-ifs need it).
func (cs *clusterState) nodeIndex(name string) (int32, bool) {
	if cs.byName == nil {
		cs.byName = make(map[string]int32, len(cs.nodes))
		for i := range cs.src.Nodes {
			cs.byName[cs.src.Nodes[i].Name] = int32(i)
		}
	}
	i, ok := cs.byName[name]
	return i, ok
}

// reindex moves node i into the bucket its free capacity now belongs to.
func (cs *clusterState) reindex(i int32, fresh bool) {
	m := &cs.meta[i]
	ci := m.class
	b := wholeBucket(&cs.nodes[i])
	cs.reindexPartial(i)
	if !fresh {
		if b == m.bucket {
			return
		}
		ci.buckets[m.bucket] = sortedRemove(ci.buckets[m.bucket], i)
	}
	m.bucket = b
	ci.buckets[b] = sortedInsert(ci.buckets[b], i)
}

// reindexPartial keeps node i in class.partial exactly while it has a GPU
// that is partly used.
func (cs *clusterState) reindexPartial(i int32) {
	m := &cs.meta[i]
	ci := m.class
	has := false
	for _, g := range cs.nodes[i].GPUs {
		if g.FreeMilli > 0 && g.FreeMilli < gpufit.MilliPerGPU {
			has = true
			break
		}
	}
	switch {
	case has && !m.partial:
		m.partial = true
		ci.partial = sortedInsert(ci.partial, i)
	case !has && m.partial:
		m.partial = false
		ci.partial = sortedRemove(ci.partial, i)
	}
}

// sortedInsert adds v to the ascending list s (v is not in it). Appending
// in index order, as newClusterState does, costs no move.
func sortedInsert(s []int32, v int32) []int32 {
	if n := len(s); n == 0 || s[n-1] < v {
		return append(s, v)
	}
	k, _ := slices.BinarySearch(s, v)
	return slices.Insert(s, k, v)
}

// sortedRemove deletes v from the ascending list s (v is in it).
func sortedRemove(s []int32, v int32) []int32 {
	k, ok := slices.BinarySearch(s, v)
	if !ok {
		return s
	}
	return slices.Delete(s, k, k+1)
}

// wholeBucket is the bucket for a node: bucketNoGPU, bucketPartial, or
// bucketWhole+k-1 for k wholly free GPUs.
func wholeBucket(n *gpufit.Node) int32 {
	whole, partial := int32(0), false
	for i := range n.GPUs {
		switch f := n.GPUs[i].FreeMilli; {
		case f >= gpufit.MilliPerGPU:
			whole++
		case f > 0:
			partial = true
		}
	}
	switch {
	case whole > 0:
		return bucketWhole + whole - 1
	case partial:
		return bucketPartial
	}
	return bucketNoGPU
}

func freeMilli(n *gpufit.Node) int64 {
	var s int64
	for i := range n.GPUs {
		s += int64(n.GPUs[i].FreeMilli)
	}
	return s
}

// apply places r on node i, keeping the index and totals in step.
func (cs *clusterState) apply(i int32, r *gpufit.Request, gpus []int) {
	n := &cs.nodes[i]
	before := freeMilli(n)
	cs.ver[i]++
	n.Apply(r, gpus)
	cs.meta[i].class.freeMilli += freeMilli(n) - before
	cs.reindex(i, false)
}

// undo is the exact inverse of apply.
func (cs *clusterState) undo(i int32, r *gpufit.Request, gpus []int) {
	n := &cs.nodes[i]
	before := freeMilli(n)
	cs.ver[i]++
	n.Undo(r, gpus)
	cs.meta[i].class.freeMilli += freeMilli(n) - before
	cs.reindex(i, false)
}

// classFor returns the class index, or nil when the cluster lacks the class.
func (cs *clusterState) classFor(class string) *classIndex {
	lo, hi := 0, len(cs.classes)
	for lo < hi {
		mid := (lo + hi) / 2
		if cs.classes[mid].class < class {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(cs.classes) && cs.classes[lo].class == class {
		return cs.classes[lo]
	}
	return nil
}

// firstBucket is the tightest bucket that can possibly serve r.
func firstBucket(r *gpufit.Request) int {
	switch {
	case r.GPUs == 0:
		return bucketNoGPU
	case r.Milli < gpufit.MilliPerGPU:
		return bucketPartial
	default:
		return bucketWhole + int(r.GPUs) - 1
	}
}
