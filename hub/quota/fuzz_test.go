package quota

import (
	"encoding/json"
	"sort"
	"testing"
	"time"
)

func FuzzLedgerUnmarshal(f *testing.F) {
	l := NewLedger(168*time.Hour, map[string]float64{h100: 2})
	l.Accrue("research/vision", h100, 1500, epoch, epoch.Add(time.Hour))
	good, _ := l.MarshalJSON()
	for _, seed := range []string{
		string(good),
		`{"version":1,"halfLife":"0s","usage":{}}`,
		`{"version":1,"halfLife":"1h","decayedTo":"2026-03-01T00:00:00Z","usage":{"a":1e308,"a/b":0}}`,
		`{"version":2}`, `{`, `null`, `[]`, `{"version":1,"halfLife":"-5m","usage":{}}`,
		`{"version":1,"halfLife":"1h","decayedTo":"0001-01-01T00:00:00Z","usage":{}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l := NewLedger(time.Hour, nil)
		if err := l.UnmarshalJSON(data); err != nil {
			return
		}
		out, err := l.MarshalJSON()
		if err != nil {
			t.Fatalf("MarshalJSON after a successful UnmarshalJSON: %v", err)
		}
		back := NewLedger(0, nil)
		if err := back.UnmarshalJSON(out); err != nil {
			t.Fatalf("re-decoding our own encoding %s: %v", out, err)
		}
		again, _ := back.MarshalJSON()
		if string(again) != string(out) {
			t.Fatalf("encoding not stable:\n%s\n%s", out, again)
		}
		now := l.DecayedTo().Add(time.Hour)
		for _, p := range l.Paths() {
			if u := l.Usage(p, now); u < 0 || u != u {
				t.Fatalf("usage of %s is %v", p, u)
			}
		}
	})
}

func FuzzNewTree(f *testing.F) {
	for _, seed := range []string{
		`[{"path":"research/vision/detr","weight":2,"limits":{"nvidia-h100":{"nominal":4000,"borrowLimit":-1,"lendLimit":1000}}},{"path":"research","limits":{"*":{"nominal":8000}}}]`,
		`[{"path":"a"},{"path":"a/b"},{"path":"a/b/c"}]`,
		`[{"path":"t","limits":{"x":{"nominal":1000,"borrowLimit":0,"lendLimit":0}}},{"path":"t/a","limits":{"x":{"nominal":4000,"lendLimit":0}}}]`,
		`[{"path":"A"}]`, `[{"path":"a","weight":-1}]`, `[]`, `null`, `[{"path":"a/b/c/d"}]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var specs []QueueSpec
		if json.Unmarshal(data, &specs) != nil {
			return
		}
		tree, err := NewTree(specs)
		if err != nil {
			if !IsInvalidSpec(err) {
				t.Fatalf("NewTree error %v does not wrap ErrInvalidSpec", err)
			}
			return
		}
		qs := tree.Queues()
		if !sort.StringsAreSorted(qs) {
			t.Fatalf("Queues not sorted: %v", qs)
		}
		for _, s := range specs {
			if _, ok := tree.ID(s.Path); !ok {
				t.Fatalf("queue %q missing", s.Path)
			}
		}
		classes := append([]string{"other"}, tree.Classes()...)
		for _, leaf := range tree.Leaves() {
			for _, c := range classes {
				before := snapshot(tree)
				v := tree.Check(leaf, c, 1000)
				if !v.OK && v.Reason == "" {
					t.Fatalf("refusal without reason")
				}
				m := tree.Mark()
				if v.OK {
					tree.Charge(leaf, c, 1000)
					if tree.Usage(leaf, c) != 1000 {
						t.Fatalf("charge not recorded")
					}
				}
				_, _ = tree.ReclaimNeeds(leaf, c, 2000)
				tree.Rollback(m)
				if snapshot(tree) != before {
					t.Fatalf("rollback did not restore the tree")
				}
			}
		}
		if got := FairTree(tree, nil, epoch); len(got) != len(tree.Leaves()) {
			t.Fatalf("FairTree has %d factors for %d leaves", len(got), len(tree.Leaves()))
		}
	})
}
