package natsbus

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
)

func TestWithStreamReplicasRange(t *testing.T) {
	for _, n := range []int{-1, 0, MaxStreamReplicas + 1} {
		var o options
		if err := WithStreamReplicas(n)(&o); err == nil || !strings.Contains(err.Error(), "stream replicas") {
			t.Errorf("WithStreamReplicas(%d) = %v, want an out-of-range error", n, err)
		}
	}
	var o options
	if err := WithStreamReplicas(3)(&o); err != nil || o.streamReplicas != 3 {
		t.Fatalf("WithStreamReplicas(3): %v, %d", err, o.streamReplicas)
	}
}

func TestStreamConfigsCarryReplicas(t *testing.T) {
	b := &Bus{opts: options{streamReplicas: 3}}
	for _, c := range b.StreamConfigs() {
		if c.Replicas != 3 {
			t.Errorf("stream %s has %d replicas, want 3", c.Name, c.Replicas)
		}
	}
}

// TestReplicatedStreamsOnACluster runs the hub's and an agent's side of
// the streams on a three-node cluster: the hub's bus makes R3 streams,
// an agent's bus (no WithStreamReplicas) ensuring them does not set them
// back to one replica, the durable consumers are replicated with their
// stream, and dispatches still flow with one node gone.
func TestReplicatedStreamsOnACluster(t *testing.T) {
	nodes, urls := startCluster(t)
	ctx := testCtx(t, 90*time.Second)
	hub := connectRetry(t, ctx, urls, WithStreamReplicas(3))
	agent := connectRetry(t, ctx, urls)
	streamsReplicas := func(who string) {
		t.Helper()
		for _, name := range []string{StreamDispatch, StreamEvents, StreamAdvert} {
			st, err := hub.js.Stream(ctx, name)
			if err != nil {
				t.Fatalf("after %s: stream %s: %v", who, name, err)
			}
			if r := st.CachedInfo().Config.Replicas; r != 3 {
				t.Fatalf("after %s: stream %s has %d replicas, want 3", who, name, r)
			}
		}
	}
	eventually(t, ctx, "the hub's EnsureStreams", func(ctx context.Context) error { return hub.EnsureStreams(ctx) })
	streamsReplicas("the hub's EnsureStreams")
	if err := agent.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	streamsReplicas("an agent's EnsureStreams")

	if err := hub.EnsureDispatchConsumer(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 10)
	sub, err := agent.ConsumeDispatches(ctx, "c1", func(_ context.Context, d Delivery) error { got <- d.MsgID; return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	evSub, err := hub.ConsumeEvents(ctx, func(context.Context, Delivery) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer evSub.Stop()
	for _, c := range []struct{ stream, name string }{{StreamDispatch, "dispatch-c1"}, {StreamEvents, ""}} {
		st, err := hub.js.Stream(ctx, c.stream)
		if err != nil {
			t.Fatal(err)
		}
		lister := st.ListConsumers(ctx)
		n := 0
		for info := range lister.Info() {
			if c.name != "" && info.Name != c.name {
				continue
			}
			n++
			if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
				t.Errorf("consumer %s on %s: cluster %+v, want a leader and 2 replicas", info.Name, c.stream, info.Cluster)
			}
		}
		if err := lister.Err(); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("no consumer on %s", c.stream)
		}
	}

	publish := func(id string) {
		t.Helper()
		eventually(t, ctx, "publish "+id, func(ctx context.Context) error {
			_, err := hub.PublishDispatch(ctx, "c1", id, []byte(id))
			return err
		})
		select {
		case m := <-got:
			if m != id {
				t.Fatalf("delivered %s, want %s", m, id)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("dispatch %s not delivered", id)
		}
	}
	publish("d1")
	_ = nodes[0].Close()
	publish("d2")
}

// TestNewReplicatedConsumerDeliversAtOnce: a consumer an agent creates
// itself on an R3 stream delivers its first dispatch at once, not after
// its first pull, sent before the consumer had a leader, times out (30 s).
func TestNewReplicatedConsumerDeliversAtOnce(t *testing.T) {
	_, urls := startCluster(t)
	ctx := testCtx(t, 60*time.Second)
	hub := connectRetry(t, ctx, urls, WithStreamReplicas(3))
	agent := connectRetry(t, ctx, urls)
	eventually(t, ctx, "the hub's EnsureStreams", func(ctx context.Context) error { return hub.EnsureStreams(ctx) })
	for i := range 3 {
		cluster := fmt.Sprintf("fresh-%d", i)
		got := make(chan string, 1)
		sub, err := agent.ConsumeDispatches(ctx, cluster, func(_ context.Context, d Delivery) error { got <- d.MsgID; return nil })
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if _, err := hub.PublishDispatch(ctx, cluster, "d-"+cluster, []byte("x")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("consumer %d: first dispatch not delivered within 10s", i)
		}
		t.Logf("consumer %d: delivered after %s", i, time.Since(t0).Round(time.Millisecond))
		sub.Stop()
	}
}

// startCluster starts three clustered JetStream nodes for one test and
// returns them with their client URLs, comma-separated.
func startCluster(t *testing.T) ([]*embednats.Server, string) {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for i := 0; i < 6; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls, ports = append(ls, l), append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	var routes, urls []string
	for i := 0; i < 3; i++ {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+i]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	nodes := make([]*embednats.Server, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = embednats.Start(embednats.Config{StoreDir: t.TempDir(), Port: ports[i], ServerName: fmt.Sprintf("n%d", i+1),
				Cluster: &embednats.Cluster{Name: "natsbus-test", Port: ports[3+i], Routes: routes}})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
		t.Cleanup(func() { _ = nodes[i].Close() })
	}
	return nodes, strings.Join(urls, ",")
}

func connectRetry(t *testing.T, ctx context.Context, urls string, opts ...Option) *Bus {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := Connect(cctx, urls, append([]Option{WithReconnectWait(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// eventually retries f (a JetStream call a new cluster may refuse until it
// has elected its leaders) until it succeeds or ctx ends.
func eventually(t *testing.T, ctx context.Context, what string, f func(context.Context) error) {
	t.Helper()
	for {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
