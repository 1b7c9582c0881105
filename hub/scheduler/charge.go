package scheduler

import (
	"sort"

	"github.com/meridian-gpu/meridian/hub/quota"
)

// queueClass is one (queue, accelerator class) pair of running usage.
type queueClass struct{ queue, class string }

// chargeSum is running usage summed for one (queue, class) pair.
type chargeSum struct {
	key   queueClass
	valid int64 // what quota.Tree.Charge accepts: 0..MaxMilli per entry
	all   int64
	n     int // usage entries summed; the pair is gone at 0
}

// RunningCharge is the quota a list of running work holds, summed per
// (queue, class): what Decide charges to the queue tree before it
// decides. A caller that keeps its running list from cycle to cycle and
// changes it entry by entry keeps a RunningCharge beside it (Add each
// entry it appends, Remove each it takes out) and hands both over
// (Snapshot.Running, Snapshot.Charged): the core then does not sum every
// running workload's usage again in each cycle, which with tens of
// thousands running was most of a cycle's fixed cost. The zero value is
// empty and ready.
type RunningCharge struct {
	sums map[queueClass]*chargeSum
}

// Add counts r's usage in.
func (c *RunningCharge) Add(r *Running) { c.count(r, 1) }

// Remove takes r's usage out; r must have been added.
func (c *RunningCharge) Remove(r *Running) { c.count(r, -1) }

func (c *RunningCharge) count(r *Running, sign int64) {
	if len(r.Usage) == 0 {
		return
	}
	if c.sums == nil {
		c.sums = map[queueClass]*chargeSum{}
	}
	for _, u := range r.Usage {
		k := queueClass{r.Workload.Queue, u.Class}
		s := c.sums[k]
		if s == nil {
			s = &chargeSum{key: k}
			c.sums[k] = s
		}
		if u.Milli >= 0 && u.Milli <= quota.MaxMilli {
			s.valid += sign * u.Milli
		}
		s.all += sign * u.Milli
		s.n += int(sign)
		if s.n == 0 {
			delete(c.sums, k)
		}
	}
}

// Len is how many (queue, class) pairs hold usage.
func (c *RunningCharge) Len() int { return len(c.sums) }

// sorted is the sums in (queue, class) order.
func (c *RunningCharge) sorted() []chargeSum {
	out := make([]chargeSum, 0, len(c.sums))
	for _, s := range c.sums {
		out = append(out, *s)
	}
	sortSums(out)
	return out
}

// ChargeOf sums running's usage as Decide does: what a kept
// RunningCharge must equal.
func ChargeOf(running []Running) *RunningCharge {
	c := &RunningCharge{}
	for i := range running {
		c.Add(&running[i])
	}
	return c
}

// Equal reports whether c and o hold the same sums.
func (c *RunningCharge) Equal(o *RunningCharge) bool {
	if len(c.sums) != len(o.sums) {
		return false
	}
	for k, s := range c.sums {
		if t := o.sums[k]; t == nil || *t != *s {
			return false
		}
	}
	return true
}

func sortSums(sums []chargeSum) {
	sort.Slice(sums, func(a, b int) bool {
		if sums[a].key.queue != sums[b].key.queue {
			return sums[a].key.queue < sums[b].key.queue
		}
		return sums[a].key.class < sums[b].key.class
	})
}

// chargeRunning charges the running work's usage to tree and returns each
// leaf's allocation; terminating work goes into victims so that it is never
// chosen twice. With charged (the caller's running sums) the walk over
// running only looks for terminating work. Without, usage is summed per
// (queue, class) first, and consecutive entries of the same pair (the
// common case) skip the map.
func chargeRunning(tree *quota.Tree, running []Running, charged *RunningCharge, victims map[string]bool) map[string]int64 {
	var sums []chargeSum
	if charged != nil {
		for i := range running {
			if running[i].Terminating {
				victims[running[i].Workload.ID] = true
			}
		}
		sums = charged.sorted()
	} else {
		at := map[queueClass]int{}
		last := -1
		for i := range running {
			r := &running[i]
			if r.Terminating {
				victims[r.Workload.ID] = true
			}
			for _, u := range r.Usage {
				k := queueClass{r.Workload.Queue, u.Class}
				if last < 0 || sums[last].key != k {
					j, ok := at[k]
					if !ok {
						j = len(sums)
						at[k] = j
						sums = append(sums, chargeSum{key: k})
					}
					last = j
				}
				if u.Milli >= 0 && u.Milli <= quota.MaxMilli {
					sums[last].valid += u.Milli
				}
				sums[last].all += u.Milli
			}
		}
		sortSums(sums)
	}
	alloc := map[string]int64{}
	for _, sm := range sums {
		if !tree.Leaf(sm.key.queue) {
			continue
		}
		m := sm.valid
		for ; m > quota.MaxMilli; m -= quota.MaxMilli {
			tree.Charge(sm.key.queue, sm.key.class, quota.MaxMilli)
		}
		tree.Charge(sm.key.queue, sm.key.class, m)
		alloc[sm.key.queue] += sm.all
	}
	return alloc
}
