package quota

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

func fairTestTree(t testing.TB, specs ...QueueSpec) *Tree {
	t.Helper()
	tr, err := NewTree(specs)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestFairSharesAndFairnessError(t *testing.T) {
	flat := []QueueSpec{{Path: "a"}, {Path: "b"}}
	nested := []QueueSpec{{Path: "t1", Weight: 3}, {Path: "t1/x"}, {Path: "t1/y"}, {Path: "t2", Weight: 1}}
	for _, tc := range []struct {
		name          string
		specs         []QueueSpec
		usage, demand map[string]int64
		capacity      int64
		shares        map[string]float64
		err           float64
	}{
		{name: "even split, one queue takes all", specs: flat, capacity: 8000,
			usage: map[string]int64{"a": 8000}, demand: map[string]int64{"a": 8000, "b": 8000},
			shares: map[string]float64{"a": 4000, "b": 4000}, err: 0.5},
		{name: "even split, even use", specs: flat, capacity: 8000,
			usage: map[string]int64{"a": 4000, "b": 4000}, demand: map[string]int64{"a": 8000, "b": 8000},
			shares: map[string]float64{"a": 4000, "b": 4000}, err: 0},
		{name: "a small demand is met and the rest goes to the other", specs: flat, capacity: 8000,
			usage: map[string]int64{"a": 7000, "b": 1000}, demand: map[string]int64{"a": 8000, "b": 1000},
			shares: map[string]float64{"a": 7000, "b": 1000}, err: 0},
		{name: "the small demand waits", specs: flat, capacity: 8000,
			usage: map[string]int64{"a": 8000}, demand: map[string]int64{"a": 9000, "b": 1000},
			shares: map[string]float64{"a": 7000, "b": 1000}, err: 0.125},
		{name: "weights down the tree", specs: nested, capacity: 8000,
			usage: map[string]int64{"t2": 8000}, demand: map[string]int64{"t1/x": 9000, "t1/y": 9000, "t2": 9000},
			shares: map[string]float64{"t1/x": 3000, "t1/y": 3000, "t2": 2000}, err: 0.75},
		{name: "an idle sibling leaves its share to the other", specs: nested, capacity: 8000,
			usage: map[string]int64{"t1/x": 6000, "t2": 2000}, demand: map[string]int64{"t1/x": 9000, "t2": 9000},
			shares: map[string]float64{"t1/x": 6000, "t2": 2000}, err: 0},
		{name: "nothing wanted", specs: flat, capacity: 8000, shares: map[string]float64{}, err: 0},
		{name: "no capacity and no usage", specs: flat, demand: map[string]int64{"a": 1000}, shares: map[string]float64{}, err: 0},
		{name: "usage above a stale capacity raises it", specs: flat, capacity: 1000,
			usage: map[string]int64{"a": 2000}, demand: map[string]int64{"a": 2000, "b": 2000},
			shares: map[string]float64{"a": 500, "b": 500}, err: 0.5},
		{name: "unknown and interior paths are ignored", specs: nested, capacity: 4000,
			usage: map[string]int64{"gone": 4000, "t1": 4000}, demand: map[string]int64{"gone": 4000, "t1": 4000, "t2": 4000},
			shares: map[string]float64{"t2": 4000}, err: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := fairTestTree(t, tc.specs...)
			got := FairShares(tr, tc.demand, tc.capacity)
			if len(got) != len(tc.shares) {
				t.Fatalf("FairShares = %v, want %v", got, tc.shares)
			}
			for p, w := range tc.shares {
				if math.Abs(got[p]-w) > 1e-9 {
					t.Fatalf("FairShares[%s] = %v, want %v (all: %v)", p, got[p], w, got)
				}
			}
			if e := FairnessError(tr, tc.usage, tc.demand, tc.capacity); math.Abs(e-tc.err) > 1e-9 {
				t.Fatalf("FairnessError = %v, want %v", e, tc.err)
			}
		})
	}
}

// The fair shares never exceed a queue's demand and together hand out
// min(capacity, total demand); the error stays in [0, 1].
func TestFairSharesProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		paths := []string{"a", "a/x", "a/y", "a/y/p", "a/y/q", "b", "c", "c/z"}
		var specs []QueueSpec
		for _, p := range paths {
			specs = append(specs, QueueSpec{Path: p, Weight: float64(rapid.IntRange(1, 5).Draw(rt, "w-"+p))})
		}
		tr, err := NewTree(specs)
		if err != nil {
			rt.Fatal(err)
		}
		demand, usage := map[string]int64{}, map[string]int64{}
		var total int64
		for _, leaf := range tr.Leaves() {
			d := int64(rapid.IntRange(0, 20).Draw(rt, "d-"+leaf)) * 500
			demand[leaf] = d
			usage[leaf] = int64(rapid.IntRange(0, 20).Draw(rt, "u-"+leaf)) * 500
			total += d
		}
		capacity := int64(rapid.IntRange(0, 40).Draw(rt, "cap")) * 500
		shares := FairShares(tr, demand, capacity)
		var sum float64
		for p, s := range shares {
			if s < 0 || s > float64(demand[p])+1e-6 {
				rt.Fatalf("share of %s = %v outside [0, demand %d]", p, s, demand[p])
			}
			sum += s
		}
		if want := float64(min(capacity, total)); math.Abs(sum-want) > 1e-6 {
			rt.Fatalf("shares sum to %v, want %v (%v)", sum, want, shares)
		}
		if e := FairnessError(tr, usage, demand, capacity); e < 0 || e > 1+1e-9 {
			rt.Fatalf("FairnessError = %v, outside [0, 1]", e)
		}
	})
}
