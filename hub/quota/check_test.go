package quota

import (
	"strings"
	"testing"
)

// Fixtures, all for class h100 unless noted.
func fixtureSiblings(tb testing.TB) *Tree {
	// Implicit tenant t (nominal 8 = 4 + 4, unlimited borrowing).
	return mustTree(tb,
		queue("t/a").quota(h100, 4, 4, unl),
		queue("t/b").quota(h100, 4, unl, unl),
	)
}

func fixtureLendLimit(tb testing.TB) *Tree {
	return mustTree(tb,
		queue("t").quota(h100, 8, 0, unl),
		queue("t/a").quota(h100, 4, unl, unl),
		queue("t/b").quota(h100, 4, unl, 1), // keeps 3 for itself
	)
}

func fixtureMultiLevel(tb testing.TB) *Tree {
	return mustTree(tb,
		queue("research").quota(h100, 8, 8, unl),
		queue("research/vision").quota(h100, 4, unl, unl),
		queue("research/vision/detr").quota(h100, 4, unl, unl),
		queue("research/nlp/llm").quota(h100, 4, 0, unl), // team nlp is implicit
		queue("infra").quota(h100, 8, 0, 2),              // keeps 6 for itself
		queue("infra/ci").quota(h100, 8, 0, unl),
	)
}

func fixtureTenantBorrowLimit(tb testing.TB) *Tree {
	return mustTree(tb,
		queue("research").quota(h100, 8, 2, unl),
		queue("research/vision").quota(h100, 8, unl, unl),
		queue("infra").quota(h100, 8, 0, unl),
	)
}

func fixtureOvercommitted(tb testing.TB) *Tree {
	return mustTree(tb,
		queue("t").quota(h100, 4, 0, unl),
		queue("t/a").quota(h100, 4, unl, unl),
		queue("t/b").quota(h100, 4, unl, unl),
	)
}

func fixtureFractional(tb testing.TB) *Tree {
	return mustTree(tb,
		queue("t/a").quota(h100, 0.5, 0.25, unl),
		queue("t/b").quota(h100, 12.5, 0, unl).quota(AnyClass, 2, 0, unl),
	)
}

