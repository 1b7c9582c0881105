package natsbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestValidateClusterID(t *testing.T) {
	tests := map[string]struct {
		id   string
		want string
	}{
		"simple":       {"gpu-east_1", ""},
		"max length":   {strings.Repeat("a", MaxClusterIDLen), ""},
		"empty":        {"", "empty"},
		"too long":     {strings.Repeat("a", MaxClusterIDLen+1), "more than"},
		"dot":          {"us.east", `'.'`},
		"star":         {"east*", `'*'`},
		"gt":           {"east>", `'>'`},
		"space":        {"east 1", `' '`},
		"tab":          {"east\t1", `'\t'`},
		"slash":        {"a/b", `'/'`},
		"unicode":      {"ästa", `'ä'`},
		"only hyphens": {"--", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := ValidateClusterID(tc.id)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ValidateClusterID(%q) = %v, want nil", tc.id, err)
				}
				for _, f := range []func(string) (string, error){DispatchSubject, EventsSubject, AdvertSubject, HeartbeatSubject, DispatchConsumer} {
					if s, err := f(tc.id); err != nil || !strings.HasSuffix(s, tc.id) {
						t.Fatalf("derived name %q, %v for %q", s, err, tc.id)
					}
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "cluster id") {
				t.Fatalf("ValidateClusterID(%q) = %v, want error naming cluster id and %s", tc.id, err, tc.want)
			}
		})
	}
}

