package spokeauth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// violations collects the server's asynchronous errors on a raw connection
// that uses an agent's credential and inbox.
type violations struct {
	mu   sync.Mutex
	errs []string
	ch   chan struct{}
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	v.mu.Lock()
	v.errs = append(v.errs, err.Error())
	v.mu.Unlock()
	select {
	case v.ch <- struct{}{}:
	default:
	}
}

// waitFor waits until an error mentioning want has arrived.
func (v *violations) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		v.mu.Lock()
		for _, e := range v.errs {
			if strings.Contains(strings.ToLower(e), "permissions violation") && strings.Contains(e, want) {
				v.mu.Unlock()
				return
			}
		}
		got := append([]string(nil), v.errs...)
		v.mu.Unlock()
		select {
		case <-v.ch:
		case <-deadline:
			t.Fatalf("no permissions violation for %q; the server reported %q", want, got)
		}
	}
}

func rawAgentConn(t *testing.T, e *env, cluster, creds string) (*nats.Conn, *violations) {
	t.Helper()
	v := &violations{ch: make(chan struct{}, 1)}
	inbox, _ := natsbus.ClusterInboxPrefix(cluster)
	nc, err := nats.Connect(e.srv.ClientURL(), nats.UserCredentials(creds), nats.CustomInboxPrefix(inbox), nats.ErrorHandler(v.handler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, v
}

// TestSpokeCannotImpersonateAnotherCluster: cluster A's credential works
// for A's own traffic, and the NATS server refuses it for B's adverts,
// heartbeats, events and register requests, for reading or acking B's
// dispatches, for reading B's replies, and for any stream or consumer
// management; nothing of it reaches B's subjects or the streams.
func TestSpokeCannotImpersonateAnotherCluster(t *testing.T) {
	e := newEmbeddedEnv(t)
	ctx := testCtx(t, 60*time.Second)
	_, credsA := e.register("a", false)
	e.register("b", false)

	// What the hub sees on B's subjects.
	var seenB sync.Map
	hb, err := e.hub.SubscribeHeartbeats(ctx, func(cluster string, _ []byte) { seenB.Store("heartbeat."+cluster, true) })
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Stop()
	if _, err := e.hub.PublishDispatch(ctx, "b", "disp-b-1", []byte("for b only")); err != nil {
		t.Fatal(err)
	}

	// A's own traffic works through natsbus, as the agent uses it.
	agentA := e.agentBus("a", credsA)
	if ok, err := agentA.DispatchConsumerExists(ctx, "a"); err != nil || !ok {
		t.Fatalf("A cannot see its own consumer: %v, %v", ok, err)
	}
	if _, err := e.hub.PublishDispatch(ctx, "a", "disp-a-1", []byte("for a")); err != nil {
		t.Fatal(err)
	}
	got := make(chan natsbus.Delivery, 10)
	subA, err := agentA.ConsumeDispatches(ctx, "a", func(_ context.Context, d natsbus.Delivery) error { got <- d; return nil })
	if err != nil {
		t.Fatalf("A cannot consume its own dispatches: %v", err)
	}
	defer subA.Stop()
	select {
	case d := <-got:
		if d.MsgID != "disp-a-1" {
			t.Fatalf("A got %s, want disp-a-1", d.MsgID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("A got none of its own dispatches")
	}
	if _, err := agentA.PublishEvent(ctx, "a", "ev-a-1", []byte("accepted")); err != nil {
		t.Fatalf("A cannot publish its own event: %v", err)
	}
	if err := agentA.PublishAdvert(ctx, "a", []byte("cap")); err != nil {
		t.Fatalf("A cannot publish its own advert: %v", err)
	}
	if err := agentA.PublishHeartbeat(ctx, "a", []byte("hb")); err != nil {
		t.Fatalf("A cannot publish its own heartbeat: %v", err)
	}

	// Everything as B, or beyond A's rights, is refused by the server.
	nc, v := rawAgentConn(t, e, "a", credsA)
	pubs := map[string]string{
		"advert as B":             "meridian.advert.b",
		"heartbeat as B":          "meridian.heartbeat.b",
		"event as B":              "meridian.events.b",
		"register as B":           "meridian.register.b",
		"dispatch to B":           "meridian.dispatch.b",
		"dispatch to itself":      "meridian.dispatch.a",
		"look up B's consumer":    "$JS.API.CONSUMER.INFO.DISPATCH.dispatch-b",
		"pull B's dispatches":     "$JS.API.CONSUMER.MSG.NEXT.DISPATCH.dispatch-b",
		"ack B's dispatches":      "$JS.ACK.DISPATCH.dispatch-b.1.1.1.1.1",
		"purge DISPATCH":          "$JS.API.STREAM.PURGE.DISPATCH",
		"delete DISPATCH":         "$JS.API.STREAM.DELETE.DISPATCH",
		"delete EVENTS":           "$JS.API.STREAM.DELETE.EVENTS",
		"update DISPATCH":         "$JS.API.STREAM.UPDATE.DISPATCH",
		"create a stream":         "$JS.API.STREAM.CREATE.EVIL",
		"delete a message":        "$JS.API.STREAM.MSG.DELETE.DISPATCH",
		"read a message directly": "$JS.API.STREAM.MSG.GET.DISPATCH",
		"create a consumer":       "$JS.API.CONSUMER.CREATE.DISPATCH.evil",
		"durable on B's subject":  "$JS.API.CONSUMER.DURABLE.CREATE.DISPATCH.evil",
		"delete B's consumer":     "$JS.API.CONSUMER.DELETE.DISPATCH.dispatch-b",
		"delete its own consumer": "$JS.API.CONSUMER.DELETE.DISPATCH.dispatch-a",
		"read the hub's events":   "$JS.API.CONSUMER.MSG.NEXT.EVENTS.hub-events",
	}
	for name, subj := range pubs {
		t.Run("publish "+name, func(t *testing.T) {
			if err := nc.PublishRequest(subj, nc.NewInbox(), []byte("{}")); err != nil {
				t.Fatal(err)
			}
			v.waitFor(t, fmt.Sprintf("Publish to %q", subj))
		})
	}
	subs := map[string]string{
		"B's dispatch subject": "meridian.dispatch.b",
		"B's replies":          "_INBOX_b.>",
		"the default inbox":    "_INBOX.>",
		"everything":           ">",
		"B's events":           "meridian.events.b",
	}
	for name, subj := range subs {
		t.Run("subscribe "+name, func(t *testing.T) {
			s, err := nc.SubscribeSync(subj)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Unsubscribe() }()
			v.waitFor(t, fmt.Sprintf("Subscription to %q", subj))
		})
	}

	// The JetStream calls as natsbus would make them for B fail too.
	if _, err := agentA.ConsumeDispatches(testCtx(t, 3*time.Second), "b", func(context.Context, natsbus.Delivery) error { return nil }); err == nil {
		t.Fatal("A consumed B's dispatches")
	}

	// Nothing reached B's subjects or changed the streams.
	if _, ok := seenB.Load("heartbeat.b"); ok {
		t.Fatal("the hub received a heartbeat for B")
	}
	js := e.hub.JetStream()
	for _, name := range []string{natsbus.StreamDispatch, natsbus.StreamEvents, natsbus.StreamAdvert} {
		if _, err := js.Stream(ctx, name); err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
	}
	st, _ := js.Stream(ctx, natsbus.StreamEvents)
	if _, err := st.GetLastMsgForSubject(ctx, "meridian.events.b"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("an event reached meridian.events.b: %v", err)
	}
	st, _ = js.Stream(ctx, natsbus.StreamAdvert)
	if _, err := st.GetLastMsgForSubject(ctx, "meridian.advert.b"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("an advert reached meridian.advert.b: %v", err)
	}
	if n, err := e.hub.DispatchBacklog(ctx, "b"); err != nil || n != 1 {
		t.Fatalf("B's backlog = %d, %v; want its one dispatch still waiting", n, err)
	}
	if _, err := js.Consumer(ctx, natsbus.StreamDispatch, "evil"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("consumer evil: %v, want not found", err)
	}
}

// waitDisconnected waits until b's connection is no longer connected.
func waitDisconnected(t *testing.T, b *natsbus.Bus, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for b.Conn().IsConnected() {
		if time.Now().After(deadline) {
			t.Fatalf("still connected %s after the revocation", within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRevokeStopsOneClusterOnly: revoking A's credential disconnects A at
// once and refuses it from then on, with no restart of anything; B's agent
// carries on.
func TestRevokeStopsOneClusterOnly(t *testing.T) {
	e := newEmbeddedEnv(t)
	ctx := testCtx(t, 60*time.Second)
	isA, credsA := e.register("a", false)
	_, credsB := e.register("b", false)
	agentA := e.agentBus("a", credsA)
	agentB := e.agentBus("b", credsB)
	gotB := make(chan string, 10)
	if _, err := agentB.ConsumeDispatches(ctx, "b", func(_ context.Context, d natsbus.Delivery) error { gotB <- d.MsgID; return nil }); err != nil {
		t.Fatal(err)
	}

	revoked, err := e.auth.Revoke(ctx, "a", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(revoked) != 1 || revoked[0].PublicKey != isA.PublicKey {
		t.Fatalf("revoked %+v, want A's one credential %s", revoked, isA.PublicKey)
	}
	waitDisconnected(t, agentA, 5*time.Second)
	if err := agentA.PublishHeartbeat(ctx, "a", []byte("hb")); err == nil && agentA.Conn().IsConnected() {
		t.Fatal("A still publishes after the revocation")
	}
	if _, err := e.agentBusErr("a", credsA); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("a new connection with A's revoked credential: %v, want an authorization error", err)
	}

	// B is untouched: still connected, still served.
	if !agentB.Conn().IsConnected() {
		t.Fatal("B was disconnected by A's revocation")
	}
	if _, err := e.hub.PublishDispatch(ctx, "b", "disp-b-after", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-gotB:
		if id != "disp-b-after" {
			t.Fatalf("B got %s", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("B got no dispatch after A's revocation")
	}
	if _, err := agentB.PublishEvent(ctx, "b", "ev-b-after", []byte("x")); err != nil {
		t.Fatalf("B's event after A's revocation: %v", err)
	}

	// Revoking again changes nothing and is not an error.
	if again, err := e.auth.Revoke(ctx, "a", ""); err != nil || len(again) != 0 {
		t.Fatalf("second revoke: %+v, %v", again, err)
	}
}

// TestRotationLosesNoDispatch follows the documented rotation: issue a
// second credential, replace the agent's .creds file, revoke the first.
// The agent's connection is cut by the revocation and comes back with the
// new file by itself; the durable consumer keeps its place, so every
// dispatch published before, during and after is delivered and acked.
func TestRotationLosesNoDispatch(t *testing.T) {
	e := newEmbeddedEnv(t)
	ctx := testCtx(t, 60*time.Second)
	old, credsPath := e.register("c", false)
	agent := e.agentBus("c", credsPath)
	var mu sync.Mutex
	acked := map[string]int{}
	if _, err := agent.ConsumeDispatches(ctx, "c", func(_ context.Context, d natsbus.Delivery) error {
		mu.Lock()
		acked[d.MsgID]++
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := e.hub.PublishDispatch(ctx, "c", fmt.Sprintf("d-%03d", i), []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(0, 20)

	// 1. A second credential; both are valid now.
	fresh, err := e.auth.Register(ctx, "c", true)
	if err != nil {
		t.Fatal(err)
	}
	publish(20, 40)
	// 2. Roll the agent's secret (the chart's Secret; here the file).
	if err := os.WriteFile(credsPath, fresh.Creds, 0o600); err != nil {
		t.Fatal(err)
	}
	publish(40, 60)
	// 3. Revoke the old one: the connection drops and comes back with the
	// new file.
	reconnected := make(chan struct{}, 1)
	agent.Conn().SetReconnectHandler(func(*nats.Conn) {
		select {
		case reconnected <- struct{}{}:
		default:
		}
	})
	if _, err := e.auth.Revoke(ctx, "c", old.PublicKey); err != nil {
		t.Fatal(err)
	}
	publish(60, 80)
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not reconnect with the rotated credential")
	}
	publish(80, 100)

	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		backlog, err := e.hub.DispatchBacklog(ctx, "c")
		if n == 100 && err == nil && backlog == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 100 dispatches handled, backlog %d (%v)", n, backlog, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rec, err := e.auth.Get(ctx, "c")
	if err != nil || len(rec.Active()) != 1 || rec.Active()[0].PublicKey != fresh.PublicKey {
		t.Fatalf("after rotation: %+v, %v; want only %s active", rec, err, fresh.PublicKey)
	}
}
