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
	// last is the pair counted last: consecutive entries of one pair (the
	// common case in a long list) skip the map.
	last *chargeSum
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
		s := c.last
		if s == nil || s.key != k {
			if s = c.sums[k]; s == nil {
				s = &chargeSum{key: k}
				c.sums[k] = s
			}
			c.last = s
		}
		if u.Milli >= 0 && u.Milli <= quota.MaxMilli {
			s.valid += sign * u.Milli
		}
		s.all += sign * u.Milli
		s.n += int(sign)
		if s.n == 0 {
			delete(c.sums, k)
			c.last = nil
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
	sort.Slice(out, func(a, b int) bool {
		if out[a].key.queue != out[b].key.queue {
			return out[a].key.queue < out[b].key.queue
		}
		return out[a].key.class < out[b].key.class
	})
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

// chargeRunning charges the running work's usage to tree and returns each
// leaf's allocation; terminating work goes into victims so that it is never
// chosen twice. charged is the caller's kept sums of running; without them
// the running list is summed here.
func chargeRunning(tree *quota.Tree, running []Running, charged *RunningCharge, victims map[string]bool) map[string]int64 {
	for i := range running {
		if running[i].Terminating {
			victims[running[i].Workload.ID] = true
		}
	}
	if charged == nil {
		charged = ChargeOf(running)
	}
	alloc := map[string]int64{}
	for _, sm := range charged.sorted() {
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
