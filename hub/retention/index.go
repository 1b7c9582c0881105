package retention

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/btree"

	"github.com/meridian-gpu/meridian/hub/api"
	"github.com/meridian-gpu/meridian/hub/records"
	"github.com/meridian-gpu/meridian/hub/store"
)

// Index keeps the finished workloads, per queue and ordered by end time,
// as a reader of every change tells it: the hub's dispatch loop, whose
// mirror already reads each changed workload's summary and so knows when
// one finishes. A pass then chooses from the index instead of listing and
// summarizing every stored workload: a pass costs what it deletes, not
// what is stored. Listing cost each pass the whole store (140,000 records
// at 2,000 workloads/s and a one-minute TTL, most of retention's CPU), and
// a longer TTL only made it worse.
//
// The index is a hint, never the authority: every delete is still guarded
// by the workload's mod revision, so an entry that is stale (the workload
// changed or went since) costs a skipped delete and is dropped. What the
// index must not do is miss a finished workload for good; it follows the
// feeder's own full reads (Reset) and deletes (Forget), and a pass uses it
// only once a full read was fed (Synced).
//
// Its methods are safe for concurrent use: the feeder calls them from its
// goroutine, passes read from theirs.
type Index struct {
	mu     sync.Mutex
	byKey  map[string]place
	queues map[string]*queueIndex
	fed    bool // Reset was called
	synced bool // and Reflects since
	rev    int64
}

// queueIndex is one queue's finished workloads, oldest end first. Entries
// are held by value, in the B-tree's nodes: the index adds no heap object
// per workload for the collector to mark (a pointer per entry was 140,000
// more objects at 2,000 workloads/s and a one-minute TTL).
type queueIndex struct {
	name string // shared by the queue's entries
	tree *btree.BTreeG[indexed]
}

// place is where a key's entry sits: what finds it in its queue's tree.
type place struct {
	queue  *queueIndex
	end    time.Time
	modRev int64
}

// indexed is one finished workload in the index.
type indexed struct {
	Finished
	key    string
	modRev int64
	idem   string // the client's idempotency key, "" when none
}

// oldestFirst orders a queue's finished workloads by end time, then id:
// Select's order reversed (an unknown end is the zero time, the oldest).
func oldestFirst(a, b indexed) bool {
	if c := a.End.Compare(b.End); c != 0 {
		return c < 0
	}
	return a.ID < b.ID
}

// NewIndex returns an empty index that passes do not use until it is fed
// a full read (Reset, then the finished workloads, then Reflects).
func NewIndex() *Index {
	return &Index{byKey: map[string]place{}, queues: map[string]*queueIndex{}}
}

// Reset forgets every entry: the feeder reads everything again and tells
// what is finished before its next Reflects.
func (x *Index) Reset() {
	x.mu.Lock()
	defer x.mu.Unlock()
	clear(x.byKey)
	clear(x.queues)
	x.fed, x.synced = true, false
}

// Finished records that the workload stored at key, at modRev, is in the
// terminal phase s tells. An entry of an older revision is replaced; news
// older than the entry is ignored. A summary in another phase is Forget.
func (x *Index) Finished(key string, modRev int64, s records.WorkloadSummary) {
	if !api.IsTerminal(s.Phase) || s.ID == "" {
		x.Forget(key)
		return
	}
	e := indexed{
		Finished: Finished{ID: idOf(key), Queue: s.Queue, Phase: s.Phase, End: s.End},
		key:      key, modRev: modRev, idem: s.IdempotencyKey,
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.byKey[key]; ok {
		if old.modRev > modRev {
			return
		}
		x.removeLocked(key, old)
	}
	q := x.queues[e.Queue]
	if q == nil {
		q = &queueIndex{name: e.Queue, tree: btree.NewG(32, oldestFirst)}
		x.queues[e.Queue] = q
	}
	e.Queue = q.name
	q.tree.ReplaceOrInsert(e)
	x.byKey[key] = place{queue: q, end: e.End, modRev: modRev}
}

// idOf is the workload id a key names.
func idOf(key string) string { return strings.TrimPrefix(key, store.Prefix(store.KindWorkloads)) }

// Forget drops key: it was deleted, or it is not finished any more.
func (x *Index) Forget(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if p, ok := x.byKey[key]; ok {
		x.removeLocked(key, p)
	}
}

// Reflects says that every change up to rev has been told. After a Reset,
// the index is complete from here on (Synced).
func (x *Index) Reflects(rev int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.synced = x.fed
	x.rev = max(x.rev, rev)
}

// Synced reports whether a full read was fed, so passes may use the index.
func (x *Index) Synced() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.synced
}

// Len is how many finished workloads the index holds.
func (x *Index) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.byKey)
}

// drop forgets key if the index still holds it at modRev: a pass deleted
// it, or found it changed.
func (x *Index) drop(key string, modRev int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if p, ok := x.byKey[key]; ok && p.modRev == modRev {
		x.removeLocked(key, p)
	}
}

func (x *Index) removeLocked(key string, p place) {
	delete(x.byKey, key)
	q := p.queue
	q.tree.Delete(indexed{Finished: Finished{ID: idOf(key), End: p.end}})
	if q.tree.Len() == 0 {
		delete(x.queues, q.name)
	}
}

// choose returns what p deletes at now, oldest first (ties by id), and how
// many finished workloads the index holds: what Select returns for the
// same workloads (TestIndexChoosesWhatSelectChooses), found by walking
// each queue from its oldest end and stopping at the first workload that
// stays, so it costs what is deleted. It takes at most limit+1 of each
// queue (limit > 0; 0: all), so its first limit entries are Select's and
// it returns more than limit exactly when Select does; the rest waits for
// the next pass, and the index's feeder waits no longer than that for
// the lock. The entries are copies.
func (x *Index) choose(p Policy, now time.Time, limit int) ([]entry, int) {
	if !p.Enabled() {
		return nil, x.Len()
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []entry
	for _, q := range x.queues {
		n, i, taken := q.tree.Len(), 0, 0
		q.tree.Ascend(func(e indexed) bool {
			if limit > 0 && taken > limit {
				return false
			}
			newer := n - 1 - i // finished workloads of the queue newer than e
			i++
			if p.MinAge > 0 && !e.End.IsZero() && now.Before(e.End.Add(p.MinAge)) {
				// Too recent, and so is every later one.
				return false
			}
			var why Reason
			switch {
			case p.MaxPerQueue > 0 && newer >= p.MaxPerQueue:
				why = ReasonQueueCap
			case p.TTL > 0 && !e.End.IsZero() && !now.Before(e.End.Add(p.TTL)):
				why = ReasonTTL
			case p.TTL > 0 && e.End.IsZero():
				// An unknown end is never due by age, but later
				// ones may be.
				return true
			default:
				// Within the cap and not expired; later ones end later.
				return false
			}
			c := entry{Finished: e.Finished, key: e.key, modRev: e.modRev, reason: why}
			if e.idem != "" {
				c.idemKey = api.IdempotencyKey(e.Queue, e.idem)
			}
			out = append(out, c)
			taken++
			return true
		})
	}
	slices.SortFunc(out, func(a, b entry) int {
		if c := a.End.Compare(b.End); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, len(x.byKey)
}
