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

// An event that stands for several changes of its key is Fresh when one
// of them created the key's incarnation, so a reader knows it never saw
// the key before without keeping the keys it has seen.
func TestSubscriberFoldsTheCreation(t *testing.T) {
	s := &subscriber{wake: make(chan struct{}, 1), latest: map[string]pendingEv{}}
	// a: created and changed unseen; b: changed twice, created earlier;
	// c: created and deleted unseen; d: deleted, then created again.
	s.push(Event{Type: EventPut, Key: "a", ModRev: 10, CreateRev: 10, Fresh: true})
	s.push(Event{Type: EventPut, Key: "b", ModRev: 11, CreateRev: 3})
	s.push(Event{Type: EventPut, Key: "a", ModRev: 12, CreateRev: 10})
	s.push(Event{Type: EventPut, Key: "c", ModRev: 13, CreateRev: 13, Fresh: true})
	s.push(Event{Type: EventPut, Key: "b", ModRev: 14, CreateRev: 3})
	s.push(Event{Type: EventDelete, Key: "c", ModRev: 15, CreateRev: 13})
	s.push(Event{Type: EventDelete, Key: "d", ModRev: 16, CreateRev: 5})
	s.push(Event{Type: EventPut, Key: "d", ModRev: 17, CreateRev: 17, Fresh: true})
	want := map[string]bool{"a": true, "b": false, "c": true, "d": true}
	for {
		ev, ok := s.pop()
		if !ok {
			break
		}
		if ev.Fresh != want[ev.Key] {
			t.Errorf("%s@%d: Fresh=%v, want %v", ev.Key, ev.ModRev, ev.Fresh, want[ev.Key])
		}
		delete(want, ev.Key)
	}
	if len(want) != 0 {
		t.Errorf("no event for %v", want)
	}
	// Once delivered, the next change of a is not fresh.
	s.push(Event{Type: EventPut, Key: "a", ModRev: 18, CreateRev: 10})
	if ev, _ := s.pop(); ev.Fresh {
		t.Errorf("a@18 after a@12 was delivered: Fresh")
	}
}