func TestBadArgumentsAreRefused(t *testing.T) {
	s := newServer(t)
	b := newBus(t, s)
	ctx := testCtx(t, 5*time.Second)
	noop := func(context.Context, Delivery) error { return nil }
	tests := map[string]struct {
		call func() error
		want string
	}{
		"dispatch to bad cluster": {func() error { _, err := b.PublishDispatch(ctx, "a.b", "d1", nil); return err }, "cluster id"},
		"dispatch without id":     {func() error { _, err := b.PublishDispatch(ctx, "c1", " ", nil); return err }, "msgID"},
		"event id with newline":   {func() error { _, err := b.PublishEvent(ctx, "c1", "a\nb", nil); return err }, "line break"},
		"advert bad cluster":      {func() error { return b.PublishAdvert(ctx, "", nil) }, "cluster id"},
		"heartbeat bad cluster":   {func() error { return b.PublishHeartbeat(ctx, "x y", nil) }, "cluster id"},
		"consume bad cluster":     {func() error { _, err := b.ConsumeDispatches(ctx, "*", noop); return err }, "cluster id"},
		"consume nil handler":     {func() error { _, err := b.ConsumeDispatches(ctx, "c1", nil); return err }, "handler is nil"},
		"events nil handler":      {func() error { _, err := b.ConsumeEvents(ctx, nil); return err }, "handler is nil"},
		"adverts nil callback":    {func() error { _, err := b.WatchAdverts(ctx, nil); return err }, "nil"},
		"bad option": {func() error {
			_, err := Connect(ctx, s.ClientURL(), WithAckWait(0))
			return err
		}, "ack wait"},
		"empty url": {func() error { _, err := Connect(ctx, ""); return err }, "url"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.call()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestConsumeWithoutStreamsSaysSo(t *testing.T) {
	s := newServer(t)
	ctx := testCtx(t, 5*time.Second)
	b, err := Connect(ctx, s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = b.ConsumeDispatches(ctx, "c1", func(context.Context, Delivery) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "EnsureStreams") {
		t.Fatalf("err = %v, want a hint to call EnsureStreams", err)
	}
}

func TestPublishDispatchDeduplicatesByMsgID(t *testing.T) {
	s := newServer(t)
	b := newBus(t, s)
	ctx := testCtx(t, 10*time.Second)
	dup, err := b.PublishDispatch(ctx, "c1", "disp-1", []byte("first"))
	if err != nil || dup {
		t.Fatalf("first publish: dup=%v err=%v", dup, err)
	}
	dup, err = b.PublishDispatch(ctx, "c1", "disp-1", []byte("retry"))
	if err != nil || !dup {
		t.Fatalf("second publish of the same id: dup=%v err=%v, want dup=true", dup, err)
	}
	// The same id on another cluster's subject is still the same dispatch id
	// in the same stream: deduplicated too.
	if dup, err := b.PublishDispatch(ctx, "c2", "disp-1", []byte("other")); err != nil || !dup {
		t.Fatalf("same id, other cluster: dup=%v err=%v, want dup=true", dup, err)
	}
	if dup, err := b.PublishDispatch(ctx, "c1", "disp-2", []byte("second")); err != nil || dup {
		t.Fatalf("new id: dup=%v err=%v", dup, err)
	}

	rec := newRecorder()
	if _, err := b.ConsumeDispatches(ctx, "c1", func(_ context.Context, d Delivery) error { rec.ch <- d; return nil }); err != nil {
		t.Fatal(err)
	}
	first := rec.next(t, 3*time.Second)
	second := rec.next(t, 3*time.Second)
	if first.MsgID != "disp-1" || string(first.Payload) != "first" || second.MsgID != "disp-2" {
		t.Fatalf("got %s=%q then %s, want disp-1=first then disp-2", first.MsgID, first.Payload, second.MsgID)
	}
	if first.Cluster != "c1" || first.Subject != "meridian.dispatch.c1" || first.NumDelivered != 1 {
		t.Fatalf("delivery metadata %+v", first)
	}
	rec.none(t, 300*time.Millisecond)
	if n, err := b.DispatchBacklog(ctx, "c1"); err != nil || n != 0 {
		t.Fatalf("backlog after acks = %d, %v; want 0", n, err)
	}
}

func TestHandlerErrorRedelivers(t *testing.T) {
	s := newServer(t)
	b := newBus(t, s)
	ctx := testCtx(t, 10*time.Second)
	var calls atomic.Int32
	rec := newRecorder()
	_, err := b.ConsumeDispatches(ctx, "c1", func(_ context.Context, d Delivery) error {
		rec.ch <- d
		if calls.Add(1) <= 2 {
			return errors.New("launch failed, try again")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishDispatch(ctx, "c1", "d-retry", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for want := uint64(1); want <= 3; want++ {
		d := rec.next(t, 3*time.Second)
		if d.MsgID != "d-retry" || d.NumDelivered != want {
			t.Fatalf("delivery %d: got %s #%d", want, d.MsgID, d.NumDelivered)
		}
	}
	rec.none(t, 400*time.Millisecond) // acked on the third try: no more
}

// A handler that runs longer than the ack wait (waiting for a launch slot
// behind a slow backend) keeps its message: the consumer tells the server
// it is in progress, so the message is handled once, not redelivered to
// a second handler while the first still runs.
func TestLongHandlerIsNotRedelivered(t *testing.T) {
	s := newServer(t)
	b := newBus(t, s, WithAckWait(300*time.Millisecond))
	ctx := testCtx(t, 10*time.Second)
	rec := newRecorder()
	if _, err := b.ConsumeDispatches(ctx, "c1", func(ctx context.Context, d Delivery) error {
		rec.ch <- d
		select {
		case <-time.After(time.Second): // over three ack waits
		case <-ctx.Done():
		}
		return nil
	}, WithHandlers(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishDispatch(ctx, "c1", "d-slow", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if d := rec.next(t, 3*time.Second); d.MsgID != "d-slow" || d.NumDelivered != 1 {
		t.Fatalf("first delivery %s #%d", d.MsgID, d.NumDelivered)
	}
	rec.none(t, 1500*time.Millisecond)
}

func TestPermanentErrorsAndPanicsDoNotStopTheConsumer(t *testing.T) {
	s := newServer(t)
	b := newBus(t, s)
	ctx := testCtx(t, 10*time.Second)
	type dispatch struct {
		ID string `json:"id"`
	}
	decode := func(p []byte) (dispatch, error) {
		var d dispatch
		err := json.Unmarshal(p, &d)
		return d, err
	}
	var mu sync.Mutex
	var got []string
	attempts := map[string]int{}
	h := Decoded(decode, func(_ context.Context, d Delivery, v dispatch) error {
		mu.Lock()
		defer mu.Unlock()
		attempts[d.MsgID]++
		if v.ID == "boom" && attempts[d.MsgID] == 1 {
			panic("agent bug")
		}
		got = append(got, v.ID)
		return nil
	})
	var seen atomic.Int32
	if _, err := b.ConsumeDispatches(ctx, "c1", func(ctx context.Context, d Delivery) error {
		seen.Add(1)
		return h(ctx, d)
	}); err != nil {
		t.Fatal(err)
	}
	for id, payload := range map[string]string{"bad": "{not json", "boom": `{"id":"boom"}`} {
		if _, err := b.PublishDispatch(ctx, "c1", id, []byte(payload)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.PublishDispatch(ctx, "c1", "ok", []byte(`{"id":"ok"}`)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		done := len(got) == 2
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handled %v, want boom (after its panic) and ok", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	// bad: delivered once and terminated; boom: panicked once, then acked.
	if n := seen.Load(); n != 4 {
		t.Fatalf("handler saw %d deliveries, want 4 (bad once, boom twice, ok once)", n)
	}
}

func TestUnackedDispatchesReturnAfterConsumerDies(t *testing.T) {
	s := newServer(t)
	ctx := testCtx(t, 15*time.Second)
	opts := []Option{WithAckWait(500 * time.Millisecond)}
	pub := newBus(t, s, opts...)

	// Agent process A acks ack-* and hangs on hold-* (it "crashes" mid-launch).
	a := newBus(t, s, opts...)
	release := make(chan struct{})
	defer close(release)
	acked := make(chan string, 10)
	holding := make(chan string, 10)
	if _, err := a.ConsumeDispatches(ctx, "c1", func(_ context.Context, d Delivery) error {
		if strings.HasPrefix(d.MsgID, "hold-") {
			holding <- d.MsgID
			<-release
			return errors.New("never reached before the crash")
		}
		acked <- d.MsgID
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ack-1", "ack-2", "ack-3", "hold-1", "hold-2"} {
		if _, err := pub.PublishDispatch(ctx, "c1", id, []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		select {
		case <-acked:
		case <-time.After(3 * time.Second):
			t.Fatal("A did not ack its messages")
		}
	}
	select {
	case id := <-holding:
		if id != "hold-1" {
			t.Fatalf("A is holding %s, want hold-1", id)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("A never got hold-1")
	}
	// The DoubleAck of ack-3 has returned before hold-1 was handed over, so
	// the server has recorded all three acks. Now A dies.
	a.Conn().Close()

	// Agent process B comes up with the same durable consumer.
	b := newBus(t, s, opts...)
	rec := newRecorder()
	if _, err := b.ConsumeDispatches(ctx, "c1", func(_ context.Context, d Delivery) error { rec.ch <- d; return nil }); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for len(got) < 2 {
		d := rec.next(t, 5*time.Second)
		if strings.HasPrefix(d.MsgID, "ack-") {
			t.Fatalf("acknowledged %s delivered again", d.MsgID)
		}
		got[d.MsgID] = d.NumDelivered
	}
	if got["hold-1"] < 2 || got["hold-2"] < 1 {
		t.Fatalf("redelivered %v, want hold-1 (again) and hold-2", got)
	}
	rec.none(t, 700*time.Millisecond)
}

func TestServerRestartKeepsDispatchesAndConsumers(t *testing.T) {
	s := newServer(t)
	ctx := testCtx(t, 20*time.Second)
	b := newBus(t, s)
	rec := newRecorder()
	if _, err := b.ConsumeDispatches(ctx, "live", func(_ context.Context, d Delivery) error { rec.ch <- d; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishDispatch(ctx, "live", "before", nil); err != nil {
		t.Fatal(err)
	}
	if d := rec.next(t, 3*time.Second); d.MsgID != "before" {
		t.Fatalf("got %s, want before", d.MsgID)
	}
	// Dispatches for a cluster whose agent has not connected yet.
	for i := 0; i < 5; i++ {
		if _, err := b.PublishDispatch(ctx, "idle", fmt.Sprintf("q-%d", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}

	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("nats restart took %s", s.StartupTime())

	// The same Bus reconnects; its consumer picks up new dispatches.
	var err error
	for i := 0; i < 100; i++ {
		if _, err = b.PublishDispatch(ctx, "live", "after", nil); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("publish after restart: %v", err)
	}
	if d := rec.next(t, 10*time.Second); d.MsgID != "after" {
		t.Fatalf("got %s after restart, want after", d.MsgID)
	}

	// The idle cluster's agent connects now and gets all five, in order.
	agent := newBus(t, s)
	idle := newRecorder()
	if _, err := agent.ConsumeDispatches(ctx, "idle", func(_ context.Context, d Delivery) error { idle.ch <- d; return nil }); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		d := idle.next(t, 3*time.Second)
		if want := fmt.Sprintf("q-%d", i); d.MsgID != want || len(d.Payload) != 1 || d.Payload[0] != byte(i) {
			t.Fatalf("message %d = %s %v, want %s", i, d.MsgID, d.Payload, want)
		}
	}
}

func TestEventsAdvertsAndHeartbeats(t *testing.T) {
	s := newServer(t)
	ctx := testCtx(t, 10*time.Second)
	hub := newBus(t, s)
	agent := newBus(t, s)

	// Events from two clusters arrive at the hub's single consumer.
	rec := newRecorder()
	if _, err := hub.ConsumeEvents(ctx, func(_ context.Context, d Delivery) error { rec.ch <- d; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"east", "west"} {
		if _, err := agent.PublishEvent(ctx, c, "ev-"+c, []byte("Accepted")); err != nil {
			t.Fatal(err)
		}
	}
	if dup, err := agent.PublishEvent(ctx, "east", "ev-east", []byte("Accepted")); err != nil || !dup {
		t.Fatalf("re-sent event: dup=%v err=%v", dup, err)
	}
	clusters := map[string]string{}
	for i := 0; i < 2; i++ {
		d := rec.next(t, 3*time.Second)
		clusters[d.Cluster] = d.MsgID
	}
	if clusters["east"] != "ev-east" || clusters["west"] != "ev-west" {
		t.Fatalf("events by cluster %v", clusters)
	}
	rec.none(t, 200*time.Millisecond)

	// Adverts: only the latest per cluster is replayed, then live updates.
	for _, a := range [][2]string{{"east", "e1"}, {"east", "e2"}, {"west", "w1"}} {
		if err := agent.PublishAdvert(ctx, a[0], []byte(a[1])); err != nil {
			t.Fatal(err)
		}
	}
	adverts := make(chan string, 10)
	if _, err := hub.WatchAdverts(ctx, func(c string, p []byte) { adverts <- c + "=" + string(p) }); err != nil {
		t.Fatal(err)
	}
	initial := map[string]bool{}
	for i := 0; i < 2; i++ {
		select {
		case a := <-adverts:
			initial[a] = true
		case <-time.After(3 * time.Second):
			t.Fatalf("initial adverts %v, want east=e2 and west=w1", initial)
		}
	}
	if !initial["east=e2"] || !initial["west=w1"] {
		t.Fatalf("initial adverts %v, want east=e2 and west=w1", initial)
	}
	if err := agent.PublishAdvert(ctx, "west", []byte("w2")); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-adverts:
		if a != "west=w2" {
			t.Fatalf("live advert %s, want west=w2", a)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no live advert")
	}

	// Heartbeats on core NATS.
	beats := make(chan string, 10)
	sub, err := hub.SubscribeHeartbeats(ctx, func(c string, p []byte) { beats <- c + ":" + string(p) })
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.PublishHeartbeat(ctx, "east", []byte("d1,d2")); err != nil {
		t.Fatal(err)
	}
	select {
	case hb := <-beats:
		if hb != "east:d1,d2" {
			t.Fatalf("heartbeat %q", hb)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no heartbeat")
	}
	sub.Stop()
	select {
	case <-sub.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	if err := agent.PublishHeartbeat(ctx, "east", []byte("late")); err != nil {
		t.Fatal(err)
	}
	_ = agent.Conn().Flush()
	select {
	case hb := <-beats:
		t.Fatalf("heartbeat %q after Stop", hb)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestCloseStopsSubscriptions(t *testing.T) {
	s := newServer(t)
	ctx := testCtx(t, 5*time.Second)
	b := newBus(t, s)
	sub, err := b.ConsumeDispatches(ctx, "c1", func(context.Context, Delivery) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	b.Close()
	select {
	case <-sub.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("subscription still running after Close")
	}
	if _, err := b.ConsumeDispatches(ctx, "c1", func(context.Context, Delivery) error { return nil }); err == nil {
		t.Fatal("consume on a closed bus succeeded")
	}
}

func TestNakDelayBacksOff(t *testing.T) {
	b := &Bus{opts: options{nakBase: 100 * time.Millisecond, nakMax: time.Second}}
	tests := map[string]struct {
		n    uint64
		want time.Duration
	}{
		"first":   {1, 100 * time.Millisecond},
		"second":  {2, 200 * time.Millisecond},
		"fourth":  {4, 800 * time.Millisecond},
		"capped":  {5, time.Second},
		"huge":    {1 << 40, time.Second},
		"unknown": {0, 100 * time.Millisecond},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := b.nakDelay(tc.n); got != tc.want {
				t.Fatalf("nakDelay(%d) = %s, want %s", tc.n, got, tc.want)
			}
		})
	}
}
