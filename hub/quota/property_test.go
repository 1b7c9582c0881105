package quota

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

var propClasses = []string{"ca", "cb"}

func genLimits(t *rapid.T, label string) Limits {
	limit := func(name string) int64 {
		if rapid.IntRange(0, 1).Draw(t, label+"."+name+".unlimited") == 0 {
			return Unlimited
		}
		return int64(rapid.IntRange(0, 8).Draw(t, label+"."+name)) * 500
	}
	return Limits{
		Nominal:     int64(rapid.IntRange(0, 8).Draw(t, label+".nominal")) * 500,
		BorrowLimit: limit("borrow"),
		LendLimit:   limit("lend"),
	}
}

func genSpec(t *rapid.T, path string, leaf bool) (QueueSpec, bool) {
	if !leaf && rapid.IntRange(0, 3).Draw(t, path+".implicit") == 0 {
		return QueueSpec{}, false
	}
	s := QueueSpec{Path: path, Weight: float64(rapid.IntRange(0, 4).Draw(t, path+".weight")), Limits: map[string]Limits{}}
	for _, c := range append([]string{AnyClass}, propClasses...) {
		// Leaves mostly have quota for each class, interior queues less often.
		odds := 4
		if !leaf || c == AnyClass {
			odds = 1
		}
		if rapid.IntRange(0, odds).Draw(t, path+"."+c+".set") > 0 {
			s.Limits[c] = genLimits(t, path+"."+c)
		}
	}
	return s, true
}

// genSpecs draws a random tenant/team/project tree; some queues are
// implicit, some classes unlisted.
func genSpecs(t *rapid.T) []QueueSpec {
	var specs []QueueSpec
	add := func(path string, leaf bool) {
		if s, ok := genSpec(t, path, leaf); ok {
			specs = append(specs, s)
		}
	}
	for i := range rapid.IntRange(1, 3).Draw(t, "tenants") {
		tenant := fmt.Sprintf("t%d", i)
		teams := rapid.IntRange(0, 3).Draw(t, tenant+".teams")
		add(tenant, teams == 0)
		for j := range teams {
			team := fmt.Sprintf("%s/m%d", tenant, j)
			projects := rapid.IntRange(0, 2).Draw(t, team+".projects")
			add(team, projects == 0)
			for k := range projects {
				add(fmt.Sprintf("%s/p%d", team, k), true)
			}
		}
	}
	return specs
}

var reserveErr = regexp.MustCompile(`^queues\[(\d+)\]\.limits\["(.*)"\]\.nominal$`)

// buildTree builds a tree from generated specs, first raising any nominal
// that NewTree rejects because sub-queues reserve more than it.
func buildTree(t *rapid.T, specs []QueueSpec) *Tree {
	for range 100 {
		tree, err := NewTree(specs)
		if err == nil {
			return tree
		}
		var fe *FieldError
		m := reserveErr.FindStringSubmatch(fieldOf(err, &fe))
		if m == nil || !strings.Contains(fe.Reason, "reserve") {
			t.Fatalf("NewTree: %v", err)
		}
		i, _ := strconv.Atoi(m[1])
		l := specs[i].Limits[m[2]]
		l.Nominal += 500
		specs[i].Limits[m[2]] = l
	}
	t.Fatalf("could not repair generated specs")
	return nil
}

func fieldOf(err error, fe **FieldError) string {
	if errors.As(err, fe) {
		return (*fe).Field
	}
	return ""
}

const inf = int64(1) << 62

// refCap is a queue's cap from its exported effective limits.
func refCap(tree *Tree, path, class string) int64 {
	l, _ := tree.Limits(path, class)
	if l.BorrowLimit == Unlimited {
		return inf
	}
	return l.Nominal + l.BorrowLimit
}

func refReserve(tree *Tree, path, class string) int64 {
	l, _ := tree.Limits(path, class)
	if l.LendLimit == Unlimited {
		return 0
	}
	return max(0, l.Nominal-l.LendLimit)
}