func TestCheck(t *testing.T) {
	tests := map[string]struct {
		tree        func(testing.TB) *Tree
		pre         []charge
		leaf, class string
		milli       int64
		wantOK      bool
		wantBorrow  int64
		wantBlocker string
		wantReason  string
	}{
		"within nominal": {
			tree: fixtureSiblings, leaf: "t/a", class: h100, milli: gpu(4), wantOK: true,
		},
		"zero request": {
			tree: fixtureSiblings, pre: []charge{{"t/a", h100, gpu(8)}}, leaf: "t/a", class: h100, milli: 0, wantOK: true, wantBorrow: gpu(4),
		},
		"borrowing within limit": {
			tree: fixtureSiblings, pre: []charge{{"t/a", h100, gpu(4)}}, leaf: "t/a", class: h100, milli: gpu(3), wantOK: true, wantBorrow: gpu(3),
		},
		"borrow limit hit": {
			tree: fixtureSiblings, pre: []charge{{"t/a", h100, gpu(4)}}, leaf: "t/a", class: h100, milli: gpu(4.5),
			wantBorrow: gpu(4.5), wantBlocker: "t/a",
			wantReason: "queue t/a would exceed its nvidia-h100 limit: 4 of 8 GPUs (nominal 4 + borrow limit 4), 4.5 more requested",
		},
		"sibling's quota in use": {
			tree: fixtureSiblings, pre: []charge{{"t/b", h100, gpu(6)}}, leaf: "t/a", class: h100, milli: gpu(3),
			wantBlocker: "",
			wantReason:  "the federation has no idle nvidia-h100 quota to lend: total usage 6 of 8 GPUs (sum of tenant nominals), 3 more requested",
		},
		"lend limit lets a sibling borrow up to it": {
			tree: fixtureLendLimit, leaf: "t/a", class: h100, milli: gpu(5), wantOK: true, wantBorrow: gpu(1),
		},
		"lend limit respected": {
			tree: fixtureLendLimit, leaf: "t/a", class: h100, milli: gpu(6), wantBorrow: gpu(2), wantBlocker: "t",
			wantReason: "tenant t has no idle nvidia-h100 quota to lend: cohort usage 3 of 8 GPUs held (0 in use + 3 reserved by sub-queues that do not lend it) (nominal 8 + borrow limit 0), 6 more requested",
		},
		"lender uses its reserve while a sibling borrows": {
			tree: fixtureLendLimit, pre: []charge{{"t/a", h100, gpu(5)}}, leaf: "t/b", class: h100, milli: gpu(3), wantOK: true,
		},
		"lender beyond its reserve while a sibling borrows": {
			tree: fixtureLendLimit, pre: []charge{{"t/a", h100, gpu(5)}}, leaf: "t/b", class: h100, milli: gpu(4), wantBlocker: "t",
			wantReason: "tenant t has no idle nvidia-h100 quota to lend",
		},
		"multi-level: project borrows from its team's tenant": {
			tree: fixtureMultiLevel, leaf: "research/vision/detr", class: h100, milli: gpu(8), wantOK: true, wantBorrow: gpu(4),
		},
		"multi-level: tenant borrows another tenant's lendable quota": {
			tree: fixtureMultiLevel, leaf: "research/vision/detr", class: h100, milli: gpu(10), wantOK: true, wantBorrow: gpu(6),
		},
		"multi-level: other tenant's reserve is not lent": {
			tree: fixtureMultiLevel, leaf: "research/vision/detr", class: h100, milli: gpu(11), wantBorrow: gpu(7), wantBlocker: "",
			wantReason: "the federation has no idle nvidia-h100 quota to lend: total usage 6 of 16 GPUs held (0 in use + 6 reserved by sub-queues that do not lend it) (sum of tenant nominals), 11 more requested",
		},
		"multi-level: sibling team's usage counts": {
			tree: fixtureMultiLevel, pre: []charge{{"research/nlp/llm", h100, gpu(4)}, {"infra/ci", h100, gpu(2)}},
			leaf: "research/vision/detr", class: h100, milli: gpu(6), wantOK: true, wantBorrow: gpu(2),
		},
		"multi-level: team at tenant's limit": {
			tree: fixtureTenantBorrowLimit, leaf: "research/vision", class: h100, milli: gpu(11), wantBorrow: gpu(3), wantBlocker: "research",
			wantReason: "tenant research has no idle nvidia-h100 quota to lend: cohort usage 0 of 10 GPUs (nominal 8 + borrow limit 2), 11 more requested",
		},
		"multi-level: tenant borrow limit allows": {
			tree: fixtureTenantBorrowLimit, leaf: "research/vision", class: h100, milli: gpu(10), wantOK: true, wantBorrow: gpu(2),
		},
		"over-committed parent caps children within nominal": {
			tree: fixtureOvercommitted, pre: []charge{{"t/a", h100, gpu(4)}}, leaf: "t/b", class: h100, milli: gpu(1), wantBlocker: "t",
			wantReason: "tenant t has no idle nvidia-h100 quota to lend: cohort usage 4 of 4 GPUs (nominal 4 + borrow limit 0), 1 more requested",
		},
		"fractional borrowing within limit": {
			tree: fixtureFractional, leaf: "t/a", class: h100, milli: gpu(0.75), wantOK: true, wantBorrow: gpu(0.25),
		},
		"fractional limit hit": {
			tree: fixtureFractional, pre: []charge{{"t/a", h100, gpu(0.5)}}, leaf: "t/a", class: h100, milli: gpu(0.3), wantBorrow: gpu(0.3), wantBlocker: "t/a",
			wantReason: "queue t/a would exceed its nvidia-h100 limit: 0.5 of 0.75 GPUs (nominal 0.5 + borrow limit 0.25), 0.3 more requested",
		},
		"fractional at twelve and a half": {
			tree: fixtureFractional, pre: []charge{{"t/b", h100, gpu(12.5)}}, leaf: "t/b", class: h100, milli: gpu(0.001), wantBorrow: 1, wantBlocker: "t/b",
			wantReason: "queue t/b would exceed its nvidia-h100 limit: 12.5 of 12.5 GPUs (nominal 12.5 + borrow limit 0), 0.001 more requested",
		},
		"no quota for the class": {
			tree: fixtureSiblings, leaf: "t/a", class: t4, milli: gpu(1), wantBorrow: gpu(1), wantBlocker: "t/a",
			wantReason: "queue t/a has no nvidia-t4 quota (nominal 0, borrow limit 0), 1 more requested",
		},
		"star entry for an unlisted class": {
			tree: fixtureFractional, leaf: "t/b", class: t4, milli: gpu(2), wantOK: true,
		},
		"star entry limit": {
			tree: fixtureFractional, leaf: "t/b", class: t4, milli: gpu(2.5), wantBorrow: gpu(0.5), wantBlocker: "t/b",
			wantReason: "queue t/b would exceed its nvidia-t4 limit: 0 of 2 GPUs",
		},
		"interior queue": {
			tree: fixtureMultiLevel, leaf: "research/vision", class: h100, milli: 1, wantBlocker: "research/vision",
			wantReason: "queue research/vision is not a leaf queue; submit to one of its leaves",
		},
		"unknown queue": {
			tree: fixtureSiblings, leaf: "t/zz", class: h100, milli: 1, wantBlocker: "t/zz", wantReason: "queue t/zz does not exist",
		},
		"negative amount": {
			tree: fixtureSiblings, leaf: "t/a", class: h100, milli: -1, wantBlocker: "t/a", wantReason: "milli: must be >= 0, got -1",
		},
		"bad class name": {
			tree: fixtureSiblings, leaf: "t/a", class: "", milli: 1, wantBlocker: "t/a", wantReason: "class must not be empty",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tree := tc.tree(t)
			applyCharges(t, tree, tc.pre)
			v := tree.Check(tc.leaf, tc.class, tc.milli)
			if v.OK != tc.wantOK {
				t.Fatalf("Check OK = %v, want %v (reason %q)", v.OK, tc.wantOK, v.Reason)
			}
			if v.Borrowed != tc.wantBorrow {
				t.Errorf("Borrowed = %d, want %d", v.Borrowed, tc.wantBorrow)
			}
			if !tc.wantOK {
				if v.Blocker != tc.wantBlocker {
					t.Errorf("Blocker = %q, want %q", v.Blocker, tc.wantBlocker)
				}
				if !strings.Contains(v.Reason, tc.wantReason) {
					t.Errorf("Reason = %q\nwant it to contain %q", v.Reason, tc.wantReason)
				}
			} else if v.Reason != "" {
				t.Errorf("OK verdict has reason %q", v.Reason)
			}
			if got := tree.Fits(tc.leaf, tc.class, tc.milli); got != tc.wantOK {
				t.Errorf("Fits = %v, want %v", got, tc.wantOK)
			}
			q, qok := tree.ID(tc.leaf)
			c, cok := tree.ClassID(tc.class)
			if qok && cok {
				if v2 := tree.CheckID(q, c, tc.milli); v2 != v {
					t.Errorf("CheckID = %+v, Check = %+v", v2, v)
				}
				if got := tree.FitsID(q, c, tc.milli); got != tc.wantOK {
					t.Errorf("FitsID = %v, want %v", got, tc.wantOK)
				}
			}
		})
	}
}

