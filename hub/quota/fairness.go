package quota

import "math"

// FairShares splits capacity (milli-GPUs of one accelerator class) among
// the leaf queues that want some of it, the way a weighted fair scheduler
// would if it could move work freely: at every level of the tree a queue's
// share is divided among its children by weight, and a child never gets
// more than it asks for; what it leaves is split again among its siblings
// (water-filling, like Armada's demand-capped fair share).
//
// demand is what each leaf asks for in this class: the milli it runs plus
// the milli its pending work requests. Paths that are not leaves of t are
// ignored. The result holds every leaf with a positive demand; the shares
// sum to min(capacity, total demand).
func FairShares(t *Tree, demand map[string]int64, capacity int64) map[string]float64 {
	out := map[string]float64{}
	if t == nil || t.s == nil || capacity <= 0 {
		return out
	}
	n := len(t.s.paths)
	d := make([]float64, n)
	for p, m := range demand {
		if id, ok := t.s.index[p]; ok && t.s.leaf[id] && m > 0 {
			d[id] = float64(m)
		}
	}
	var sum func(q QueueID) float64
	sum = func(q QueueID) float64 {
		for _, k := range t.s.children[q] {
			d[q] += sum(k)
		}
		return d[q]
	}
	sum(RootID)
	var fill func(q QueueID, share float64)
	fill = func(q QueueID, share float64) {
		if t.s.leaf[q] && q != RootID {
			if share > 0 {
				out[t.s.paths[q]] = share
			}
			return
		}
		var active []QueueID
		for _, k := range t.s.children[q] {
			if d[k] > 0 {
				active = append(active, k)
			}
		}
		alloc := make(map[QueueID]float64, len(active))
		left := share
		for len(active) > 0 && left > 0 {
			var w float64
			for _, k := range active {
				w += weightOf(t, k)
			}
			capped := false
			next := active[:0:0]
			for _, k := range active {
				if give := left * weightOf(t, k) / w; d[k] <= give {
					alloc[k], capped = d[k], true
				} else {
					next = append(next, k)
				}
			}
			if !capped {
				for _, k := range active {
					alloc[k] = left * weightOf(t, k) / w
				}
				break
			}
			left = share
			for _, v := range alloc {
				left -= v
			}
			active = next
		}
		for _, k := range t.s.children[q] {
			if alloc[k] > 0 {
				fill(k, alloc[k])
			}
		}
	}
	fill(RootID, math.Min(float64(capacity), d[RootID]))
	return out
}

func weightOf(t *Tree, q QueueID) float64 {
	if w := t.s.weight[q]; w > 0 {
		return w
	}
	return 1
}

// FairnessError is Armada's fairness error for one accelerator class: the
// sum over leaf queues of how far each falls short of its fair share
// (FairShares), as a fraction of capacity. It is 0 when every queue gets
// at least its fair share and approaches 1 when the whole class goes to
// queues that deserve none of it. Because the fair shares and the usage
// both sum to at most capacity, it equals half the sum of
// |actual share - fair share| when the class is fully used.
//
// usage is the milli each leaf runs now in this class, demand what it runs
// plus what it waits for (see FairShares); capacity is raised to the total
// usage when it is smaller (capacity reports lag the usage charged).
func FairnessError(t *Tree, usage, demand map[string]int64, capacity int64) float64 {
	var used int64
	for p, u := range usage {
		if id, ok := t.ID(p); ok && t.LeafID(id) && u > 0 {
			used += u
		}
	}
	capacity = max(capacity, used)
	if capacity <= 0 {
		return 0
	}
	var short float64
	for p, f := range FairShares(t, demand, capacity) {
		short += math.Max(0, f-float64(usage[p]))
	}
	return short / float64(capacity)
}
