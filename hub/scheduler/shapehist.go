package scheduler

import (
	"math"
	"sort"
	"strings"
	"time"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// ShapeHistory is a decayed histogram of the pod shapes submitted in the
// past: the target workload that fragmentation-aware scoring (FGD and
// Meridian) measures against, learned the way a live hub can, from past
// arrivals only. A shape submitted halfLife ago counts half as much as one
// submitted now.
//
// It is pure: time comes in as an argument, and Target's output depends
// only on what was observed and when, never on map order. It is not safe
// for concurrent use; the owner (the dispatch loop, a replay) feeds it and
// hands Decide the immutable TargetWorkload it returns.
type ShapeHistory struct {
	halfLife  time.Duration
	maxShapes int
	// Weights are stored scaled by 2^((t-origin)/halfLife), so an
	// observation costs O(1) and nothing decays eagerly; origin moves
	// forward (rescaling every entry) before the scale overflows.
	origin  time.Time
	started bool
	entries map[histKey]*histEntry
	// cached is the last Target, valid while dirty is false.
	cached gpufit.TargetWorkload
	dirty  bool
	total  float64 // sum of scaled weights
}

type histEntry struct {
	w      float64 // scaled weight
	memSum float64 // scaled weight x MemMiB, for the weighted mean memory
}

// TypicalPopularity is the share of the history that Target keeps, as the
// reference FGD simulator's typical pods.
const TypicalPopularity = 0.95

// DefaultShapeHalfLife is the hub's default: long enough to hold a day's
// mix, short enough to follow a change of workload within hours.
const DefaultShapeHalfLife = 2 * time.Hour

// defaultMaxShapes bounds the histogram; the lightest shapes go first.
const defaultMaxShapes = 4096

// NewShapeHistory returns an empty history with the given half-life
// (<= 0: DefaultShapeHalfLife) and bound on distinct shapes (<= 0: 4,096).
func NewShapeHistory(halfLife time.Duration, maxShapes int) *ShapeHistory {
	if halfLife <= 0 {
		halfLife = DefaultShapeHalfLife
	}
	if maxShapes <= 0 {
		maxShapes = defaultMaxShapes
	}
	return &ShapeHistory{halfLife: halfLife, maxShapes: maxShapes, entries: map[histKey]*histEntry{}}
}

// HalfLife is the history's half-life.
func (h *ShapeHistory) HalfLife() time.Duration { return h.halfLife }

// Len is the number of distinct shapes held.
func (h *ShapeHistory) Len() int { return len(h.entries) }

// Observe records the pod sets of a workload submitted at time at, each
// shape weighted by its replica count. Observations may come in any order
// (a hub re-reading its store sees them so); each counts as of its own
// time, except that one older than the first observation counts as of that
// first one.
func (h *ShapeHistory) Observe(at time.Time, w *Workload) {
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		sh := gpufit.Shape{CPUMilli: ps.Req.CPUMilli, GPUs: ps.Req.GPUs, MemMiB: ps.Req.MemMiB}
		if ps.Req.GPUs > 0 {
			sh.Milli = ps.Req.Milli
			if ps.Class != "" {
				sh.Classes = []string{ps.Class}
			}
		}
		h.ObserveShape(at, sh, float64(max(ps.Replicas, 1)))
	}
}

// ObserveShape records one shape with a weight (a count; <= 0 or not
// finite is ignored). Shape.Weight is ignored.
func (h *ShapeHistory) ObserveShape(at time.Time, s gpufit.Shape, weight float64) {
	if !(weight > 0) || math.IsInf(weight, 0) {
		return
	}
	if !h.started {
		h.origin, h.started = at, true
	}
	if at.Before(h.origin) {
		at = h.origin
	}
	scale := math.Exp2(float64(at.Sub(h.origin)) / float64(h.halfLife))
	if scale > 1e100 {
		h.rebase(at)
		scale = 1
	}
	key := keyOf(s)
	e := h.entries[key]
	if e == nil {
		if len(h.entries) >= h.maxShapes {
			h.evictLightest()
		}
		e = &histEntry{}
		h.entries[key] = e
	}
	sw := weight * scale
	e.w += sw
	e.memSum += sw * float64(s.MemMiB)
	h.total += sw
	h.dirty = true
}