// refHeld recomputes holdings from scratch from the leaves' usage (plus
// extra at one leaf), with the rule in the design note: a leaf holds its
// usage, an interior queue the sum over its children of max(holdings,
// reserve).
func refHeld(tree *Tree, class, extraLeaf string, extra int64) map[string]int64 {
	held := map[string]int64{}
	var visit func(p string) int64
	visit = func(p string) int64 {
		var h int64
		if p != "" && tree.Leaf(p) {
			h = tree.Usage(p, class)
			if p == extraLeaf {
				h += extra
			}
		} else {
			for _, c := range tree.Children(p) {
				h += max(visit(c), refReserve(tree, c, class))
			}
		}
		held[p] = h
		return h
	}
	visit("")
	return held
}

// refFits is the admission rule evaluated from scratch.
func refFits(tree *Tree, class, leaf string, milli int64) bool {
	held := refHeld(tree, class, leaf, milli)
	for p, h := range held {
		if h > refCap(tree, p, class) {
			return false
		}
	}
	return true
}

// checkInvariants asserts the quota invariants on raw usage, independent of
// the holdings bookkeeping.
func checkInvariants(t *rapid.T, tree *Tree) {
	all := append([]string{""}, tree.Queues()...)
	for _, class := range propClasses {
		for _, p := range all {
			u := tree.Usage(p, class)
			// A queue never exceeds nominal + borrow limit (the root: the
			// sum of the tenants' nominals).
			if cp := refCap(tree, p, class); u > cp {
				t.Fatalf("%s %q: usage %d exceeds nominal + borrow limit %d", class, p, u, cp)
			}
			// Interior usage is the sum of its children's.
			if kids := tree.Children(p); len(kids) > 0 {
				var sum int64
				for _, c := range kids {
					sum += tree.Usage(c, class)
				}
				if sum != u {
					t.Fatalf("%s %q: usage %d, children sum %d", class, p, u, sum)
				}
			}
			if p == "" {
				continue
			}
			// Lent amount within the lend limit: the part of p's nominal
			// it does not lend is still free for p at every ancestor.
			missing := max(0, refReserve(tree, p, class)-u)
			for a, ok := tree.Parent(p); ; a, ok = tree.Parent(a) {
				if tree.Usage(a, class)+missing > refCap(tree, a, class) {
					l, _ := tree.Limits(p, class)
					t.Fatalf("%s %q lends more than its lend limit %d: ancestor %q uses %d of %d while %d of %q's reserve is idle",
						class, p, l.LendLimit, a, tree.Usage(a, class), refCap(tree, a, class), missing, p)
				}
				if !ok {
					break
				}
			}
		}
	}
}

func TestPropertyAdmissionKeepsLimits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tree := buildTree(t, genSpecs(t))
		leaves := tree.Leaves()
		for i := range rapid.IntRange(1, 60).Draw(t, "steps") {
			leaf := rapid.SampledFrom(leaves).Draw(t, fmt.Sprintf("leaf%d", i))
			class := rapid.SampledFrom(propClasses).Draw(t, fmt.Sprintf("class%d", i))
			milli := int64(rapid.IntRange(0, 16).Draw(t, fmt.Sprintf("milli%d", i))) * 250
			switch rapid.IntRange(0, 5).Draw(t, fmt.Sprintf("op%d", i)) {
			case 0:
				tree.Release(leaf, class, min(milli, tree.Usage(leaf, class)))
			case 1:
				// A lender asks for its idle nominal back.
				if idle := tree.Nominal(leaf, class) - tree.Usage(leaf, class); idle > 0 && !tree.Fits(leaf, class, idle) {
					checkReclaim(t, tree, leaf, class, idle)
				}
			default:
				v := tree.Check(leaf, class, milli)
				if want := refFits(tree, class, leaf, milli); v.OK != want {
					t.Fatalf("Check(%q, %q, %d).OK = %v, reference says %v (reason %q)", leaf, class, milli, v.OK, want, v.Reason)
				}
				if v.OK != tree.Fits(leaf, class, milli) {
					t.Fatalf("Fits disagrees with Check")
				}
				if !v.OK && v.Reason == "" {
					t.Fatalf("refusal without a reason")
				}
				if v.OK {
					tree.Charge(leaf, class, milli)
				} else {
					checkReclaim(t, tree, leaf, class, milli)
				}
			}
			for _, c := range propClasses {
				for p, h := range refHeld(tree, c, "", 0) {
					if got := tree.Holding(p, c); p != "" && got != max(h, refReserve(tree, p, c)) {
						t.Fatalf("incremental holding of %q = %d, from scratch %d", p, got, max(h, refReserve(tree, p, c)))
					}
				}
			}
			checkInvariants(t, tree)
		}
	})
}

