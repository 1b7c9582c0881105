package slurm

import (
	"context"
	"sync"
)

// idLocks is one mutex per dispatch id, so that Launch and Cancel of one
// dispatch never interleave (a duplicate concurrent Launch would otherwise
// pass the "is it known?" check twice and submit two jobs) while different
// dispatches proceed in parallel. Entries exist only while someone holds or
// waits for them. The zero value is ready to use.
type idLocks struct {
	mu sync.Mutex
	m  map[string]*idLock
}

type idLock struct {
	held chan struct{} // one token while locked; a channel so waiting honours ctx
	refs int           // holders and waiters
}

// lock waits for id's lock, or until ctx ends; the returned func unlocks.
func (l *idLocks) lock(ctx context.Context, id string) (func(), error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*idLock{}
	}
	e := l.m[id]
	if e == nil {
		e = &idLock{held: make(chan struct{}, 1)}
		l.m[id] = e
	}
	e.refs++
	l.mu.Unlock()
	select {
	case e.held <- struct{}{}:
		return func() {
			<-e.held
			l.release(id, e)
		}, nil
	case <-ctx.Done():
		l.release(id, e)
		return nil, ctx.Err()
	}
}

func (l *idLocks) release(id string, e *idLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.refs--
	if e.refs == 0 {
		delete(l.m, id)
	}
}

// size is the number of ids with an entry (for tests).
func (l *idLocks) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
