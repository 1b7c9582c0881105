package dispatch

import (
	"slices"
	"testing"
	"time"
)

func TestPacerGap(t *testing.T) {
	ms := time.Millisecond
	// Each step records its cycles on top of the steps before it.
	steps := []struct {
		name   string
		record []time.Duration
		want   time.Duration
	}{
		{"no cycles yet: the minimum period", nil, 50 * ms},
		{"cycles of 40ms", slices.Repeat([]time.Duration{40 * ms}, 4), 80 * ms},
		// One cycle stretched by a collection does not stretch the gap.
		{"after one 900ms outlier", []time.Duration{900 * ms}, 80 * ms},
		// A state where every cycle is slow does.
		{"after three 300ms cycles", slices.Repeat([]time.Duration{300 * ms}, 3), 600 * ms},
		// Fast cycles never go under the minimum period.
		{"fast cycles: the minimum period", slices.Repeat([]time.Duration{ms}, 5), 50 * ms},
	}
	var p pacer
	for _, s := range steps {
		for _, d := range s.record {
			p.record(d)
		}
		if g := p.gap(50 * ms); g != s.want {
			t.Fatalf("%s: gap %v, want %v", s.name, g, s.want)
		}
	}
}
