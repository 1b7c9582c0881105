package store

import (
	"fmt"
	"testing"
	"time"
)

// Notify says that something changed, with at most one signal pending
// however many keys change while nobody reads; cancel and the end of Run
// close it.
func TestCacheNotify(t *testing.T) {
	ctx := testCtx(t, 15*time.Second)
	s := newStore(t)
	p := testPrefix(t)
	c, stop, _ := startCache(t, s, p)
	changed, cancel := c.Notify()
	other, _ := c.Notify()

	var last int64
	for i := range 200 {
		for _, op := range []Op{Put(fmt.Sprintf("%s%d", p, i), []byte("v")), DeleteAny(fmt.Sprintf("%s%d", p, i))} {
			rev, err := s.Commit(ctx, nil, op)
			if err != nil {
				t.Fatal(err)
			}
			last = rev
		}
	}
	if err := c.WaitForRevision(ctx, last); err != nil {
		t.Fatal(err)
	}
	if n := len(changed); n != 1 {
		t.Fatalf("%d signals pending after 400 changes nobody read, want 1", n)
	}
	<-changed
	select {
	case <-changed:
		t.Fatal("a second signal for changes already signalled")
	default:
	}
	if _, err := s.Commit(ctx, nil, Put(p+"next", []byte("v"))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no signal for a change after the last one was read")
	}

	cancel()
	cancel() // twice is harmless
	if _, ok := <-changed; ok {
		t.Fatal("cancel left the channel open")
	}
	stop()
	for {
		select {
		case _, ok := <-other:
			if !ok {
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the end of Run left a Notify channel open")
		}
	}
}
