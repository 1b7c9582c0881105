package quota

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// ledgerWith makes a ledger without decay holding exactly the given
// GPU-seconds per leaf (accrued as one GPU for that many seconds).
func ledgerWith(usage map[string]float64) *Ledger {
	l := NewLedger(0, nil)
	for _, p := range sortedKeys(usage) {
		l.Accrue(p, h100, 1000, epoch, epoch.Add(time.Duration(usage[p]*float64(time.Second))))
	}
	return l
}

func TestFairTreeEqualLevelFairshareWhenUsageFollowsWeight(t *testing.T) {
	tree := mustTree(t, queue("t/w1").weight(1), queue("t/w2").weight(2), queue("t/w3").weight(3), queue("t/w4").weight(4))
	l := ledgerWith(map[string]float64{"t/w1": 100, "t/w2": 200, "t/w3": 300, "t/w4": 400})
	lf := LevelFairshare(tree, l, epoch)
	for _, p := range []string{"t/w1", "t/w2", "t/w3", "t/w4"} {
		if !near(lf[p], 1, 1e-12) {
			t.Errorf("level fairshare of %s = %v, want 1 like its siblings", p, lf[p])
		}
	}
	// Equal level fairshare ties, and ties are broken by path.
	want := map[string]float64{"t/w1": 1, "t/w2": 0.75, "t/w3": 0.5, "t/w4": 0.25}
	if got := FairTree(tree, l, epoch); !reflect.DeepEqual(got, want) {
		t.Errorf("FairTree = %v, want %v", got, want)
	}
	// Doubling one queue's usage drops it to the bottom.
	l.Accrue("t/w2", h100, 1000, epoch.Add(time.Hour), epoch.Add(time.Hour+200*time.Second))
	if got := FairTree(tree, l, epoch.Add(2*time.Hour)); got["t/w2"] != 0.25 {
		t.Errorf("after extra usage t/w2 factor = %v, want 0.25 (all: %v)", got["t/w2"], got)
	}
}

// TestFairTreeWorkedExample is the example in the design note.
func TestFairTreeWorkedExample(t *testing.T) {
	tree := mustTree(t,
		queue("bio").weight(1),
		queue("phys").weight(1),
		queue("phys/hep").weight(1),
		queue("phys/astro").weight(3),
		queue("chem").weight(2),
	)
	l := ledgerWith(map[string]float64{"bio": 100, "phys/hep": 200, "phys/astro": 100, "chem": 200})
	lf := LevelFairshare(tree, l, epoch)
	wantLF := map[string]float64{"bio": 1.5, "chem": 1.5, "phys": 0.5, "phys/astro": 2.25, "phys/hep": 0.375}
	for p, want := range wantLF {
		if !near(lf[p], want, 1e-12) {
			t.Errorf("LF(%s) = %v, want %v", p, lf[p], want)
		}
	}
	want := map[string]float64{"bio": 1, "chem": 0.75, "phys/astro": 0.5, "phys/hep": 0.25}
	if got := FairTree(tree, l, epoch); !reflect.DeepEqual(got, want) {
		t.Errorf("FairTree = %v, want %v", got, want)
	}
	ids := FairTreeIDs(tree, l, epoch, nil)
	for p, f := range want {
		if id, _ := tree.ID(p); ids[id] != f {
			t.Errorf("FairTreeIDs[%s] = %v, want %v", p, ids[id], f)
		}
	}
	if id, _ := tree.ID("phys"); ids[id] != 0 {
		t.Errorf("interior queue has factor %v", ids[id])
	}
}

func TestFairTreeCases(t *testing.T) {
	tests := map[string]struct {
		queues []*queueBuilder
		usage  map[string]float64
		want   map[string]float64
	}{
		"no ledger ranks by path": {
			queues: []*queueBuilder{queue("b"), queue("a")},
			want:   map[string]float64{"a": 1, "b": 0.5},
		},
		"zero usage ranks first": {
			queues: []*queueBuilder{queue("a"), queue("b"), queue("c")},
			usage:  map[string]float64{"a": 10, "b": 1},
			want:   map[string]float64{"c": 1, "b": 2.0 / 3, "a": 1.0 / 3},
		},
		"weight outweighs usage": {
			queues: []*queueBuilder{queue("a").weight(10), queue("b")},
			usage:  map[string]float64{"a": 50, "b": 10},
			want:   map[string]float64{"a": 1, "b": 0.5},
		},
		"a whole subtree ranks above its sibling's": {
			queues: []*queueBuilder{queue("x/1"), queue("x/2"), queue("y/1"), queue("y/2")},
			usage:  map[string]float64{"x/1": 1, "x/2": 1000, "y/1": 1001, "y/2": 0.5},
			want:   map[string]float64{"x/1": 1, "x/2": 0.75, "y/2": 0.5, "y/1": 0.25},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tree := mustTree(t, tc.queues...)
			var l *Ledger
			if tc.usage != nil {
				l = ledgerWith(tc.usage)
			}
			got := FairTree(tree, l, epoch)
			if len(got) != len(tc.want) {
				t.Fatalf("FairTree = %v, want %v", got, tc.want)
			}
			for p, f := range tc.want {
				if !near(got[p], f, 1e-15) {
					t.Errorf("factor(%s) = %v, want %v", p, got[p], f)
				}
			}
		})
	}
}

