package quota

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

const (
	h100 = "nvidia-h100"
	t4   = "nvidia-t4"
	unl  = -1.0 // unlimited, in the GPU-valued builder arguments
)

// gpu converts GPUs to milli-GPUs.
func gpu(x float64) int64 { return int64(math.Round(x * 1000)) }

// limGPU builds Limits from GPU figures; a negative figure is Unlimited.
func limGPU(nominal, borrow, lend float64) Limits {
	conv := func(v float64) int64 {
		if v < 0 {
			return Unlimited
		}
		return gpu(v)
	}
	return Limits{Nominal: gpu(nominal), BorrowLimit: conv(borrow), LendLimit: conv(lend)}
}

// queueBuilder is a fluent QueueSpec builder: queue("t/a").quota(h100, 4, 4, unl).obj().
type queueBuilder struct{ s QueueSpec }

func queue(path string) *queueBuilder { return &queueBuilder{s: QueueSpec{Path: path}} }

func (b *queueBuilder) weight(w float64) *queueBuilder { b.s.Weight = w; return b }

func (b *queueBuilder) quota(class string, nominal, borrow, lend float64) *queueBuilder {
	return b.limits(class, limGPU(nominal, borrow, lend))
}

func (b *queueBuilder) limits(class string, l Limits) *queueBuilder {
	if b.s.Limits == nil {
		b.s.Limits = map[string]Limits{}
	}
	b.s.Limits[class] = l
	return b
}

func (b *queueBuilder) obj() QueueSpec { return b.s }

func mustTree(tb testing.TB, qs ...*queueBuilder) *Tree {
	tb.Helper()
	specs := make([]QueueSpec, len(qs))
	for i, q := range qs {
		specs[i] = q.obj()
	}
	t, err := NewTree(specs)
	if err != nil {
		tb.Fatalf("NewTree: %v", err)
	}
	return t
}

// charge is one pre-existing usage in a test fixture.
type charge struct {
	leaf, class string
	milli       int64
}

func applyCharges(tb testing.TB, t *Tree, cs []charge) {
	tb.Helper()
	for _, c := range cs {
		if err := t.TryCharge(c.leaf, c.class, c.milli); err != nil {
			tb.Fatalf("TryCharge(%q, %q, %d): %v", c.leaf, c.class, c.milli, err)
		}
	}
}

// snapshot renders every queue's usage and holding for every class the
// tree knows, for exact before/after comparisons.
func snapshot(t *Tree) string {
	var b strings.Builder
	for _, c := range t.Classes() {
		for _, p := range append([]string{""}, t.Queues()...) {
			fmt.Fprintf(&b, "%s %q u=%d h=%d\n", c, p, t.Usage(p, c), t.Holding(p, c))
		}
	}
	return b.String()
}

// epoch is a fixed instant for tests; no test reads the wall clock.
var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
