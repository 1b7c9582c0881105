package scheduler

import "fmt"

// The window: a cycle considers at most Config.MaxConsidered workloads, in
// fair order, and fair order takes each leaf queue's workloads in the
// queue's own order (sortQueue: priority, then age, then id). So no more
// than the first MaxConsidered of any queue can be reached, and the rest
// of a backlog cannot change the plan. Decide keeps only those heads (and
// every nominated workload, which goes first whatever its place) and pends
// the rest at once; every later step (the scorer's fallback target, the
// candidate budget, owed quota, fair order, preemption) sees the heads
// only. A caller that keeps its queues ordered can therefore hand the core
// just the heads and get the same plan for them as for the whole
// backlog, at a cost that follows MaxConsidered, not the backlog. Slurm's
// backfill bounds its work the same way (bf_max_job_test): a small job
// deeper in a queue than the window cannot backfill in this cycle.

// WindowReason is the pending reason of a workload behind its queue's
// window. It names no count that changes from cycle to cycle, so that a
// caller writing reasons only when they change does not rewrite it.
func WindowReason(queue string, window int) string {
	return fmt.Sprintf("waiting its turn: behind the first %d workloads of queue %s in priority and submit order, the most one scheduling cycle considers", window, queue)
}

// window returns the workloads of known that can be reached within a
// budget of max: for each leaf queue its first max non-nominated ones in
// the queue's order, and every nominated one. It pends the others as
// Deferred. max <= 0 keeps everything.
func (p *planner) window(known []*Workload, max int) []*Workload {
	if max <= 0 {
		return known
	}
	byLeaf := map[string][]*Workload{}
	over := false
	for _, w := range known {
		if w.Nominated {
			continue
		}
		byLeaf[w.Queue] = append(byLeaf[w.Queue], w)
		over = over || len(byLeaf[w.Queue]) > max
	}
	if !over {
		return known
	}
	behind := map[*Workload]bool{}
	for _, ws := range byLeaf {
		if len(ws) <= max {
			continue
		}
		sortQueue(ws)
		for _, w := range ws[max:] {
			behind[w] = true
		}
	}
	kept := make([]*Workload, 0, len(known)-len(behind))
	for _, w := range known {
		if behind[w] {
			p.pend(w, ReasonDeferred, WindowReason(w.Queue, max))
			continue
		}
		kept = append(kept, w)
	}
	return kept
}

// QueueOrder reports whether a comes before b in a leaf queue: higher
// priority, then older, then the smaller id. A caller that keeps its
// queues in this order can hand the core only their heads.
func QueueOrder(a, b *Workload) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.Before(b.CreatedAt)
	}
	return a.ID < b.ID
}
