package scheduler

import (
	"math"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

func weightOf(t *testing.T, tw gpufit.TargetWorkload, cpu int64, milli int32) float64 {
	t.Helper()
	var w float64
	for _, s := range tw.Shapes() {
		if s.CPUMilli == cpu && s.Milli == milli {
			w += s.Weight
		}
	}
	return w
}

func TestShapeHistoryDecaysByHalfLife(t *testing.T) {
	h := NewShapeHistory(time.Hour, 0)
	a := gpufit.Shape{CPUMilli: 1000, GPUs: 1, Milli: 1000}
	b := gpufit.Shape{CPUMilli: 2000, GPUs: 1, Milli: 500}
	h.ObserveShape(t0, a, 1)
	h.ObserveShape(t0.Add(time.Hour), b, 1)
	// One half-life later, a counts half as much as b: 1/3 and 2/3.
	tw := h.Mix()
	if wa, wb := weightOf(t, tw, 1000, 1000), weightOf(t, tw, 2000, 500); math.Abs(wa-1.0/3) > 1e-9 || math.Abs(wb-2.0/3) > 1e-9 {
		t.Fatalf("weights a=%v b=%v, want 1/3 and 2/3", wa, wb)
	}
	// Far in the future (past the point where the scaled weights are
	// rebased) both decay alike: the ratio stays, and the new shape
	// dominates.
	c := gpufit.Shape{CPUMilli: 3000, GPUs: 2, Milli: 1000}
	h.ObserveShape(t0.Add(400*time.Hour), c, 1)
	tw = h.Mix()
	wa, wb := weightOf(t, tw, 1000, 1000), weightOf(t, tw, 2000, 500)
	if wb == 0 || math.Abs(wa/wb-0.5) > 1e-9 {
		t.Fatalf("after a rebase a/b = %v/%v, want ratio 1/2", wa, wb)
	}
	if wc := weightOf(t, tw, 3000, 1000); wc < 1-1e-9 {
		t.Fatalf("the new shape weighs %v, want ~1", wc)
	}
	// FGD's target keeps only the popular shapes: here c alone.
	typ := h.Target()
	if s := typ.Shapes(); len(s) != 1 || s[0].CPUMilli != 3000 {
		t.Fatalf("typical target %+v, want the new shape alone", s)
	}
}

func TestShapeHistoryCountsReplicasAndKeepsClasses(t *testing.T) {
	h := NewShapeHistory(time.Hour, 0)
	w := makeWorkload("w", "t/a").PodSet("main", 3, 1, 1000, h100).Obj()
	w.PodSets = append(w.PodSets, PodSet{Name: "cpu", Replicas: 1, Req: gpufit.Request{CPUMilli: 500}})
	h.Observe(t0, w)
	tw := h.Target()
	shapes := tw.Shapes()
	if len(shapes) != 2 {
		t.Fatalf("got %d shapes, want 2: %+v", len(shapes), shapes)
	}
	var sum float64
	for _, s := range shapes {
		sum += s.Weight
		switch {
		case s.GPUs == 1 && s.Milli == 1000:
			if s.Weight != 0.75 || len(s.Classes) != 1 || s.Classes[0] != h100 {
				t.Errorf("GPU shape %+v, want weight 0.75 and class %s", s, h100)
			}
		case s.GPUs == 0:
			if s.Weight != 0.25 || len(s.Classes) != 0 {
				t.Errorf("CPU shape %+v, want weight 0.25 and no class", s)
			}
		default:
			t.Errorf("unexpected shape %+v", s)
		}
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Fatalf("weights sum to %v", sum)
	}
}

func TestShapeHistoryBoundEvictsLightest(t *testing.T) {
	h := NewShapeHistory(time.Hour, 2)
	h.ObserveShape(t0, gpufit.Shape{CPUMilli: 1, GPUs: 1, Milli: 100}, 1)
	h.ObserveShape(t0, gpufit.Shape{CPUMilli: 2, GPUs: 1, Milli: 200}, 5)
	h.ObserveShape(t0, gpufit.Shape{CPUMilli: 3, GPUs: 1, Milli: 300}, 2)
	if h.Len() != 2 {
		t.Fatalf("len %d, want 2", h.Len())
	}
	tw := h.Target()
	if weightOf(t, tw, 1, 100) != 0 || weightOf(t, tw, 2, 200) == 0 || weightOf(t, tw, 3, 300) == 0 {
		t.Fatalf("the lightest shape should have gone: %+v", tw.Shapes())
	}
}

func TestShapeHistoryIsDeterministic(t *testing.T) {
	build := func() []gpufit.Shape {
		h := NewShapeHistory(time.Minute, 0)
		for i := 0; i < 200; i++ {
			h.ObserveShape(t0.Add(time.Duration(i)*time.Second), gpufit.Shape{CPUMilli: int64(i % 17), GPUs: 1, Milli: int32(100 * (1 + i%9)), MemMiB: int64(i)}, 1)
		}
		tw := h.Target()
		return tw.Shapes()
	}
	a, b := build(), build()
	if len(a) != len(b) {
		t.Fatalf("lengths differ: %d %d", len(a), len(b))
	}
	for i := range a {
		if a[i].CPUMilli != b[i].CPUMilli || a[i].Milli != b[i].Milli || a[i].Weight != b[i].Weight || a[i].MemMiB != b[i].MemMiB {
			t.Fatalf("shape %d differs: %+v vs %+v", i, a[i], b[i])
		}
	}
}

func TestShapeHistoryIgnoresBadWeights(t *testing.T) {
	h := NewShapeHistory(0, 0)
	if h.HalfLife() != DefaultShapeHalfLife {
		t.Fatalf("default half-life %v", h.HalfLife())
	}
	for _, w := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		h.ObserveShape(t0, gpufit.Shape{GPUs: 1, Milli: 1000}, w)
	}
	if tw := h.Target(); !tw.Empty() || h.Len() != 0 {
		t.Fatalf("bad weights were recorded: %+v", tw.Shapes())
	}
}

