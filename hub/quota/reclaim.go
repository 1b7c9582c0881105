package quota

import (
	"sort"
)

// ReclaimNeed says that the usage of leaf queue Queue must shrink by at
// least Milli milli-GPUs.
type ReclaimNeed struct {
	Queue string
	Milli int64
}

// ReclaimNeeds answers: leaf wants milli more of class and Check fails.
// Which borrowing leaves must shrink, and by how much at least, so that
// Check would pass? Where a queue's limit blocks, usage is reclaimed from
// the borrowing siblings of each queue on the leaf's path below it that
// stays within its own nominal (it lent that quota out, so it may take it
// back), nearest level first.
//
// needs is sorted by queue path; releasing at least Milli at each listed
// leaf makes Check(leaf, class, milli) OK. If Check already passes, needs is
// empty and ok is true. ok is false when reclaim cannot help: the leaf would
// exceed its own nominal + borrow limit, or too little is borrowed from
// queues on its path that are within their nominal. The
// victim order (largest borrower first, then path) is described in the
// design note. It does not change the tree.
func (t *Tree) ReclaimNeeds(leaf, class string, milli int64) (needs []ReclaimNeed, ok bool) {
	q, found := t.s.index[leaf]
	if !found || !t.s.leaf[q] || milli < 0 || milli > MaxMilli {
		return nil, false
	}
	c, col, known := t.colFor(class)
	if !known {
		// Nothing of this class is in use, so nothing can be reclaimed.
		return nil, ValidateClass(class) == nil && t.Fits(leaf, class, milli)
	}
	if t.FitsID(q, c, milli) {
		return nil, true
	}
	r := &reclaimer{
		t:    t,
		lim:  col.lim,
		u:    append([]int64(nil), t.u[c]...),
		h:    append([]int64(nil), t.h[c]...),
		need: map[QueueID]int64{},
	}
	r.apply(q, milli)
	var path []QueueID // the leaf, its ancestors, the root
	for n := q; n >= 0; n = t.s.parent[n] {
		path = append(path, n)
	}
	for i, n := range path {
		if r.h[n] <= r.lim[n].cap {
			continue
		}
		if i == 0 {
			return nil, false // the leaf's own nominal + borrow limit
		}
		// n blocks. Reclaim from the borrowing siblings of each queue on
		// the path below n that is within its nominal, nearest level first.
		for j := 1; j <= i && r.h[n] > r.lim[n].cap; j++ {
			m, c := path[j], path[j-1]
			if r.held(c) > r.lim[c].nom {
				continue // c borrows here itself: not entitled at this level
			}
			for _, s := range r.sorted(t.s.children[m], c, r.borrowing) {
				excess := r.h[n] - r.lim[n].cap
				if excess <= 0 {
					break
				}
				r.shrink(s, min(excess, r.borrowing(s)))
			}
		}
		if r.h[n] > r.lim[n].cap {
			return nil, false
		}
	}
	ids := make([]QueueID, 0, len(r.need))
	for id := range r.need {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] }) // ids are in path order
	needs = make([]ReclaimNeed, 0, len(ids))
	for _, id := range ids {
		needs = append(needs, ReclaimNeed{Queue: t.s.paths[id], Milli: r.need[id]})
	}
	return needs, true
}

// reclaimer works on a scratch copy of one class's usage and holdings.
type reclaimer struct {
	t    *Tree
	lim  []qlim
	u, h []int64
	need map[QueueID]int64
}

func (r *reclaimer) apply(q QueueID, d int64) {
	dh := d
	for n := q; n >= 0; n = r.t.s.parent[n] {
		r.u[n] += d
		if dh != 0 {
			old := r.h[n]
			r.h[n] += dh
			g := r.lim[n].g
			dh = max(r.h[n], g) - max(old, g)
		}
	}
}

// held is what a queue holds of its parent's pool: max(holdings, reserved).
func (r *reclaimer) held(n QueueID) int64 { return max(r.h[n], r.lim[n].g) }

// borrowing is how far a queue holds more than its nominal.
func (r *reclaimer) borrowing(n QueueID) int64 { return max(0, r.held(n)-r.lim[n].nom) }

// shrinkable is how far a queue's hold can fall by releasing usage below it.
func (r *reclaimer) shrinkable(n QueueID) int64 { return max(0, r.h[n]-r.lim[n].g) }

// sorted returns kids except skip with key > 0, largest key first, then path.
func (r *reclaimer) sorted(kids []QueueID, skip QueueID, key func(QueueID) int64) []QueueID {
	out := make([]QueueID, 0, len(kids))
	for _, k := range kids {
		if k != skip && key(k) > 0 {
			out = append(out, k)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return key(out[i]) > key(out[j]) })
	return out
}

// shrink lowers what n holds of its parent's pool by up to y, releasing
// usage at leaves below it (borrowers first), and returns how much it fell.
func (r *reclaimer) shrink(n QueueID, y int64) int64 {
	y = min(y, r.shrinkable(n))
	if y <= 0 {
		return 0
	}
	if r.t.s.leaf[n] {
		r.apply(n, -y)
		r.need[n] += y
		return y
	}
	before := r.h[n]
	kids := r.t.s.children[n]
	for _, k := range r.sorted(kids, -1, r.borrowing) {
		rem := y - (before - r.h[n])
		if rem <= 0 {
			break
		}
		r.shrink(k, min(rem, r.borrowing(k)))
	}
	for _, k := range r.sorted(kids, -1, r.shrinkable) {
		rem := y - (before - r.h[n])
		if rem <= 0 {
			break
		}
		r.shrink(k, rem)
	}
	return before - r.h[n]
}
