package natsbus

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// With WithHandlers(n), n handlers run at once: the first n messages all
// wait inside their handler until n have arrived, which would deadlock if
// they ran one at a time. Every message is acked by its own handler.
func TestConsumeWithHandlersRunsThemTogether(t *testing.T) {
	const n = 4
	s := newServer(t)
	b := newBus(t, s)
	ctx := testCtx(t, 20*time.Second)
	for i := range 3 * n {
		if _, err := b.PublishDispatch(ctx, "c1", fmt.Sprintf("d-%02d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	var running, peak, handled atomic.Int32
	barrier := make(chan struct{})
	var once sync.Once
	sub, err := b.ConsumeDispatches(ctx, "c1", func(ctx context.Context, d Delivery) error {
		now := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
		}
		if now == n {
			once.Do(func() { close(barrier) })
		}
		select {
		case <-barrier:
		case <-ctx.Done():
			return ctx.Err()
		}
		handled.Add(1)
		return nil
	}, WithHandlers(n))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for handled.Load() < 3*n {
		if time.Now().After(deadline) {
			t.Fatalf("handled %d of %d; peak concurrency %d, want %d", handled.Load(), 3*n, peak.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p := peak.Load(); p != n {
		t.Fatalf("peak concurrency %d, want exactly %d", p, n)
	}
	waitBacklog(t, b, "c1", 0)
	sub.Stop()
	if r := running.Load(); r != 0 {
		t.Fatalf("%d handlers still running after Stop", r)
	}
}

// Stop waits for handlers that are still running, so a caller that stops
// the consumer knows no handler runs afterwards.
func TestStopWaitsForRunningHandlers(t *testing.T) {
	s := newServer(t)
	b := newBus(t, s)
	ctx := testCtx(t, 10*time.Second)
	if _, err := b.PublishDispatch(ctx, "c1", "slow", []byte("x")); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var finished atomic.Bool
	sub, err := b.ConsumeDispatches(ctx, "c1", func(context.Context, Delivery) error {
		close(started)
		time.Sleep(300 * time.Millisecond)
		finished.Store(true)
		return nil
	}, WithHandlers(8))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	sub.Stop()
	if !finished.Load() {
		t.Fatal("Stop returned while a handler was still running")
	}
}

func TestWithHandlersRefusesBadCounts(t *testing.T) {
	s := newServer(t)
	b := newBus(t, s)
	ctx := testCtx(t, 5*time.Second)
	for _, n := range []int{0, -1, MaxHandlers + 1} {
		_, err := b.ConsumeDispatches(ctx, "c1", func(context.Context, Delivery) error { return nil }, WithHandlers(n))
		if err == nil || !strings.Contains(err.Error(), "handlers") {
			t.Fatalf("WithHandlers(%d): err = %v, want an error naming handlers", n, err)
		}
	}
}

// PublishEvents stores a batch in order, reports duplicates as stored, and
// fails only the entries that are wrong.
func TestPublishEventsStoresABatchInOrder(t *testing.T) {
	s := newServer(t)
	b := newBus(t, s)
	ctx := testCtx(t, 10*time.Second)
	var evs []Event
	for i := range 100 {
		evs = append(evs, Event{MsgID: fmt.Sprintf("e-%03d", i), Payload: []byte(fmt.Sprint(i))})
	}
	evs[50].MsgID = "" // refused alone
	for i, err := range b.PublishEvents(ctx, "c1", evs) {
		if (err != nil) != (i == 50) {
			t.Fatalf("event %d: err = %v", i, err)
		}
	}
	// Publishing the same ids again stores nothing new.
	for i, err := range b.PublishEvents(ctx, "c1", evs[:10]) {
		if err != nil {
			t.Fatalf("republish %d: %v", i, err)
		}
	}
	rec := newRecorder()
	if _, err := b.ConsumeEvents(ctx, func(_ context.Context, d Delivery) error { rec.ch <- d; return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if i == 50 {
			continue
		}
		d := rec.next(t, 3*time.Second)
		if want := fmt.Sprintf("e-%03d", i); d.MsgID != want || string(d.Payload) != fmt.Sprint(i) {
			t.Fatalf("event %d: got %s=%q, want %s", i, d.MsgID, d.Payload, want)
		}
	}
	rec.none(t, 300*time.Millisecond)

	if errs := b.PublishEvents(ctx, "bad.cluster", evs[:2]); errs[0] == nil || errs[1] == nil || !strings.Contains(errs[0].Error(), "cluster id") {
		t.Fatalf("bad cluster: %v", errs)
	}
	big := make([]Event, MaxPublishBatch+1)
	if errs := b.PublishEvents(ctx, "c1", big); errs[0] == nil || !strings.Contains(errs[0].Error(), "at most") {
		t.Fatalf("oversized batch: %v", errs[0])
	}
}

func waitBacklog(t *testing.T, b *Bus, cluster string, want uint64) {
	t.Helper()
	ctx := testCtx(t, 5*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := b.DispatchBacklog(ctx, cluster)
		if err == nil && n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backlog %d (%v), want %d", n, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PublishDispatches stores a batch for several clusters, reports a
// republished id as a duplicate, and refuses a bad cluster alone.
func TestPublishDispatchesBatch(t *testing.T) {
	s := newServer(t)
	b := newBus(t, s)
	ctx := testCtx(t, 10*time.Second)
	ds := []Dispatch{
		{Cluster: "c1", MsgID: "d-1", Payload: []byte("one")},
		{Cluster: "c2", MsgID: "d-2", Payload: []byte("two")},
		{Cluster: "bad.cluster", MsgID: "d-3", Payload: []byte("three")},
	}
	errs, dup := b.PublishDispatches(ctx, ds)
	if errs[0] != nil || errs[1] != nil || dup[0] || dup[1] {
		t.Fatalf("first batch: errs %v dup %v", errs, dup)
	}
	if errs[2] == nil || !strings.Contains(errs[2].Error(), "cluster id") {
		t.Fatalf("bad cluster: %v", errs[2])
	}
	errs, dup = b.PublishDispatches(ctx, ds[:1])
	if errs[0] != nil || !dup[0] {
		t.Fatalf("republish: err %v dup %v, want a duplicate", errs[0], dup[0])
	}
	for _, c := range []string{"c1", "c2"} {
		rec := newRecorder()
		if _, err := b.ConsumeDispatches(ctx, c, func(_ context.Context, d Delivery) error { rec.ch <- d; return nil }); err != nil {
			t.Fatal(err)
		}
		d := rec.next(t, 3*time.Second)
		if want := map[string]string{"c1": "d-1", "c2": "d-2"}[c]; d.MsgID != want {
			t.Fatalf("%s got %s, want %s", c, d.MsgID, want)
		}
		rec.none(t, 200*time.Millisecond)
	}
}