// The history is the meridian policy's target when the caller gives it,
// and an empty one (with nothing pending) leaves the fallback in place.
func TestDecideScoresAgainstTheGivenTarget(t *testing.T) {
	h := NewShapeHistory(time.Hour, 0)
	h.ObserveShape(t0, gpufit.Shape{CPUMilli: 1000, GPUs: 1, Milli: 500}, 10)
	tw := h.Target()
	cfg := DefaultConfig()
	cfg.Target = &tw
	if s := scorerFor(cfg.Policy, cfg.Target, nil); s.Name() != "meridian" {
		t.Fatalf("scorer %s, want meridian", s.Name())
	}
	empty := gpufit.TargetWorkload{}
	if s := scorerFor(cfg.Policy, &empty, nil); s.Name() != "bestfit" {
		t.Fatalf("an empty target with nothing pending should fall back to bestfit, got %s", s.Name())
	}
}

// A cycle with few pending replicas compares more nodes for each; a big
// cycle keeps the floor.
func TestCandidatesPerReplica(t *testing.T) {
	cfg := DefaultConfig()
	one := []*Workload{makeWorkload("a", "t/a").PodSet("m", 1, 1, 1000, h100).Obj()}
	if k := candidatesPerReplica(cfg, one); k != cfg.MaxNodeCandidates {
		t.Fatalf("one replica: %d candidates, want the cap %d", k, cfg.MaxNodeCandidates)
	}
	many := make([]*Workload, 100000)
	for i := range many {
		many[i] = one[0]
	}
	if k := candidatesPerReplica(cfg, many); k != cfg.NodeCandidates {
		t.Fatalf("100,000 replicas: %d candidates, want the floor %d", k, cfg.NodeCandidates)
	}
	mid := many[:8192]
	if k, want := candidatesPerReplica(cfg, mid), cfg.CandidateBudget/8192; k != want {
		t.Fatalf("8,192 replicas: %d candidates, want %d", k, want)
	}
	cfg.CandidateBudget = 0
	if k := candidatesPerReplica(cfg, one); k != cfg.NodeCandidates {
		t.Fatalf("no budget: %d, want %d", k, cfg.NodeCandidates)
	}
}
