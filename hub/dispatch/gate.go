package dispatch

import (
	"strings"
	"sync"

	"github.com/meridian-gpu/meridian/hub/leader"
	"github.com/meridian-gpu/meridian/hub/store"
)

// writeGate checks in the hub what each loop write's revision guard used
// to make etcd check: that the workload the write was planned on is still
// the stored one. Only the leader's loop writes a workload after its
// creation (cancels are requests of their own; retention deletes only
// finished workloads, which the loop never writes), so the loop's own
// writes are all a stale plan can miss, and the gate knows every one of
// them. Etcd then applies the write with the term's fence alone: no read
// of the stored key and its value to compare one revision, which was a
// few percent of the hub's CPU at 2,000 workloads/s
// (docs/design/single-writer-workloads.md).
//
// A write of workload key k planned on revision p goes unguarded when
//   - no other write of k is in flight (a second one waits for it);
//   - the loop's last write of k this term is not newer than p; or, when
//     the gate holds none (the key's first write this term, or one it
//     has forgotten), the cache holds no newer revision of k and has not
//     seen k deleted after p.
//
// Otherwise it is a conflict, as etcd would have answered, and the
// caller re-plans on fresh state. Guards stay on (etcd checks) for every
// write until the cache has caught up with the revision the term began
// at, for a key whose last write's outcome is unknown (a commit that
// failed without saying whether it applied) until a guarded write of it
// succeeds, and always with Config.WorkloadGuards.
type writeGate struct {
	cache gateCache
	// from is the revision the term began at: every write of an earlier
	// term is at or below it.
	from int64
	// always keeps every guard (Config.WorkloadGuards).
	always bool
	// caughtUp is set once the cache has reached from (it never goes
	// back), so that later commits do not ask the cache again.
	caughtUp bool
	// checked, in tests only, is told of every write sent unguarded once
	// it commits (harness_test.go checks that it overwrote the revision
	// it was planned on, and never a finished workload).
	checked func(key string, planned, committed int64)

	mu       sync.Mutex
	free     *sync.Cond // signalled when a key leaves inFlight
	inFlight map[string]bool
	// written is the revision of the loop's last write of each key this
	// term: nobody else writes the key after it, so it alone answers for
	// the keys it holds (most writes of a workload follow one of the
	// loop's own; looking each up in the cache was most of the gate's
	// cost). Past maxWritten entries, those the cache already shows are
	// forgotten, and the cache answers for them.
	written map[string]int64
	// pruneAt is the size of written at which prune next walks it: twice
	// what the last walk kept, and at least maxWritten, so that a cache
	// that lags (and shows few of the writes) does not make every commit
	// walk the whole map.
	pruneAt int
	// suspect keys had a commit whose outcome is unknown: guarded until a
	// guarded write of them succeeds.
	suspect map[string]bool
}

// gateCache is what the gate reads of the watch cache.
type gateCache interface {
	Get(key string) (store.Item, bool)
	Rev() int64
}

type keyRev struct {
	key string
	rev int64
}

func newWriteGate(c gateCache, from int64, always bool) *writeGate {
	g := &writeGate{cache: c, from: from, always: always,
		inFlight: map[string]bool{}, written: map[string]int64{}, suspect: map[string]bool{}, pruneAt: maxWritten}
	g.free = sync.NewCond(&g.mu)
	return g
}

// passage is one commit through the gate: the ops to send, and what to
// record once the commit's outcome is known.
type passage struct {
	ops     []store.Op
	claimed []string
	blind   []keyRev // keys sent unguarded, with the revision planned on (tests only: writeGate.checked)
	guarded []string // workload keys sent with their guard
}

// open claims the workload keys of ops and returns the ops to commit, or a
// conflict. Every open that returns no error must be closed.
func (g *writeGate) open(ops []store.Op) (*passage, error) {
	p := &passage{}
	if g == nil {
		p.ops = ops
		return p, nil
	}
	for _, o := range ops {
		if strings.HasPrefix(o.Key(), prefWorkloads) {
			p.claimed = append(p.claimed, o.Key())
		}
	}
	if len(p.claimed) == 0 {
		p.ops = ops
		return p, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.anyInFlight(p.claimed) {
		g.free.Wait()
	}
	g.prune()
	if !g.caughtUp {
		g.caughtUp = g.cache.Rev() >= g.from
	}
	trusted := !g.always && g.caughtUp
	p.ops = make([]store.Op, len(ops))
	for i, o := range ops {
		p.ops[i] = o
		planned, isPut := o.PutGuard()
		if !isPut || planned <= 0 || !strings.HasPrefix(o.Key(), prefWorkloads) {
			continue
		}
		k := o.Key()
		if !trusted || g.suspect[k] {
			p.guarded = append(p.guarded, k)
			continue
		}
		if err := g.stale(k, planned); err != nil {
			return nil, err
		}
		p.ops[i] = o.Unguarded()
		if g.checked != nil {
			p.blind = append(p.blind, keyRev{k, planned})
		}
	}
	for _, k := range p.claimed {
		g.inFlight[k] = true
	}
	return p, nil
}

// stale returns a conflict when the hub knows of a revision of k newer
// than planned. The mutex is held.
func (g *writeGate) stale(k string, planned int64) error {
	var have int64 // the newer revision known; 0 with stale: deleted since
	stale := false
	if w, ok := g.written[k]; ok {
		have, stale = w, w > planned
	} else if it, ok := g.cache.Get(k); ok {
		have, stale = it.ModRev, it.ModRev > planned
	} else {
		// Absent: stale when the cache has seen the revision planned on,
		// so the key went after it.
		stale = g.cache.Rev() >= planned
	}
	if !stale {
		return nil
	}
	return &store.ConflictError{Keys: []store.KeyConflict{{Key: k, Want: planned, Have: have}}}
}

func (g *writeGate) anyInFlight(keys []string) bool {
	for _, k := range keys {
		if g.inFlight[k] {
			return true
		}
	}
	return false
}

// maxWritten is how many writes the gate remembers before it first
// forgets some: a few minutes of a busy loop's.
const maxWritten = 1 << 18

// prune forgets, once the gate holds pruneAt writes, those the cache
// shows now (the cache then answers for their keys). The mutex is held.
func (g *writeGate) prune() {
	if len(g.written) < g.pruneAt {
		return
	}
	rev := g.cache.Rev()
	for k, w := range g.written {
		if w <= rev {
			delete(g.written, k)
		}
	}
	g.pruneAt = max(maxWritten, 2*len(g.written))
}

// close records the outcome of p's commit: err is the commit's error and
// rev its revision.
func (g *writeGate) close(p *passage, rev int64, err error) {
	if g == nil || len(p.claimed) == 0 {
		return
	}
	g.mu.Lock()
	for _, k := range p.claimed {
		delete(g.inFlight, k)
	}
	switch {
	case err == nil:
		for _, k := range p.claimed {
			g.written[k] = rev
		}
		for _, k := range p.guarded {
			delete(g.suspect, k)
		}
	case store.IsConflict(err) || leader.IsNotLeader(err):
		// Refused: nothing was written.
	default:
		// Maybe applied, maybe not: guard these keys until a guarded
		// write says where they stand.
		for _, k := range p.claimed {
			g.suspect[k] = true
		}
	}
	g.free.Broadcast()
	g.mu.Unlock()
	if err == nil && g.checked != nil {
		for _, b := range p.blind {
			g.checked(b.key, b.rev, rev)
		}
	}
}

// testBlindWrites, set by the package's tests, is told of every write a
// loop's gate sent unguarded (writeGate.checked).
var testBlindWrites func(key string, planned, committed int64)
