package store

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// A reader that applies deltas ends up with exactly the cache's content,
// through puts, overwrites and deletes, and is sent a full snapshot when it
// is too far behind for the journal.
func TestDeltaReplaysEveryChange(t *testing.T) {
	s := newStore(t)
	prefix := testPrefix(t)
	c, _, _ := startCache(t, s, prefix)
	ctx := testCtx(t, 30*time.Second)
	cli := s.Client()

	mirror := map[string]Item{}
	var pos uint64
	apply := func() Delta {
		d := c.Delta(pos)
		if d.Full {
			clear(mirror)
		}
		maps.Copy(mirror, d.Items)
		for _, k := range d.Deleted {
			delete(mirror, k)
		}
		pos = d.Pos
		return d
	}
	if d := apply(); !d.Full {
		t.Fatal("the first delta is not full")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		for range 10 {
			k := fmt.Sprintf("%s/k%02d", prefix, rng.IntN(15))
			var err error
			if rng.IntN(4) == 0 {
				_, err = cli.Delete(ctx, k)
			} else {
				_, err = cli.Put(ctx, k, fmt.Sprint(round))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		rev, err := cli.Get(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WaitForRevision(ctx, rev.Header.Revision); err != nil {
			t.Fatal(err)
		}
		if d := apply(); d.Full {
			t.Fatalf("round %d: full snapshot while the reader kept up", round)
		}
		want, _ := c.Snapshot()
		if !maps.EqualFunc(mirror, want, func(a, b Item) bool { return a.ModRev == b.ModRev && string(a.Value) == string(b.Value) }) {
			t.Fatalf("round %d: mirror %v != cache %v", round, slices.Sorted(maps.Keys(mirror)), slices.Sorted(maps.Keys(want)))
		}
	}
	// Nothing changed: an empty delta.
	if d := apply(); d.Full || len(d.Items) != 0 || len(d.Deleted) != 0 {
		t.Fatalf("idle delta %+v", d)
	}
	// A position from before the journal's start gets everything.
	c.mu.Lock()
	c.journal.base += 10
	c.mu.Unlock()
	if d := c.Delta(1); !d.Full || len(d.Items) != len(mirror) {
		t.Fatalf("stale position: full=%v items=%d, want full with %d", d.Full, len(d.Items), len(mirror))
	}
}

func TestJournalStaysBounded(t *testing.T) {
	c := &Cache{items: map[string]Item{}}
	for i := range 3 * journalCap {
		c.journalLocked(fmt.Sprint(i))
	}
	if n := len(c.journal.keys); n > journalCap {
		t.Fatalf("journal holds %d keys, cap %d", n, journalCap)
	}
	if end := c.journal.base + uint64(len(c.journal.keys)); end != 3*journalCap {
		t.Fatalf("journal end %d, want %d", end, 3*journalCap)
	}
	// The newest change is still there.
	if last := c.journal.keys[len(c.journal.keys)-1]; last != fmt.Sprint(3*journalCap-1) {
		t.Fatalf("last key %s", last)
	}
}
