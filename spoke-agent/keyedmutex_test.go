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

// tryLock takes a free key and refuses one held or waited for, taking
// nothing then; the table is empty once every holder is done.
func TestKeyedMutexTryLock(t *testing.T) {
	var k keyedMutex
	unlock, ok := k.tryLock("a")
	if !ok {
		t.Fatal("tryLock refused a free key")
	}
	if _, ok := k.tryLock("a"); ok {
		t.Fatal("tryLock took a held key")
	}
	other, ok := k.tryLock("b")
	if !ok {
		t.Fatal("tryLock refused another free key")
	}
	other()
	got := make(chan func())
	go func() { got <- k.lock("a") }() // waits for the holder
	unlock()
	waiter := <-got
	if _, ok := k.tryLock("a"); ok {
		t.Fatal("tryLock took a key another goroutine holds")
	}
	waiter()
	if n := k.size(); n != 0 {
		t.Fatalf("%d keys left in the table", n)
	}
	if again, ok := k.tryLock("a"); !ok {
		t.Fatal("tryLock refused a key every holder released")
	} else {
		again()
	}
}
