package embedetcd

import (
	"testing"
	"time"
)

// The plan compacts to the newest revision seen at least keep ago, never
// to a younger one, never twice to the same one, and so keeps between keep
// and keep plus one step of history.
func TestCompactPlanKeepsAtLeastItsWindow(t *testing.T) {
	const keep = 10 * time.Second
	step := keep / compactSteps
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	p := &compactPlan{keep: keep}
	seenAt := map[int64]time.Time{}
	var last int64
	compactions := 0
	for i := 0; i <= 200; i++ {
		now := t0.Add(time.Duration(i) * step)
		rev := int64(100 + 37*i)
		if i%7 == 3 { // an idle step: the revision did not move
			rev = int64(100 + 37*(i-1))
		}
		if _, ok := seenAt[rev]; !ok {
			seenAt[rev] = now
		}
		to, ok := p.observe(now, rev)
		if !ok {
			continue
		}
		compactions++
		p.compacted(to)
		at, known := seenAt[to]
		if !known {
			t.Fatalf("step %d: compacted to %d, a revision never observed", i, to)
		}
		if age := now.Sub(at); age < keep {
			t.Fatalf("step %d: compacted to %d, seen only %s ago (keep %s)", i, to, age, keep)
		}
		if to <= last {
			t.Fatalf("step %d: compacted to %d after %d", i, to, last)
		}
		// The revision just younger than keep must not have been
		// dropped: the newest old-enough one is what compacts.
		for r, when := range seenAt {
			if r > to && now.Sub(when) >= keep && r > last {
				t.Fatalf("step %d: compacted to %d though %d (seen %s ago) is old enough too", i, to, r, now.Sub(when))
			}
		}
		last = to
		if n := len(p.marks); n > compactSteps+2 {
			t.Fatalf("step %d: plan keeps %d marks, want at most %d", i, n, compactSteps+2)
		}
	}
	if compactions < 150 {
		t.Fatalf("%d compactions over 200 steps, want one nearly every step", compactions)
	}
}

// Nothing is compacted before anything is keep old.
func TestCompactPlanWaitsForItsWindow(t *testing.T) {
	p := &compactPlan{keep: time.Minute}
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 5; i++ {
		if to, ok := p.observe(t0.Add(time.Duration(i)*10*time.Second), int64(10+i)); ok {
			t.Fatalf("compacted to %d after %ds of a one-minute window", to, i*10)
		}
	}
	if to, ok := p.observe(t0.Add(time.Minute), 20); !ok || to != 10 {
		t.Fatalf("at one minute: compact to %d (%v), want 10, the revision seen a minute ago", to, ok)
	}
}
