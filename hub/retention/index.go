package retention

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/btree"

	"github.com/meridian-gpu/meridian/hub/api"
	"github.com/meridian-gpu/meridian/hub/records"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
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
	name string // the queue's entries do not repeat it
	tree *btree.BTreeG[indexed]
}

// place is where a key's entry sits: what finds it in its queue's tree.
type place struct {
	queue  *queueIndex
	end    int64 // as indexed.end
	modRev int64
}

// indexed is one finished workload in the index. Only what the index
// cannot derive is kept, and as few pointers as that allows, for every
// collection scans every entry: the id is the key's last part, the queue
// is the tree's, and the end is a number (a time.Time carries a pointer
// to its location). Two pointers and 56 bytes an entry, where a Finished
// with the key beside it was five and 104.
type indexed struct {
	end    int64 // the end in Unix nanoseconds; unknownEnd when unknown
	key    string
	modRev int64
	idem   string // the client's idempotency key, "" when none
	phase  meridianv1.WorkloadPhase
}

// unknownEnd is an unknown end time, the oldest of all (Select's order).
const unknownEnd = math.MinInt64

// endNanos is t as indexed.end.
func endNanos(t time.Time) int64 {
	if t.IsZero() {
		return unknownEnd
	}
	return t.UnixNano()
}

// endTime is indexed.end as a time, the zero time when unknown.
func endTime(n int64) time.Time {
	if n == unknownEnd {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// finished is e as the policy sees it, in queue q.
func (e indexed) finished(q string) Finished {
	return Finished{ID: idOf(e.key), Queue: q, Phase: e.phase, End: endTime(e.end)}
}

// oldestFirst orders a queue's finished workloads by end time, then id
// (every key is the same prefix and the id): Select's order reversed.
func oldestFirst(a, b indexed) bool {
	if a.end != b.end {
		return a.end < b.end
	}
	return a.key < b.key
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
	// The summary's strings may share the feeder's bytes
	// (records.SummarizeWorkloadShared): what the index keeps of them
	// (the idempotency key, a new queue's name) it copies.
	e := indexed{end: endNanos(s.End), key: key, modRev: modRev, idem: strings.Clone(s.IdempotencyKey), phase: s.Phase}
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.byKey[key]; ok {
		if old.modRev > modRev {
			return
		}
		x.removeLocked(key, old)
	}
	q := x.queues[s.Queue]
	if q == nil {
		q = &queueIndex{name: strings.Clone(s.Queue), tree: btree.NewG(32, oldestFirst)}
		x.queues[q.name] = q
	}
	q.tree.ReplaceOrInsert(e)
	x.byKey[key] = place{queue: q, end: e.end, modRev: modRev}
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
	q.tree.Delete(indexed{end: p.end, key: key})
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
			f := e.finished(q.name)
			if p.MinAge > 0 && !f.End.IsZero() && now.Before(f.End.Add(p.MinAge)) {
				// Too recent, and so is every later one.
				return false
			}
			var why Reason
			switch {
			case p.MaxPerQueue > 0 && newer >= p.MaxPerQueue:
				why = ReasonQueueCap
			case p.TTL > 0 && !f.End.IsZero() && !now.Before(f.End.Add(p.TTL)):
				why = ReasonTTL
			case p.TTL > 0 && f.End.IsZero():
				// An unknown end is never due by age, but later
				// ones may be.
				return true
			default:
				// Within the cap and not expired; later ones end later.
				return false
			}
			c := entry{Finished: f, key: e.key, modRev: e.modRev, reason: why}
			if e.idem != "" {
				c.idemKey = api.IdempotencyKey(q.name, e.idem)
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
