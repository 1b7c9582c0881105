package quota

import "math/bits"

// Headroom is the most milli of class that leaf could admit now without
// breaking a limit on its path to the root, borrowing included: the
// "available" figure of an explain. It is 0 for an unknown or inner queue.
// Admission is monotone in the amount, so a binary search over Fits finds
// it exactly.
func (t *Tree) Headroom(leaf, class string) int64 {
	if !t.Fits(leaf, class, 0) {
		return 0
	}
	lo, hi := int64(0), int64(MaxMilli) // Fits(lo) holds
	if t.Fits(leaf, class, hi) {
		return hi
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if t.Fits(leaf, class, mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// Lent estimates how much of a queue's idle nominal quota of class its
// siblings use now. The siblings' borrowing (usage above their nominal) is
// shared among the lenders in proportion to what each has idle and may
// lend, so the figures of one parent's children add up to what is
// borrowed. It is 0 for the root, an unknown path or class.
func (t *Tree) Lent(path, class string) int64 {
	id, ok := t.s.index[path]
	if !ok {
		return 0
	}
	c, col, known := t.colFor(class)
	if !known || t.s.parent[id] < 0 {
		return 0
	}
	parent := t.s.parent[id]
	var borrowed, idleAll, idleMine int64
	for q := range t.s.paths {
		if t.s.parent[q] != parent {
			continue
		}
		used, l := t.u[c][q], col.lim[q]
		borrowed += max(0, used-l.nom)
		lendable := l.nom
		if l.lend != Unlimited {
			lendable = min(l.nom, l.lend)
		}
		idle := max(0, min(l.nom-used, lendable))
		idleAll += idle
		if QueueID(q) == id {
			idleMine = idle
		}
	}
	if borrowed == 0 || idleMine == 0 {
		return 0
	}
	if borrowed >= idleAll {
		return idleMine
	}
	// borrowed * idleMine / idleAll, exact in 128 bits: the quotient is
	// below idleMine, so the division cannot overflow.
	hi, lo := bits.Mul64(uint64(borrowed), uint64(idleMine))
	q, _ := bits.Div64(hi, lo, uint64(idleAll))
	return int64(q)
}

// Ceiling is the most milli of class that leaf could ever hold under the
// current limits: what Headroom would say if no queue used anything. It
// reads only the limits and the quota other queues reserve (their nominal
// above their lend limit), never usage, so it is the same on every clone of
// a tree. A request above it can never be admitted until the limits change.
//
// blocker is the path of the queue whose limit binds first just above the
// ceiling ("" is the federation: the sum of the tenants' nominals). ok is
// false for an unknown or inner queue or an invalid class. A leaf that may
// borrow without limit up to an unlimited root has a ceiling of MaxMilli.
func (t *Tree) Ceiling(leaf, class string) (milli int64, blocker string, ok bool) {
	id, found := t.s.index[leaf]
	if !found || !t.s.leaf[id] {
		return 0, "", false
	}
	_, col, known := t.colFor(class)
	if !known && ValidateClass(class) != nil {
		return 0, "", false
	}
	h := col.h0
	if _, _, fits := t.walk(id, col, h, MaxMilli); fits {
		return MaxMilli, "", true
	}
	lo, hi := int64(-1), MaxMilli // walk(lo) holds (or lo is -1), walk(hi) fails
	if _, _, fits := t.walk(id, col, h, 0); fits {
		lo = 0
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if _, _, fits := t.walk(id, col, h, mid); fits {
			lo = mid
		} else {
			hi = mid
		}
	}
	at, _, _ := t.walk(id, col, h, hi)
	return max(lo, 0), t.s.paths[at], true
}
