package dispatch

import (
	"maps"
	"slices"

	"github.com/google/btree"

	"github.com/meridian-gpu/meridian/hub/scheduler"
)

// DefaultWindow is how many workloads of each queue a cycle hands the core
// and how many in all it considers (scheduler.Config.MaxConsidered) when
// the configuration sets none. A cycle of 2,048 takes the core a few
// milliseconds, and at 2,000 submits/s a 50 ms cycle sees about 100 new
// ones: the window is twenty times what a cycle needs when the hub keeps
// up, and what bounds the cycle when it does not.
const DefaultWindow = 2048

// backlog keeps the QUEUED workloads of each leaf queue in the core's
// queue order (scheduler.QueueOrder), as the mirror changes, so that a
// cycle takes the head of each queue without walking or sorting the rest:
// a backlog of hundreds of thousands costs the cycle nothing more than a
// short one (scheduler/window.go says why the plan is the same). It also
// keeps what the API's accounting reads, so that no reader walks the
// backlog either. Workloads that do not convert for the core wait apart,
// in bad.
type backlog struct {
	queues map[string]*btree.BTreeG[*wl]
	bad    map[string]*wl // by workload id
	// count is each leaf's QUEUED workloads; demand the milli-GPUs they
	// ask for, by accelerator class and leaf (pod sets naming no class are
	// left out).
	count  map[string]int32
	demand map[string]map[string]int64
}

func newBacklog() *backlog {
	return &backlog{queues: map[string]*btree.BTreeG[*wl]{}, bad: map[string]*wl{}, count: map[string]int32{},
		demand: map[string]map[string]int64{}}
}

func queueOrder(a, b *wl) bool { return scheduler.QueueOrder(a.sw, b.sw) }

// add files a QUEUED workload. Its converted form must not change while
// it is filed: the mirror replaces a changed workload's wl, dropping the
// old one first.
func (b *backlog) add(w *wl) {
	if w.sw == nil {
		b.bad[w.id()] = w
		return
	}
	q := w.sw.Queue
	t := b.queues[q]
	if t == nil {
		t = btree.NewG(32, queueOrder)
		b.queues[q] = t
	}
	t.ReplaceOrInsert(w)
	b.count[q]++
	b.charge(w.sw, 1)
}

// drop forgets a workload add filed.
func (b *backlog) drop(w *wl) {
	if w.sw == nil {
		delete(b.bad, w.id())
		return
	}
	q := w.sw.Queue
	t := b.queues[q]
	if t == nil {
		return
	}
	if _, ok := t.Delete(w); !ok {
		return
	}
	b.count[q]--
	b.charge(w.sw, -1)
	if t.Len() == 0 {
		delete(b.queues, q)
		delete(b.count, q)
	}
}

func (b *backlog) charge(w *scheduler.Workload, sign int64) {
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.Class == "" {
			continue
		}
		m := b.demand[ps.Class]
		if m == nil {
			m = map[string]int64{}
			b.demand[ps.Class] = m
		}
		m[w.Queue] += sign * int64(ps.Replicas) * ps.Req.TotalMilli()
		if m[w.Queue] == 0 {
			delete(m, w.Queue)
		}
	}
}

// deeper reports whether queue q holds more than n workloads.
func (b *backlog) deeper(q string, n int) bool {
	t := b.queues[q]
	return t != nil && t.Len() > n
}

// heads calls take for the workloads at the head of each queue, queues
// by name, each in queue order, until take has accepted window of that
// queue (window <= 0: all). take reports whether it accepted one; a
// workload it passes over does not count. It returns how many workloads
// were left behind the windows.
func (b *backlog) heads(window int, take func(*wl) bool) (behind int) {
	for _, q := range slices.Sorted(maps.Keys(b.queues)) {
		t := b.queues[q]
		seen, taken := 0, 0
		t.Ascend(func(w *wl) bool {
			if window > 0 && taken >= window {
				return false
			}
			seen++
			if take(w) {
				taken++
			}
			return true
		})
		behind += t.Len() - seen
	}
	return behind
}

// position is how many workloads come before w in its queue: its place
// in line, counted from 0. It walks the part of the queue ahead of w.
func (b *backlog) position(w *scheduler.Workload) int {
	t := b.queues[w.Queue]
	if t == nil {
		return 0
	}
	n := 0
	t.AscendLessThan(&wl{sw: w}, func(*wl) bool { n++; return true })
	return n
}
