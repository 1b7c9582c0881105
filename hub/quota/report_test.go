package quota

import "testing"

func TestHeadroomIsTheLargestAmountThatFits(t *testing.T) {
	tr := mustTree(t,
		queue("acme"),
		queue("acme/a").quota(h100, 8, 4, unl),
		queue("acme/b").quota(h100, 8, 0, unl),
		queue("acme/c").quota(h100, 0, unl, unl),
	)
	applyCharges(t, tr, []charge{{"acme/a", h100, gpu(3)}, {"acme/b", h100, gpu(2.5)}})
	tests := map[string]struct {
		leaf, class string
		want        int64
	}{
		// a: nominal 8 + borrow 4 = 12, uses 3; the pool (16) has 10.5 idle.
		"borrow limit binds": {"acme/a", h100, gpu(9)},
		// b: no borrowing; 8 - 2.5.
		"nominal binds": {"acme/b", h100, gpu(5.5)},
		// c: unlimited borrowing, bounded by what the pool has idle.
		"pool binds":    {"acme/c", h100, gpu(16 - 5.5)},
		"unknown queue": {"acme/zz", h100, 0},
		"inner queue":   {"acme", h100, 0},
		"unknown class": {"acme/a", t4, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := tr.Headroom(tc.leaf, tc.class)
			if got != tc.want {
				t.Fatalf("Headroom = %d, want %d", got, tc.want)
			}
			if got > 0 && (!tr.Fits(tc.leaf, tc.class, got) || tr.Fits(tc.leaf, tc.class, got+1)) {
				t.Fatalf("Headroom %d is not the edge of Fits", got)
			}
		})
	}
}

func TestLentSharesSiblingsBorrowingAmongLenders(t *testing.T) {
	tr := mustTree(t,
		queue("acme"),
		queue("acme/a").quota(h100, 8, unl, unl),
		queue("acme/b").quota(h100, 8, unl, 2), // lends at most 2
		queue("acme/c").quota(h100, 4, unl, unl),
	)
	// c uses 10: borrows 6. a has 8 idle, b may lend 2: 10 idle in all.
	applyCharges(t, tr, []charge{{"acme/c", h100, gpu(10)}})
	a, b, c := tr.Lent("acme/a", h100), tr.Lent("acme/b", h100), tr.Lent("acme/c", h100)
	if a != gpu(6*8.0/10) || b != gpu(6*2.0/10) || c != 0 {
		t.Fatalf("lent a=%d b=%d c=%d, want 4800, 1200, 0", a, b, c)
	}
	if a+b != tr.Borrowing("acme/c", h100) {
		t.Fatalf("lent %d+%d does not add up to the borrowing %d", a, b, tr.Borrowing("acme/c", h100))
	}
	if got := tr.Lent("acme", h100); got != 0 {
		t.Fatalf("root-level queue lent %d, want 0 (no siblings)", got)
	}
	if got := tr.Lent("nope", h100); got != 0 {
		t.Fatalf("unknown queue lent %d", got)
	}
	// Borrowing beyond what the lenders have idle is capped at their idle part.
	applyCharges(t, tr, []charge{{"acme/c", h100, gpu(4)}})
	if a, b := tr.Lent("acme/a", h100), tr.Lent("acme/b", h100); a != gpu(8) || b != gpu(2) {
		t.Fatalf("lent a=%d b=%d when borrowing exceeds idle, want all of it", a, b)
	}
}

// Ceiling ignores usage: it is what the queue could ever hold, and the
// blocker names the limit that binds.
func TestCeilingIsTheMostAQueueCouldEverHold(t *testing.T) {
	tr := mustTree(t,
		queue("acme").quota(h100, 16, 4, unl),
		queue("acme/a").quota(h100, 8, 4, unl),
		queue("acme/b").quota(h100, 8, 0, 2), // keeps 6 for itself
		queue("acme/c").quota(h100, 0, unl, unl),
		queue("other").quota(h100, 8, 0, unl),
		queue("other/x").quota(h100, 8, unl, unl),
	)
	tests := map[string]struct {
		leaf, class string
		want        int64
		blocker     string
		ok          bool
	}{
		"own borrow limit binds":         {"acme/a", h100, gpu(12), "acme/a", true},
		"no borrowing: nominal":          {"acme/b", h100, gpu(8), "acme/b", true},
		"parent binds, minus reserved":   {"acme/c", h100, gpu(20 - 6), "acme", true},
		"unlimited up to the tenant cap": {"other/x", h100, gpu(8), "other", true},
		"class without quota":            {"acme/a", t4, 0, "acme/a", true},
		"unknown queue":                  {"acme/zz", h100, 0, "", false},
		"inner queue":                    {"acme", h100, 0, "", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := tr.Clone()
			applyCharges(t, tr, []charge{{"acme/a", h100, gpu(5)}})
			defer func() { *tr = *before }()
			got, blocker, ok := tr.Ceiling(tc.leaf, tc.class)
			if got != tc.want || blocker != tc.blocker || ok != tc.ok {
				t.Fatalf("Ceiling = %d, %q, %v; want %d, %q, %v", got, blocker, ok, tc.want, tc.blocker, tc.ok)
			}
			if ok && got < MaxMilli {
				idle := before.Clone()
				if !idle.Fits(tc.leaf, tc.class, got) && got > 0 || idle.Fits(tc.leaf, tc.class, got+1) {
					t.Fatalf("Ceiling %d is not the edge of Fits on an idle tree", got)
				}
			}
		})
	}
}