// histKey is a shape's identity in the histogram: CPU, GPUs, per-GPU milli,
// the sorted class list, and host memory rounded to 1 GiB (the exact
// memory is a weighted mean inside one key).
type histKey struct {
	cpu         int64
	gpus, milli int32
	memGiB      int64
	classes     string
}

func keyOf(s gpufit.Shape) histKey {
	k := histKey{cpu: s.CPUMilli, gpus: s.GPUs, milli: s.Milli, memGiB: (s.MemMiB + 512) / 1024}
	if len(s.Classes) > 0 {
		cl := append([]string(nil), s.Classes...)
		sort.Strings(cl)
		k.classes = strings.Join(cl, "|")
	}
	return k
}

func (a histKey) less(b histKey) bool {
	switch {
	case a.cpu != b.cpu:
		return a.cpu < b.cpu
	case a.gpus != b.gpus:
		return a.gpus < b.gpus
	case a.milli != b.milli:
		return a.milli < b.milli
	case a.memGiB != b.memGiB:
		return a.memGiB < b.memGiB
	}
	return a.classes < b.classes
}

// rebase moves the origin to at, rescaling every weight.
func (h *ShapeHistory) rebase(at time.Time) {
	f := math.Exp2(-float64(at.Sub(h.origin)) / float64(h.halfLife))
	h.total = 0
	for k, e := range h.entries {
		e.w *= f
		e.memSum *= f
		if e.w < 1e-300 {
			delete(h.entries, k)
			continue
		}
		h.total += e.w
	}
	h.origin = at
	h.dirty = true
}

// evictLightest drops the entry with the least weight (ties: the smallest
// key, so the result does not depend on map order).
func (h *ShapeHistory) evictLightest() {
	var victim histKey
	var vw float64
	found := false
	for k, e := range h.entries {
		if !found || e.w < vw || (e.w == vw && k.less(victim)) {
			victim, vw, found = k, e.w, true
		}
	}
	if found {
		h.total -= vw
		delete(h.entries, victim)
	}
}

// Target is the history as FGD defines a target workload: its most
// popular shapes that together cover 95% of the decayed weight (the rare
// rest is noise that pulls placements away from FGD's: with every shape,
// Meridian fell half a point below FGD on a share-heavy mix), weights
// normalised. The same value until the next observation; empty before any.
func (h *ShapeHistory) Target() gpufit.TargetWorkload {
	if h.dirty {
		shapes := h.shapes()
		h.cached, h.dirty = gpufit.NewTargetWorkload(gpufit.TypicalShapes(shapes, TypicalPopularity)), false
	}
	return h.cached
}

// Mix is every shape of the history with its decayed weight, normalised.
func (h *ShapeHistory) Mix() gpufit.TargetWorkload {
	return gpufit.NewTargetWorkload(h.shapes())
}

// shapes lists the history's shapes in key order.
func (h *ShapeHistory) shapes() []gpufit.Shape {
	keys := make([]histKey, 0, len(h.entries))
	for k := range h.entries {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool { return keys[a].less(keys[b]) })
	shapes := make([]gpufit.Shape, 0, len(keys))
	for _, k := range keys {
		e := h.entries[k]
		s := gpufit.Shape{CPUMilli: k.cpu, GPUs: k.gpus, Milli: k.milli, Weight: e.w / h.total, MemMiB: int64(e.memSum / e.w)}
		if k.classes != "" {
			s.Classes = strings.Split(k.classes, "|")
		}
		shapes = append(shapes, s)
	}
	return shapes
}
