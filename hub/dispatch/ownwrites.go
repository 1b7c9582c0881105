package dispatch

import (
	"sync"

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
