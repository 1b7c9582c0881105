package agent

import (
	"sync"
	"sync/atomic"
	"testing"
)

// One key is held by one goroutine at a time; different keys do not wait
// for each other; the table is empty once everyone is done.
func TestKeyedMutexSerializesOneKey(t *testing.T) {
	var k keyedMutex
	const goroutines, rounds = 8, 200
	counters := map[string]*int{"a": new(int), "b": new(int)}
	inside := map[string]*int{"a": new(int), "b": new(int)}
	var wg sync.WaitGroup
	var failed atomic.Bool
	for g := range goroutines {
		key := []string{"a", "b"}[g%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				unlock := k.lock(key)
				*inside[key]++
				if *inside[key] != 1 {
					failed.Store(true)
				}
				*counters[key]++
				*inside[key]--
				unlock()
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		t.Fatal("two goroutines held one key at once")
	}
	for key, c := range counters {
		if want := goroutines / 2 * rounds; *c != want {
			t.Fatalf("key %s counted %d, want %d", key, *c, want)
		}
	}
	if n := k.size(); n != 0 {
		t.Fatalf("%d keys left in the table", n)
	}

	// A held key does not block another key.
	unlockA := k.lock("a")
	done := make(chan struct{})
	go func() { k.lock("b")(); close(done) }()
	<-done
	unlockA()
}
