package natsbus

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestAgentPermissionsAreTheClustersOwn(t *testing.T) {
	p, err := AgentPermissions("gpu-east")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"meridian.advert.gpu-east", "meridian.heartbeat.gpu-east", "meridian.events.gpu-east", "meridian.register.gpu-east",
		"$JS.API.CONSUMER.INFO.DISPATCH.dispatch-gpu-east", "$JS.API.CONSUMER.MSG.NEXT.DISPATCH.dispatch-gpu-east",
		"$JS.ACK.DISPATCH.dispatch-gpu-east.>",
	}
	if strings.Join(p.Publish, " ") != strings.Join(want, " ") {
		t.Fatalf("publish %v, want %v", p.Publish, want)
	}
	if strings.Join(p.Subscribe, " ") != "_INBOX_gpu-east.> meridian.advert-request.gpu-east" {
		t.Fatalf("subscribe %v", p.Subscribe)
	}
	for _, s := range append(p.Publish, p.Subscribe...) {
		if strings.Contains(s, "*") || s == ">" || strings.HasPrefix(s, "$JS.API.STREAM") {
			t.Fatalf("%q is wider than one cluster", s)
		}
	}
	if _, err := AgentPermissions("a.b"); err == nil {
		t.Fatal("AgentPermissions(a.b) succeeded")
	}
}

func TestInboxPrefix(t *testing.T) {
	if p, err := ClusterInboxPrefix("c1"); err != nil || p != "_INBOX_c1" {
		t.Fatalf("ClusterInboxPrefix(c1) = %q, %v", p, err)
	}
	for _, bad := range []string{"", "a.*", "a.>", ".a", "a.", "a..b", "a b"} {
		if err := WithInboxPrefix(bad)(&options{}); err == nil {
			t.Errorf("WithInboxPrefix(%q) accepted", bad)
		}
	}
	s := newServer(t)
	ctx := testCtx(t, 5*time.Second)
	b, err := Connect(ctx, s.ClientURL(), WithInboxPrefix("_INBOX_c1"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if in := b.Conn().NewInbox(); !strings.HasPrefix(in, "_INBOX_c1.") {
		t.Fatalf("inbox %q does not use the prefix", in)
	}
}

// TestConsumeBindsToTheHubsConsumer: the hub makes the consumer with its
// settings; an agent's ConsumeDispatches binds to it as it is and does not
// change it.
func TestConsumeBindsToTheHubsConsumer(t *testing.T) {
	s := newServer(t)
	ctx := testCtx(t, 10*time.Second)
	hub := newBus(t, s, WithAckWait(7*time.Second))
	if ok, err := hub.DispatchConsumerExists(ctx, "c1"); err != nil || ok {
		t.Fatalf("before: exists=%v err=%v", ok, err)
	}
	if err := hub.EnsureDispatchConsumer(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if err := hub.EnsureDispatchConsumer(ctx, "c1"); err != nil {
		t.Fatalf("second EnsureDispatchConsumer: %v", err)
	}
	agent := newBus(t, s, WithAckWait(time.Second))
	if ok, err := agent.DispatchConsumerExists(ctx, "c1"); err != nil || !ok {
		t.Fatalf("after: exists=%v err=%v", ok, err)
	}
	if _, err := hub.PublishDispatch(ctx, "c1", "d1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	if _, err := agent.ConsumeDispatches(ctx, "c1", func(_ context.Context, d Delivery) error { rec.ch <- d; return nil }); err != nil {
		t.Fatal(err)
	}
	if d := rec.next(t, 3*time.Second); d.MsgID != "d1" {
		t.Fatalf("got %s", d.MsgID)
	}
	c, err := hub.JetStream().Consumer(ctx, StreamDispatch, "dispatch-c1")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.AckWait; got != 7*time.Second {
		t.Fatalf("ack wait %s after the agent bound, want the hub's 7s", got)
	}
	if err := hub.EnsureDispatchConsumer(ctx, "bad.id"); err == nil {
		t.Fatal("EnsureDispatchConsumer(bad.id) succeeded")
	}
}
