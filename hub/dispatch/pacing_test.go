package dispatch

import (
	"testing"
	"time"
)

func TestPacerGap(t *testing.T) {
	ms := time.Millisecond
	var p pacer
	if g := p.gap(50 * ms); g != 50*ms {
		t.Fatalf("no cycles yet: gap %v, want the minimum period", g)
	}
	for range 4 {
		p.record(40 * ms)
	}
	if g := p.gap(50 * ms); g != 80*ms {
		t.Fatalf("cycles of 40ms: gap %v, want 80ms", g)
	}
	// One cycle stretched by a collection does not stretch the gap.
	p.record(900 * ms)
	if g := p.gap(50 * ms); g != 80*ms {
		t.Fatalf("after one 900ms outlier: gap %v, want 80ms", g)
	}
	// A state where every cycle is slow does.
	for range 3 {
		p.record(300 * ms)
	}
	if g := p.gap(50 * ms); g != 600*ms {
		t.Fatalf("after three 300ms cycles: gap %v, want 600ms", g)
	}
	// Fast cycles never go under the minimum period.
	for range 5 {
		p.record(ms)
	}
	if g := p.gap(50 * ms); g != 50*ms {
		t.Fatalf("fast cycles: gap %v, want the minimum period", g)
	}
}