func TestChargeAccounting(t *testing.T) {
	tree := fixtureMultiLevel(t)
	applyCharges(t, tree, []charge{
		{"research/vision/detr", h100, gpu(6)},
		{"research/nlp/llm", h100, gpu(1.5)},
		{"infra/ci", h100, gpu(2)},
	})
	tests := map[string]struct {
		path            string
		usage, borrowed int64
	}{
		"project": {"research/vision/detr", gpu(6), gpu(2)},
		"team":    {"research/vision", gpu(6), gpu(2)},
		"tenant":  {"research", gpu(7.5), 0},
		"other":   {"infra", gpu(2), 0},
		"root":    {"", gpu(9.5), 0},
		"unknown": {"nope", 0, 0},
	}
	for name, tc := range tests {
		if got := tree.Usage(tc.path, h100); got != tc.usage {
			t.Errorf("%s: Usage(%q) = %d, want %d", name, tc.path, got, tc.usage)
		}
		if got := tree.Borrowing(tc.path, h100); got != tc.borrowed {
			t.Errorf("%s: Borrowing(%q) = %d, want %d", name, tc.path, got, tc.borrowed)
		}
	}
	// infra keeps 6 GPUs for itself while it uses only 2.
	if got, want := tree.Holding("infra", h100), gpu(6); got != want {
		t.Errorf("Holding(infra) = %d, want %d", got, want)
	}
	if got := tree.Usage("research", t4); got != 0 {
		t.Errorf("Usage of an unknown class = %d", got)
	}
}