// checkReclaim asserts that when ReclaimNeeds says ok, releasing its needs
// makes the request fit, and that it names only leaves with enough usage.
func checkReclaim(t *rapid.T, tree *Tree, leaf, class string, milli int64) {
	needs, ok := tree.ReclaimNeeds(leaf, class, milli)
	if !ok {
		if len(needs) != 0 {
			t.Fatalf("ReclaimNeeds returned needs %v with ok=false", needs)
		}
		return
	}
	c := tree.Clone()
	for i, n := range needs {
		if i > 0 && needs[i-1].Queue >= n.Queue {
			t.Fatalf("needs not sorted: %v", needs)
		}
		if n.Queue == leaf || n.Milli <= 0 || n.Milli > c.Usage(n.Queue, class) || !c.Leaf(n.Queue) {
			t.Fatalf("bad need %+v (usage %d)", n, c.Usage(n.Queue, class))
		}
		c.Release(n.Queue, class, n.Milli)
	}
	if v := c.Check(leaf, class, milli); !v.OK {
		t.Fatalf("after reclaiming %v, Check(%q, %d) still fails: %s", needs, leaf, milli, v.Reason)
	}
}

func TestPropertyCloneAndRollbackRestoreExactly(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tree := buildTree(t, genSpecs(t))
		leaves := tree.Leaves()
		classes := append([]string{"new-class"}, propClasses...)
		ops := func(tr *Tree, label string) {
			for i := range rapid.IntRange(0, 15).Draw(t, label) {
				leaf := rapid.SampledFrom(leaves).Draw(t, fmt.Sprintf("%s.leaf%d", label, i))
				class := rapid.SampledFrom(classes).Draw(t, fmt.Sprintf("%s.class%d", label, i))
				milli := int64(rapid.IntRange(0, 5000).Draw(t, fmt.Sprintf("%s.milli%d", label, i)))
				if rapid.Bool().Draw(t, fmt.Sprintf("%s.release%d", label, i)) {
					tr.Release(leaf, class, milli) // may over-release: clamps
				} else {
					tr.Charge(leaf, class, milli)
				}
			}
		}
		ops(tree, "setup")
		base := snapshot(tree)

		clone := tree.Clone()
		if got := snapshot(clone); got != base {
			t.Fatalf("clone differs from its source")
		}
		ops(clone, "clone")
		if got := snapshot(tree); got != base {
			t.Fatalf("changes to a clone leaked into its source")
		}

		m1 := tree.Mark()
		ops(tree, "outer")
		mid := snapshot(tree)
		m2 := tree.Mark()
		ops(tree, "inner")
		tree.Rollback(m2)
		if got := snapshot(tree); got != mid {
			t.Fatalf("inner rollback did not restore the state at its mark")
		}
		ops(tree, "after")
		tree.Rollback(m1)
		if got := snapshot(tree); got != base {
			t.Fatalf("outer rollback did not restore the state at its mark:\n%s\nwant\n%s", got, base)
		}
		tree.Rollback(m1) // already closed: ignored
		if got := snapshot(tree); got != base {
			t.Fatalf("a stale mark changed the tree")
		}

		m3 := tree.Mark()
		ops(tree, "committed")
		kept := snapshot(tree)
		tree.Commit(m3)
		tree.Rollback(m3)
		if got := snapshot(tree); got != kept {
			t.Fatalf("rollback after commit undid committed work")
		}
	})
}
