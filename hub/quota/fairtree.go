package quota

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"time"
)

// fair holds one Fair Tree evaluation, by QueueID.
type fair struct {
	usage []float64 // decayed usage as of now
	lf    []float64 // level fairshare among siblings
}

func evalFair(t *Tree, l *Ledger, now time.Time) *fair {
	n := len(t.s.paths)
	f := &fair{usage: make([]float64, n), lf: make([]float64, n)}
	if l != nil {
		for i := 1; i < n; i++ {
			f.usage[i] = l.Usage(t.s.paths[i], now)
		}
	}
	f.lf[RootID] = math.Inf(1)
	for p := range t.s.children {
		kids := t.s.children[p]
		var w, u float64
		for _, k := range kids {
			w += t.s.weight[k]
			u += f.usage[k]
		}
		for _, k := range kids {
			f.lf[k] = levelFairshare(t.s.weight[k]/w, f.usage[k], u)
		}
	}
	return f
}

// levelFairshare is Slurm's LF = S / U, with S the normalised share and U
// the usage normalised among siblings; zero usage is +Inf (ranks first).
func levelFairshare(s, u, siblingsUsage float64) float64 {
	if !(u > 0) || !(siblingsUsage > 0) {
		return math.Inf(1)
	}
	return s / (u / siblingsUsage)
}

// lfKey rounds a level fairshare to about 12 significant digits, so that
// siblings whose LF differ only by floating-point noise tie (and are then
// ordered by path). The map is monotone, so the order stays total.
func lfKey(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) || v == 0 {
		return v
	}
	b := math.Float64bits(v)
	return math.Float64frombits((b + 1<<11) &^ (1<<12 - 1))
}

// LevelFairshare returns every queue's Level Fairshare LF = S / U among its
// siblings, where S is the queue's weight over the sum of its siblings'
// weights (itself included) and U its decayed usage over theirs; +Inf when
// its usage is zero. A nil ledger means no usage.
func LevelFairshare(t *Tree, l *Ledger, now time.Time) map[string]float64 {
	f := evalFair(t, l, now)
	out := make(map[string]float64, len(t.s.paths)-1)
	for i := 1; i < len(t.s.paths); i++ {
		out[t.s.paths[i]] = f.lf[i]
	}
	return out
}

// FairTree computes Slurm's Fair Tree fairshare factor of every leaf queue,
// in (0, 1]: at each level siblings are sorted by level fairshare, highest
// first (zero usage first, ties by path), and a depth-first walk hands out
// ranks from the number of leaves n down to 1; the factor is rank / n, so
// the most deserving leaf gets 1.0. A nil ledger means no usage.
func FairTree(t *Tree, l *Ledger, now time.Time) map[string]float64 {
	if t == nil || t.s == nil {
		return map[string]float64{}
	}
	out := make(map[string]float64, t.s.leaves)
	t.fairTree(l, now, func(q QueueID, factor float64) { out[t.s.paths[q]] = factor })
	return out
}

// FairTreeIDs is FairTree indexed by QueueID: out[q] is the factor of leaf
// q and 0 for interior queues and the root. It reuses out when it is long
// enough.
func FairTreeIDs(t *Tree, l *Ledger, now time.Time, out []float64) []float64 {
	n := len(t.s.paths)
	if cap(out) < n {
		out = make([]float64, n)
	}
	out = out[:n]
	clear(out)
	t.fairTree(l, now, func(q QueueID, factor float64) { out[q] = factor })
	return out
}

func (t *Tree) fairTree(l *Ledger, now time.Time, emit func(QueueID, float64)) {
	n := t.s.leaves
	if n == 0 {
		return
	}
	f := evalFair(t, l, now)
	rank := n
	order := make([]QueueID, 0, 16)
	var visit func(p QueueID)
	visit = func(p QueueID) {
		start := len(order)
		order = append(order, t.s.children[p]...)
		kids := order[start:]
		// children are in path order; a stable sort keeps it for ties.
		sort.SliceStable(kids, func(i, j int) bool { return lfKey(f.lf[kids[i]]) > lfKey(f.lf[kids[j]]) })
		for _, k := range kids {
			if t.s.leaf[k] {
				emit(k, float64(rank)/float64(n))
				rank--
			} else {
				visit(k)
			}
		}
		order = order[:start]
	}
	visit(RootID)
}

// Pending is one item to order for admission.
type Pending struct {
	ID        string
	Queue     string
	Fairshare float64 // the queue's FairTree factor
	Priority  int64
	Created   time.Time
}

// Compare orders pending items: fairshare factor descending, then priority
// descending, then creation time ascending, then id ascending. It is a
// total order (a NaN factor sorts as the lowest).
func Compare(a, b Pending) int {
	if c := cmp.Compare(fsKey(b.Fairshare), fsKey(a.Fairshare)); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

func fsKey(v float64) float64 {
	if math.IsNaN(v) {
		return math.Inf(-1)
	}
	return v
}

// Order sorts items in place by Compare.
func Order(items []Pending) { slices.SortStableFunc(items, Compare) }