func TestPropertyFairTreeRanksLowerUsagePerWeightHigher(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var specs []QueueSpec
		usage := map[string]float64{}
		for i := range rapid.IntRange(1, 4).Draw(t, "tenants") {
			tenant := fmt.Sprintf("t%d", i)
			specs = append(specs, QueueSpec{Path: tenant, Weight: float64(rapid.IntRange(1, 5).Draw(t, tenant+".w"))})
			for j := range rapid.IntRange(0, 4).Draw(t, tenant+".teams") {
				team := fmt.Sprintf("%s/m%d", tenant, j)
				specs = append(specs, QueueSpec{Path: team, Weight: float64(rapid.IntRange(1, 5).Draw(t, team+".w"))})
			}
		}
		tree, err := NewTree(specs)
		if err != nil {
			t.Fatalf("NewTree: %v", err)
		}
		for _, leaf := range tree.Leaves() {
			if u := rapid.IntRange(0, 1000).Draw(t, leaf+".usage"); u > 0 {
				usage[leaf] = float64(u)
			}
		}
		l := ledgerWith(usage)
		got := FairTree(tree, l, epoch)
		// The factors are exactly the ranks k/n.
		n := len(tree.Leaves())
		var fs []float64
		for _, f := range got {
			fs = append(fs, f)
		}
		sort.Float64s(fs)
		for k, f := range fs {
			if f != float64(k+1)/float64(n) {
				t.Fatalf("factors %v are not the ranks 1/n..n/n", fs)
			}
		}
		// Siblings: a lower usage/weight ratio ranks every leaf below it above
		// every leaf below the sibling.
		ratio := func(p string) float64 {
			u := l.Usage(p, epoch)
			return u / tree.Weight(p)
		}
		for _, parent := range append([]string{""}, tree.Queues()...) {
			kids := tree.Children(parent)
			for _, a := range kids {
				for _, b := range kids {
					ra, rb := ratio(a), ratio(b)
					if !(ra < rb) || near(ra, rb, 1e-9) {
						continue
					}
					if lo, hi := minFactor(tree, got, a), maxFactor(tree, got, b); lo <= hi {
						t.Fatalf("%s (usage/weight %v) has a leaf at %v, not above %s (usage/weight %v) with a leaf at %v", a, ra, lo, b, rb, hi)
					}
				}
			}
		}
	})
}

func subtreeLeaves(tree *Tree, p string) []string {
	if tree.Leaf(p) {
		return []string{p}
	}
	var out []string
	for _, c := range tree.Children(p) {
		out = append(out, subtreeLeaves(tree, c)...)
	}
	return out
}

func minFactor(tree *Tree, f map[string]float64, p string) float64 {
	m := math.Inf(1)
	for _, l := range subtreeLeaves(tree, p) {
		m = math.Min(m, f[l])
	}
	return m
}

func maxFactor(tree *Tree, f map[string]float64, p string) float64 {
	m := math.Inf(-1)
	for _, l := range subtreeLeaves(tree, p) {
		m = math.Max(m, f[l])
	}
	return m
}

func TestOrder(t *testing.T) {
	t0 := epoch
	items := []Pending{
		{ID: "late-low-fs", Fairshare: 0.5, Priority: 10, Created: t0.Add(time.Minute)},
		{ID: "b", Fairshare: 1, Priority: 0, Created: t0},
		{ID: "a", Fairshare: 1, Priority: 0, Created: t0},
		{ID: "older", Fairshare: 1, Priority: 0, Created: t0.Add(-time.Hour)},
		{ID: "urgent", Fairshare: 1, Priority: 5, Created: t0.Add(time.Hour)},
		{ID: "nan", Fairshare: math.NaN(), Priority: 100, Created: t0},
		{ID: "low", Fairshare: 0.25, Priority: 0, Created: t0},
	}
	Order(items)
	var got []string
	for _, it := range items {
		got = append(got, it.ID)
	}
	want := []string{"urgent", "older", "a", "b", "late-low-fs", "low", "nan"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Order = %v, want %v", got, want)
	}
	for i := range items {
		if Compare(items[i], items[i]) != 0 {
			t.Errorf("Compare(%s, itself) != 0", items[i].ID)
		}
		for j := i + 1; j < len(items); j++ {
			if Compare(items[i], items[j]) >= 0 || Compare(items[j], items[i]) <= 0 {
				t.Errorf("Compare not antisymmetric for %s, %s", items[i].ID, items[j].ID)
			}
		}
	}
}
