package quota

import (
	"reflect"
	"testing"
)

func TestReclaimNeeds(t *testing.T) {
	tests := map[string]struct {
		tree        func(testing.TB) *Tree
		pre         []charge
		leaf, class string
		milli       int64
		want        []ReclaimNeed
		wantOK      bool
	}{
		"check already passes": {
			tree: fixtureSiblings, leaf: "t/a", class: h100, milli: gpu(4), wantOK: true,
		},
		"sibling borrower gives back what is needed": {
			tree: fixtureSiblings, pre: []charge{{"t/b", h100, gpu(8)}}, leaf: "t/a", class: h100, milli: gpu(2),
			want: []ReclaimNeed{{"t/b", gpu(2)}}, wantOK: true,
		},
		"largest borrower first": {
			tree: func(tb testing.TB) *Tree {
				return mustTree(tb, queue("t/a").quota(h100, 4, 0, unl), queue("t/b").quota(h100, 2, unl, unl), queue("t/c").quota(h100, 2, unl, unl))
			},
			pre:  []charge{{"t/b", h100, gpu(3)}, {"t/c", h100, gpu(5)}},
			leaf: "t/a", class: h100, milli: gpu(3),
			want: []ReclaimNeed{{"t/c", gpu(3)}}, wantOK: true,
		},
		"several borrowers when one is not enough": {
			tree: func(tb testing.TB) *Tree {
				return mustTree(tb, queue("t/a").quota(h100, 4, 0, unl), queue("t/b").quota(h100, 2, unl, unl), queue("t/c").quota(h100, 2, unl, unl))
			},
			pre:  []charge{{"t/b", h100, gpu(3)}, {"t/c", h100, gpu(5)}},
			leaf: "t/a", class: h100, milli: gpu(4),
			want: []ReclaimNeed{{"t/b", gpu(1)}, {"t/c", gpu(3)}}, wantOK: true,
		},
		"fractional reclaim": {
			tree: fixtureSiblings, pre: []charge{{"t/b", h100, gpu(7.75)}}, leaf: "t/a", class: h100, milli: gpu(0.5),
			want: []ReclaimNeed{{"t/b", gpu(0.25)}}, wantOK: true,
		},
		"across tenants": {
			tree: func(tb testing.TB) *Tree {
				return mustTree(tb, queue("a/x").quota(h100, 4, 0, unl), queue("b/y").quota(h100, 4, unl, unl))
			},
			pre:  []charge{{"b/y", h100, gpu(8)}},
			leaf: "a/x", class: h100, milli: gpu(4),
			want: []ReclaimNeed{{"b/y", gpu(4)}}, wantOK: true,
		},
		"nearest level first": {
			// t/x/p lends to its sibling t/x/q and, through team t/x, to team t/y.
			tree: func(tb testing.TB) *Tree {
				return mustTree(tb,
					queue("t/x/p").quota(h100, 4, 0, unl),
					queue("t/x/q").quota(h100, 0, unl, unl),
					queue("t/y").quota(h100, 4, unl, unl))
			},
			pre:  []charge{{"t/x/q", h100, gpu(2)}, {"t/y", h100, gpu(6)}},
			leaf: "t/x/p", class: h100, milli: gpu(3),
			want: []ReclaimNeed{{"t/x/q", gpu(2)}, {"t/y", gpu(1)}}, wantOK: true,
		},
		"inside a borrowing team, its borrowers first": {
			tree: func(tb testing.TB) *Tree {
				return mustTree(tb,
					queue("t/x/p").quota(h100, 4, 0, unl),
					queue("t/y").quota(h100, 4, unl, unl),
					queue("t/y/q").quota(h100, 2, unl, unl),
					queue("t/y/r").quota(h100, 2, unl, unl))
			},
			pre:  []charge{{"t/y/q", h100, gpu(5)}, {"t/y/r", h100, gpu(3)}},
			leaf: "t/x/p", class: h100, milli: gpu(4),
			want: []ReclaimNeed{{"t/y/q", gpu(3)}, {"t/y/r", gpu(1)}}, wantOK: true,
		},
		"over-committed borrowing team": {
			// Team t/y may use 2 but its projects' nominals add to 4.
			tree: func(tb testing.TB) *Tree {
				return mustTree(tb,
					queue("t/x/p").quota(h100, 6, 0, unl),
					queue("t/y").quota(h100, 2, unl, unl),
					queue("t/y/q").quota(h100, 2, unl, unl),
					queue("t/y/r").quota(h100, 2, unl, unl))
			},
			pre:  []charge{{"t/y/q", h100, gpu(2)}, {"t/y/r", h100, gpu(2)}},
			leaf: "t/x/p", class: h100, milli: gpu(6),
			want: []ReclaimNeed{{"t/y/q", gpu(2)}}, wantOK: true,
		},
		"lender's reserve is kept by the lend limit": {
			tree: fixtureLendLimit, pre: []charge{{"t/a", h100, gpu(5)}}, leaf: "t/b", class: h100, milli: gpu(4),
			want: []ReclaimNeed{{"t/a", gpu(1)}}, wantOK: true,
		},
		"leaf beyond its own limit": {
			tree: fixtureSiblings, pre: []charge{{"t/b", h100, gpu(8)}}, leaf: "t/a", class: h100, milli: gpu(9),
		},
		"requester that would borrow is not entitled": {
			tree: fixtureSiblings, pre: []charge{{"t/b", h100, gpu(8)}}, leaf: "t/a", class: h100, milli: gpu(6),
		},
		"nobody borrows in an over-committed tenant": {
			tree: fixtureOvercommitted, pre: []charge{{"t/a", h100, gpu(4)}}, leaf: "t/b", class: h100, milli: gpu(1),
		},
		"another tenant's reserve cannot be reclaimed": {
			tree: fixtureMultiLevel, leaf: "research/vision/detr", class: h100, milli: gpu(11),
		},
		"unknown class that fits": {
			tree: fixtureFractional, leaf: "t/b", class: t4, milli: gpu(1), wantOK: true,
		},
		"unknown class that does not fit": {
			tree: fixtureFractional, leaf: "t/b", class: t4, milli: gpu(3),
		},
		"interior queue": {
			tree: fixtureMultiLevel, leaf: "research", class: h100, milli: 1,
		},
		"negative amount": {
			tree: fixtureSiblings, leaf: "t/a", class: h100, milli: -1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tree := tc.tree(t)
			applyCharges(t, tree, tc.pre)
			before := snapshot(tree)
			got, ok := tree.ReclaimNeeds(tc.leaf, tc.class, tc.milli)
			if ok != tc.wantOK || !reflect.DeepEqual(got, tc.want) && len(got)+len(tc.want) > 0 {
				t.Fatalf("ReclaimNeeds = %+v, %v; want %+v, %v", got, ok, tc.want, tc.wantOK)
			}
			if after := snapshot(tree); after != before {
				t.Fatalf("ReclaimNeeds changed the tree")
			}
			if !ok {
				return
			}
			// Releasing the needs makes the request fit.
			c := tree.Clone()
			for _, n := range got {
				if err := c.TryRelease(n.Queue, tc.class, n.Milli); err != nil {
					t.Fatalf("release %+v: %v", n, err)
				}
			}
			if v := c.Check(tc.leaf, tc.class, tc.milli); !v.OK {
				t.Fatalf("after releasing %+v, Check still fails: %s", got, v.Reason)
			}
		})
	}
}