func TestRelease(t *testing.T) {
	tests := map[string]struct {
		tree        func(testing.TB) *Tree
		pre         []charge
		leaf, class string
		milli       int64
		wantErr     string
		wantUsage   map[string]int64 // path -> h100 usage after
		thenCheck   charge
		thenOK      bool
	}{
		"release frees borrowed quota": {
			tree: fixtureSiblings, pre: []charge{{"t/a", h100, gpu(8)}}, leaf: "t/a", class: h100, milli: gpu(2),
			wantUsage: map[string]int64{"t/a": gpu(6), "t": gpu(6), "": gpu(6)},
			thenCheck: charge{"t/a", h100, gpu(2)}, thenOK: true,
		},
		"release lets a lender use its quota": {
			tree: fixtureSiblings, pre: []charge{{"t/b", h100, gpu(8)}}, leaf: "t/b", class: h100, milli: gpu(3),
			wantUsage: map[string]int64{"t/b": gpu(5), "t/a": 0, "": gpu(5)},
			thenCheck: charge{"t/a", h100, gpu(3)}, thenOK: true,
		},
		"partial release keeps the block": {
			tree: fixtureSiblings, pre: []charge{{"t/b", h100, gpu(8)}}, leaf: "t/b", class: h100, milli: gpu(2.5),
			wantUsage: map[string]int64{"t/b": gpu(5.5)},
			thenCheck: charge{"t/a", h100, gpu(3)}, thenOK: false,
		},
		"over-release clamps at zero": {
			tree: fixtureSiblings, pre: []charge{{"t/a", h100, gpu(1)}}, leaf: "t/a", class: h100, milli: gpu(2),
			wantErr: "released more than the queue uses", wantUsage: map[string]int64{"t/a": 0, "t": 0, "": 0},
			thenCheck: charge{"t/a", h100, gpu(8)}, thenOK: true,
		},
		"unknown queue": {
			tree: fixtureSiblings, pre: []charge{{"t/a", h100, gpu(1)}}, leaf: "t/x", class: h100, milli: 1,
			wantErr: "leaf: queue t/x does not exist", wantUsage: map[string]int64{"t/a": gpu(1)},
		},
		"interior queue": {
			tree: fixtureSiblings, pre: []charge{{"t/a", h100, gpu(1)}}, leaf: "t", class: h100, milli: 1,
			wantErr: "not a leaf", wantUsage: map[string]int64{"t/a": gpu(1), "t": gpu(1)},
		},
		"negative amount": {
			tree: fixtureSiblings, pre: []charge{{"t/a", h100, gpu(1)}}, leaf: "t/a", class: h100, milli: -5,
			wantErr: "milli: must be >= 0", wantUsage: map[string]int64{"t/a": gpu(1)},
		},
		"class never charged": {
			tree: fixtureSiblings, leaf: "t/a", class: t4, milli: 1, wantErr: "class: \"nvidia-t4\" has no usage",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tree := tc.tree(t)
			applyCharges(t, tree, tc.pre)
			err := tree.TryRelease(tc.leaf, tc.class, tc.milli)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("TryRelease error = %v, want %q", err, tc.wantErr)
			}
			for p, want := range tc.wantUsage {
				if got := tree.Usage(p, h100); got != want {
					t.Errorf("Usage(%q) = %d, want %d", p, got, want)
				}
			}
			if tc.thenCheck.leaf != "" {
				if v := tree.Check(tc.thenCheck.leaf, tc.thenCheck.class, tc.thenCheck.milli); v.OK != tc.thenOK {
					t.Errorf("then Check = %+v, want OK %v", v, tc.thenOK)
				}
			}
		})
	}
}

func TestReleaseMirrorsCharge(t *testing.T) {
	// Release with the string API, the ID API and the ignoring variant all
	// restore the same state as before the charge.
	tree := fixtureMultiLevel(t)
	before := snapshot(tree)
	q, _ := tree.ID("research/vision/detr")
	c, _ := tree.ClassID(h100)
	tree.Charge("research/vision/detr", h100, gpu(3))
	tree.ChargeID(q, c, gpu(2))
	if got := tree.Usage("research", h100); got != gpu(5) {
		t.Fatalf("usage after charges = %d", got)
	}
	tree.Release("research/vision/detr", h100, gpu(3))
	tree.ReleaseID(q, c, gpu(2))
	if after := snapshot(tree); after != before {
		t.Fatalf("state after release differs:\n%s\nwant\n%s", after, before)
	}
	// Ignored input leaves the tree unchanged.
	tree.Charge("research", h100, 5)
	tree.Charge("research/vision/detr", h100, -5)
	tree.Charge("research/vision/detr", "", 5)
	tree.ChargeID(q, 99, 5)
	tree.ChargeID(99, c, 5)
	if after := snapshot(tree); after != before {
		t.Fatalf("ignored input changed the tree:\n%s", after)
	}
}

func TestChargeInternsNewClass(t *testing.T) {
	tree := fixtureFractional(t)
	if _, ok := tree.ClassID(t4); ok {
		t.Fatalf("t4 known before any charge")
	}
	clone := tree.Clone()
	tree.Charge("t/b", t4, gpu(1.5))
	if got := tree.Usage("t/b", t4); got != gpu(1.5) {
		t.Fatalf("usage of a new class = %d", got)
	}
	if v := tree.Check("t/b", t4, gpu(0.5)); !v.OK {
		t.Fatalf("star quota of new class: %+v", v)
	}
	if v := tree.Check("t/b", t4, gpu(0.501)); v.OK {
		t.Fatalf("star limit of new class not enforced")
	}
	if got := clone.Usage("t/b", t4); got != 0 {
		t.Fatalf("a clone made before interning sees usage %d", got)
	}
	if _, ok := clone.ClassID(t4); ok {
		t.Fatalf("interning leaked into an earlier clone")
	}
	if _, err := tree.InternClass("bad class"); err == nil {
		t.Fatalf("InternClass accepted a bad name")
	}
}
