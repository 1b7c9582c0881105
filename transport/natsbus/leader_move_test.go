package natsbus

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestConsumerResumesSoonAfterItsLeaderDies: when a NATS node dies (the
// one leading a durable consumer, the one its client is connected to, or
// the third), the consumer's next message is delivered within seconds.
// The suspicion was that a pull pending on a dead leader is noticed only
// after two missed heartbeats of the client's default 30 s pull expiry
// (a 30 s stall), which jetstream.PullExpiry would bound; this test and
// the chaos soak's NATS kills saw at most a few seconds (a new stream or
// consumer leader), so the default stays, guarded by this test.
func TestConsumerResumesSoonAfterItsLeaderDies(t *testing.T) {
	for name, victim := range map[string]string{"consumer leader": "leader", "the agent's node": "agent", "the third node": "third"} {
		t.Run(name, func(t *testing.T) { consumerAfterNodeDies(t, victim) })
	}
}

func consumerAfterNodeDies(t *testing.T, victim string) {
	nodes, urls := startCluster(t)
	ctx := testCtx(t, 120*time.Second)
	hub := connectRetry(t, ctx, urls, WithStreamReplicas(3))
	eventually(t, ctx, "the hub's EnsureStreams", func(ctx context.Context) error { return hub.EnsureStreams(ctx) })
	eventually(t, ctx, "the dispatch consumer", func(ctx context.Context) error { return hub.EnsureDispatchConsumer(ctx, "c1") })
	// The consumer's leader, and a node that does not lead it.
	var leader string
	eventually(t, ctx, "the consumer's leader", func(ctx context.Context) error {
		st, err := hub.js.Stream(ctx, StreamDispatch)
		if err != nil {
			return err
		}
		c, err := st.Consumer(ctx, "dispatch-c1")
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return context.DeadlineExceeded
		}
		leader = info.Cluster.Leader
		return nil
	})
	lead := int(leader[len(leader)-1] - '1') // nodes are n1, n2, n3
	other := strings.Split(urls, ",")[(lead+1)%3]
	agent := connectRetry(t, ctx, other)
	got := newRecorder()
	sub, err := agent.ConsumeDispatches(ctx, "c1", func(_ context.Context, d Delivery) error { got.ch <- d; return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	publish := func(id string) time.Time {
		t.Helper()
		t0 := time.Now()
		eventually(t, ctx, "publish "+id, func(ctx context.Context) error {
			_, err := hub.PublishDispatch(ctx, "c1", id, []byte(id))
			return err
		})
		return t0
	}
	publish("d1")
	if d := got.next(t, 10*time.Second); d.MsgID != "d1" {
		t.Fatalf("delivered %s, want d1", d.MsgID)
	}
	kill := map[string]int{"leader": lead, "agent": (lead + 1) % 3, "third": (lead + 2) % 3}[victim]
	t.Logf("consumer leader n%d, the agent is on n%d; n%d dies", lead+1, (lead+1)%3+1, kill+1)
	_ = nodes[kill].Close()
	t0 := publish("d2")
	d := got.next(t, 10*time.Second)
	if d.MsgID != "d2" {
		t.Fatalf("delivered %s, want d2", d.MsgID)
	}
	t.Logf("d2 delivered %s after it was published", time.Since(t0).Round(time.Millisecond))
}
