package agent

import (
	"fmt"
	"testing"
	"time"
)

func TestEventQueueKeepsOrderAndNeverBlocks(t *testing.T) {
	q := NewEventQueue()
	defer q.Close()
	const n = 1000
	done := make(chan struct{})
	go func() {
		for i := 0; i < n; i++ { // nobody reads yet: Push must not block
			q.Push(WorkEvent{DispatchID: fmt.Sprint(i)})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Push blocked while nobody read")
	}
	for i := 0; i < n; i++ {
		select {
		case ev := <-q.Events():
			if ev.DispatchID != fmt.Sprint(i) {
				t.Fatalf("event %d is %s: order lost", i, ev.DispatchID)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d never arrived", i)
		}
	}
	if q.Len() != 0 {
		t.Fatalf("%d events left", q.Len())
	}
}

func TestEventQueueCloseIsIdempotent(t *testing.T) {
	q := NewEventQueue()
	q.Push(WorkEvent{DispatchID: "x"}) // unread: Close must not wait for a reader
	closed := make(chan struct{})
	go func() {
		q.Close()
		q.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked on an unread event or on a second call")
	}
	q.Push(WorkEvent{DispatchID: "late"}) // after Close: must not block or panic
	select {
	case ev := <-q.Events():
		t.Fatalf("event %q delivered after Close", ev.DispatchID)
	case <-time.After(50 * time.Millisecond):
	}
}
