package agent

import "sync"

// keyedMutex is a set of mutexes, one per key, created on first use and
// dropped when nobody holds or waits for them, so it stays as small as the
// number of keys in flight.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	users int // holders and waiters
}

// lock takes key's mutex and returns the function that releases it.
func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.users++
	k.mu.Unlock()
	l.Lock()
	return func() { k.release(key, l) }
}

// release unlocks l, key's mutex, and forgets it when nobody else holds
// or waits for it.
func (k *keyedMutex) release(key string, l *keyLock) {
	l.Unlock()
	k.mu.Lock()
	if l.users--; l.users == 0 {
		delete(k.locks, key)
	}
	k.mu.Unlock()
}

// tryLock takes key's mutex if nobody holds or waits for it, and returns
// the function that releases it; ok is false, and nothing is taken, when
// somebody does.
func (k *keyedMutex) tryLock(key string) (unlock func(), ok bool) {
	k.mu.Lock()
	if k.locks[key] != nil {
		k.mu.Unlock()
		return nil, false
	}
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := &keyLock{users: 1}
	k.locks[key] = l
	l.Lock()
	k.mu.Unlock()
	return func() { k.release(key, l) }, true
}

// size is the number of keys held or waited for.
func (k *keyedMutex) size() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.locks)
}
