package dispatch

import (
	"sync"
	"sync/atomic"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// ownWrites hands the workloads the loop itself just wrote to the mirror,
// decoded, so that the mirror does not decode what it wrote a moment ago:
// the cycle's dispatches and the agents' events are two of the three
// writes of a workload the mirror decodes over its life.
//
// An entry holds the workload exactly as encoded at a key's revision, and
// the mirror takes it only for that revision; for any other it decodes as
// before. Nobody may change a workload once it is added: the mirror shares
// it with every reader of its state.
type ownWrites struct {
	mu sync.Mutex
	m  map[string]ownWrite
}

type ownWrite struct {
	rev int64
	w   *meridianv1.Workload
}

// maxOwnWrites bounds the entries waiting for the mirror. The mirror takes
// each at its next advance, so more than this means it is not advancing
// (no term, or a stuck cycle): forgetting them only costs decodes.
const maxOwnWrites = 1 << 16

// add records that key holds w as of revision rev.
func (o *ownWrites) add(key string, rev int64, w *meridianv1.Workload) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil || len(o.m) >= maxOwnWrites {
		o.m = make(map[string]ownWrite)
	}
	o.m[key] = ownWrite{rev: rev, w: w}
}

// take returns the workload the loop wrote at key as of revision rev, or
// nil when it wrote none there at that revision. Either way the key's
// entry is gone: the mirror sees each key's revisions in order, so an
// entry for any other revision is stale.
func (o *ownWrites) take(key string, rev int64) *meridianv1.Workload {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.m[key]
	if !ok {
		return nil
	}
	delete(o.m, key)
	if e.rev != rev {
		return nil
	}
	return e.w
}

// forget drops every entry (a new term, or a full reload of the mirror).
func (o *ownWrites) forget() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m = nil
}

// recentWrites remembers, for the event path, the workload the loop last
// wrote at each key, decoded, with the revision it was written at. An
// agent's event rewrites the workload the loop dispatched (ACCEPTED and
// RUNNING) and then the one it wrote for that event (SUCCEEDED): both are
// writes of the loop's own, so the event transaction can start from a copy
// of what it encoded instead of decoding the stored bytes again. The copy
// shares every field but the status with the entry (shareButStatus) and
// costs a fraction of a decode; decoding each workload an event names was
// the largest part of applying events.
//
// As with ownWrites, an entry holds the workload exactly as encoded at its
// revision and is used only for that revision; nobody changes it once put
// (the event transaction changes its own copy's status, and nothing else:
// the rest is shared; the package's tests check it with a writeGuard).
// Entries of workloads that the loop will not write again (finished,
// deleted, or written since by someone else) go when they are looked up
// or when the key is deleted, and all of them when the bound is reached.
type recentWrites struct {
	mu sync.Mutex
	m  map[string]ownWrite
	// hits counts the copies handed out (tests: that events use them).
	hits atomic.Int64
	// guard, in tests only, holds a deep copy of every entry put and
	// checks, each time an entry is handed out, replaced or dropped, that
	// the entry still equals it: the copies share all but the status with
	// their entry, so an event path that changed anything else would
	// change the entry too (share_test.go).
	guard writeGuard
}

// put records that key holds w as of rev. Only a workload that holds a
// dispatch is kept, as only its agent's events rewrite it: a queued one
// (the cycle rewrites a waiting workload's reason, and a backlog is kept
// compact in the mirror) or a finished one is forgotten instead.
func (r *recentWrites) put(key string, rev int64, w *meridianv1.Workload) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leaveLocked(key)
	if w == nil || !active(w.GetStatus().GetPhase()) {
		return
	}
	if r.m == nil || len(r.m) >= maxOwnWrites {
		r.forgetLocked()
		r.m = make(map[string]ownWrite)
	}
	r.m[key] = ownWrite{rev: rev, w: w}
	if r.guard != nil {
		r.guard.keep(key, rev, w)
	}
}

// copyAt returns a copy of the workload the loop wrote at key as of rev,
// for the caller to change, or nil when the loop wrote none there at that
// revision (the entry, stale, is then dropped). The copy shares every
// field but the status with the entry (shareButStatus): the caller may
// change the status and nothing else.
func (r *recentWrites) copyAt(key string, rev int64) *meridianv1.Workload {
	r.mu.Lock()
	e, ok := r.m[key]
	hit := ok && e.rev == rev
	if ok && !hit {
		r.leaveLocked(key)
	}
	r.mu.Unlock()
	if !hit {
		return nil
	}
	r.hits.Add(1)
	if r.guard != nil {
		r.guard.check(key, e)
	}
	return shareButStatus(e.w)
}

// drop forgets key (deleted).
func (r *recentWrites) drop(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leaveLocked(key)
}

// forget drops every entry (a new term, or a full reload of the mirror).
func (r *recentWrites) forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked()
}

// leaveLocked drops key's entry, if any.
func (r *recentWrites) leaveLocked(key string) {
	e, ok := r.m[key]
	if !ok {
		return
	}
	if r.guard != nil {
		r.guard.check(key, e)
		r.guard.release(key, e.rev)
	}
	delete(r.m, key)
}

// forgetLocked drops every entry.
func (r *recentWrites) forgetLocked() {
	if r.guard != nil {
		for k, e := range r.m {
			r.guard.check(k, e)
			r.guard.release(k, e.rev)
		}
	}
	r.m = nil
}
