package store

import (
	"fmt"
	"testing"
)

// A key changed again while its event waits moves behind the keys changed
// in between, so events always leave in revision order; a reader that
// resumes from the last revision it saw misses nothing.
func TestSubscriberKeepsRevisionOrder(t *testing.T) {
	s := &subscriber{wake: make(chan struct{}, 1), latest: map[string]pendingEv{}}
	s.push(Event{Key: "a", ModRev: 1})
	s.push(Event{Key: "b", ModRev: 2})
	s.push(Event{Key: "a", ModRev: 3})
	s.push(Event{Key: "c", ModRev: 4})
	s.push(Event{Key: "b", ModRev: 5})
	var got []string
	last := int64(0)
	for {
		ev, ok := s.pop()
		if !ok {
			break
		}
		if ev.ModRev <= last {
			t.Fatalf("revision %d after %d", ev.ModRev, last)
		}
		last = ev.ModRev
		got = append(got, fmt.Sprintf("%s@%d", ev.Key, ev.ModRev))
	}
	if want := "[a@3 c@4 b@5]"; fmt.Sprint(got) != want {
		t.Fatalf("delivered %v, want %s (each key once, latest value, revision order)", got, want)
	}
}

// Many changes to few keys, with nobody reading, keep the queue within a
// small multiple of the keys pending.
func TestSubscriberQueueStaysBounded(t *testing.T) {
	s := &subscriber{wake: make(chan struct{}, 1), latest: map[string]pendingEv{}}
	for i := range 10000 {
		s.push(Event{Key: fmt.Sprint("k", i%3), ModRev: int64(i + 1)})
		if n := len(s.queue); n > 2*len(s.latest)+17 {
			t.Fatalf("after %d pushes the queue holds %d entries for %d keys", i+1, n, len(s.latest))
		}
	}
	n := 0
	for {
		if _, ok := s.pop(); !ok {
			break
		}
		n++
	}
	if n != 3 {
		t.Fatalf("%d events delivered for 3 keys", n)
	}
}
