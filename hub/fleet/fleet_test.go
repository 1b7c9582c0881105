package fleet

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/scheduler"
	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func advert(id, session string, seq uint64, at time.Time, freeMilli ...int32) *agentv1.Advertisement {
	var gpus []*agentv1.Gpu
	for i, f := range freeMilli {
		gpus = append(gpus, &agentv1.Gpu{Index: int32(i), FreeMilli: f, FreeMemoryMib: 80000, TotalMemoryMib: 81920, Healthy: true})
	}
	return &agentv1.Advertisement{
		ClusterId: id, SessionId: session, Seq: seq, SentAt: timestamppb.New(at),
		Labels:          map[string]string{"site": id},
		FractionalModes: []meridianv1.FractionalMode{meridianv1.FractionalMode_FRACTIONAL_MODE_MPS},
		Nodes:           []*agentv1.Node{{Name: "n1", AcceleratorClass: "h100", Schedulable: true, CpuMilliFree: 64000, MemoryMibFree: 512000, Gpus: gpus}},
	}
}

func freeOf(t *testing.T, r *Registry, id string) int64 {
	t.Helper()
	for _, v := range r.Views() {
		if v.Cluster.ID == id {
			var f int64
			for _, n := range v.Cluster.Nodes {
				f += n.Res.FreeMilli()
			}
			return f
		}
	}
	t.Fatalf("cluster %s has no view", id)
	return 0
}

func TestAdvertsAndDeltas(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
	tests := map[string]struct {
		steps    func(t *testing.T, r *Registry)
		wantFree int64
	}{
		"full advert sets inventory": {
			steps: func(t *testing.T, r *Registry) {
				must(t, r.ApplyAdvert("east", advert("east", "s1", 1, clk.Now(), 1000, 500)))
			},
			wantFree: 1500,
		},
		"older seq of same session ignored": {
			steps: func(t *testing.T, r *Registry) {
				must(t, r.ApplyAdvert("east", advert("east", "s1", 5, clk.Now(), 1000)))
				must(t, r.ApplyAdvert("east", advert("east", "s1", 4, clk.Now(), 1000, 1000)))
			},
			wantFree: 1000,
		},
		"new session replaces whatever seq": {
			steps: func(t *testing.T, r *Registry) {
				must(t, r.ApplyAdvert("east", advert("east", "s1", 5, clk.Now(), 1000)))
				must(t, r.ApplyAdvert("east", advert("east", "s2", 1, clk.Now(), 1000, 1000)))
			},
			wantFree: 2000,
		},
		"delta on last seq applies": {
			steps: func(t *testing.T, r *Registry) {
				must(t, r.ApplyAdvert("east", advert("east", "s1", 1, clk.Now(), 1000)))
				up := advert("east", "s1", 2, clk.Now(), 0, 250).Nodes[0]
				extra := &agentv1.Node{Name: "n2", AcceleratorClass: "h100", Schedulable: true, Gpus: []*agentv1.Gpu{{Index: 0, FreeMilli: 1000, Healthy: true}}}
				must(t, r.ApplyDelta("east", &agentv1.AdvertisementDelta{ClusterId: "east", SessionId: "s1", Seq: 2, BaseSeq: 1, SentAt: timestamppb.New(clk.Now()), UpsertedNodes: []*agentv1.Node{up, extra}}))
				must(t, r.ApplyDelta("east", &agentv1.AdvertisementDelta{ClusterId: "east", SessionId: "s1", Seq: 3, BaseSeq: 2, SentAt: timestamppb.New(clk.Now()), RemovedNodes: []string{"n1"}}))
			},
			wantFree: 1000,
		},
		"delta with a gap is refused": {
			steps: func(t *testing.T, r *Registry) {
				must(t, r.ApplyAdvert("east", advert("east", "s1", 1, clk.Now(), 1000)))
				err := r.ApplyDelta("east", &agentv1.AdvertisementDelta{ClusterId: "east", SessionId: "s1", Seq: 9, BaseSeq: 7, RemovedNodes: []string{"n1"}})
				if err == nil || !strings.Contains(err.Error(), "builds on 7") {
					t.Fatalf("err = %v", err)
				}
			},
			wantFree: 1000,
		},
		"malformed advert keeps the last good inventory": {
			steps: func(t *testing.T, r *Registry) {
				must(t, r.ApplyAdvert("east", advert("east", "s1", 1, clk.Now(), 1000)))
				bad := advert("east", "s1", 2, clk.Now(), 1000)
				bad.Nodes[0].Gpus[0].FreeMilli = 5000
				if err := r.ApplyAdvert("east", bad); err == nil || !strings.Contains(err.Error(), "free_milli") {
					t.Fatalf("err = %v, want free_milli named", err)
				}
			},
			wantFree: 1000,
		},
		"wire payloads of both kinds decode": {
			steps: func(t *testing.T, r *Registry) {
				b, _ := proto.Marshal(advert("east", "s1", 1, clk.Now(), 1000))
				must(t, r.HandleAdvertPayload("east", b))
				d, _ := proto.Marshal(&agentv1.AdvertisementDelta{ClusterId: "east", SessionId: "s1", Seq: 2, BaseSeq: 1, SentAt: timestamppb.New(clk.Now()),
					UpsertedNodes: []*agentv1.Node{advert("east", "s1", 2, clk.Now(), 1000, 1000, 1000).Nodes[0]}})
				must(t, r.HandleAdvertPayload("east", d))
			},
			wantFree: 3000,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := New(Options{Clock: clk.Now, Timeout: 10 * time.Second})
			tc.steps(t, r)
			if got := freeOf(t, r, "east"); got != tc.wantFree {
				t.Fatalf("free = %d, want %d", got, tc.wantFree)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestLostDrainAndReturn(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
	r := New(Options{Clock: clk.Now, Timeout: 10 * time.Second})
	must(t, r.ApplyAdvert("east", advert("east", "s1", 1, clk.Now(), 1000, 1000)))
	must(t, r.ApplyAdvert("west", advert("west", "s1", 1, clk.Now(), 1000)))
	if err := r.ApplyAdvert("north", advert("east", "s1", 2, clk.Now(), 1000)); err == nil {
		t.Fatal("an advert on another cluster's subject must be refused")
	}

	clk.Add(6 * time.Second)
	must(t, r.ApplyHeartbeat("west", &agentv1.Heartbeat{ClusterId: "west", SentAt: timestamppb.New(clk.Now()),
		Dispatches: []*agentv1.RunningDispatch{{DispatchId: "d2"}, {DispatchId: "d1"}}}))
	clk.Add(6 * time.Second)
	if lost := r.Sweep(); strings.Join(lost, ",") != "east" {
		t.Fatalf("lost = %v, want east only (west heartbeated 6s ago)", lost)
	}
	if lost := r.Sweep(); len(lost) != 0 {
		t.Fatalf("second sweep reported %v again", lost)
	}
	if s, _ := r.State("east"); s != scheduler.ClusterLost {
		t.Fatalf("east state = %v", s)
	}
	ids, at, ok := r.Reported("west")
	if !ok || strings.Join(ids, ",") != "d1,d2" {
		t.Fatalf("reported = %v %v", ids, ok)
	}
	if got, ok := r.ReportedAt("west"); !ok || !got.Equal(at) {
		t.Fatalf("ReportedAt = %v %v, want %v (Reported's time)", got, ok, at)
	}
	if _, ok := r.ReportedAt("east"); ok {
		t.Fatal("ReportedAt says east reported, but it never sent a heartbeat")
	}

	must(t, r.SetDraining(context.Background(), "west", true))
	if err := r.SetDraining(context.Background(), "nowhere", true); !IsUnknownCluster(err) {
		t.Fatalf("err = %v, want ErrUnknownCluster", err)
	}
	c, ok := r.GetCluster("west")
	if !ok || c.State != meridianv1.ClusterState_CLUSTER_STATE_DRAINING || c.RunningDispatches != 2 || len(c.Capacity) != 1 || c.Capacity[0].FreeMilli != 1000 {
		t.Fatalf("west = %v", c)
	}

	// east comes back with a heartbeat.
	must(t, r.ApplyHeartbeat("east", &agentv1.Heartbeat{ClusterId: "east", SentAt: timestamppb.New(clk.Now())}))
	if s, _ := r.State("east"); s != scheduler.ClusterReady {
		t.Fatalf("east after heartbeat = %v, want READY", s)
	}
	list := r.ListClusters()
	if len(list) != 2 || list[0].Id != "east" || list[1].Id != "west" {
		t.Fatalf("list = %v", list)
	}
}

func TestReplayedOldAdvertDoesNotLookAlive(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
	r := New(Options{Clock: clk.Now, Timeout: 10 * time.Second})
	must(t, r.ApplyAdvert("east", advert("east", "s1", 1, clk.Now().Add(-time.Hour), 1000)))
	if lost := r.Sweep(); strings.Join(lost, ",") != "east" {
		t.Fatalf("lost = %v: an hour-old advert must not make a cluster look alive", lost)
	}
}

// startBus runs a NATS server of the test's own with the streams made and
// returns a bus connected to it.
func startBus(t *testing.T, ctx context.Context) *natsbus.Bus {
	t.Helper()
	ns, err := embednats.Start(embednats.Config{StoreDir: t.TempDir()})
	must(t, err)
	t.Cleanup(func() { _ = ns.Close() })
	bus, err := natsbus.Connect(ctx, ns.ClientURL())
	must(t, err)
	t.Cleanup(bus.Close)
	must(t, bus.EnsureStreams(ctx))
	return bus
}

// waitReplayed fails the test unless r's replay of the stream ends soon.
func waitReplayed(t *testing.T, r *Registry) {
	t.Helper()
	select {
	case <-r.Replayed():
	case <-time.After(5 * time.Second):
		t.Fatal("the replay of the stream's advertisements did not end")
	}
}

func TestStartOverNATS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bus := startBus(t, ctx)

	// An advert published before the registry starts is replayed to it.
	b, _ := proto.Marshal(advert("east", "s1", 1, time.Now(), 1000, 1000))
	must(t, bus.PublishAdvert(ctx, "east", b))
	r := New(Options{Timeout: 10 * time.Second})
	must(t, r.Start(ctx, bus))
	waitReplayed(t, r)
	if ids := r.IDs(); strings.Join(ids, ",") != "east" {
		t.Fatalf("clusters once the replay ended: %v, want east", ids)
	}
	hb, _ := proto.Marshal(&agentv1.Heartbeat{ClusterId: "east", SentAt: timestamppb.Now(), Dispatches: []*agentv1.RunningDispatch{{DispatchId: "d9"}}})
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, hbOK := r.Reported("east")
		if len(r.Views()) == 1 && hbOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry did not see the advert and heartbeat: views %d", len(r.Views()))
		}
		must(t, bus.PublishHeartbeat(ctx, "east", hb))
		time.Sleep(20 * time.Millisecond)
	}
	if got := freeOf(t, r, "east"); got != 2000 {
		t.Fatalf("free = %d", got)
	}
	select {
	case <-r.Changed():
	default:
		t.Fatal("no change signal after an advert")
	}
}

// TestStartOnADeltaAsksForAFullAdvert: when the stream's last advert of a
// cluster is a delta (every hub restarted between an agent's full
// advertisements), the registry asks the agent for a full one, once per
// askGap however many deltas it drops, instead of waiting for the next
// periodic one.
func TestStartOnADeltaAsksForAFullAdvert(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bus := startBus(t, ctx)
	asked := make(chan struct{}, 16)
	stop, err := bus.SubscribeAdvertRequests("east", func() { asked <- struct{}{} })
	must(t, err)
	defer stop()
	must(t, bus.Conn().Flush())

	delta := func(seq uint64) []byte {
		b, _ := proto.Marshal(&agentv1.AdvertisementDelta{ClusterId: "east", SessionId: "s1", Seq: seq, BaseSeq: seq - 1, SentAt: timestamppb.Now()})
		return b
	}
	must(t, bus.PublishAdvert(ctx, "east", delta(7)))
	r := New(Options{Timeout: 10 * time.Second})
	must(t, r.Start(ctx, bus))
	waitReplayed(t, r)
	// Known from the delta alone (so that a hub after a restore waits for
	// it), though without capacity until the full advertisement.
	if ids, views := r.IDs(), r.Views(); strings.Join(ids, ",") != "east" || len(views) != 0 {
		t.Fatalf("after a baseless delta: ids %v, %d views; want east known, no capacity", ids, len(views))
	}
	select {
	case <-asked:
	case <-time.After(5 * time.Second):
		t.Fatal("the registry did not ask for a full advertisement")
	}
	for seq := uint64(8); seq < 12; seq++ { // more deltas it cannot apply
		must(t, bus.PublishAdvert(ctx, "east", delta(seq)))
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(asked); n != 0 {
		t.Fatalf("asked %d more times within %s", n, askGap)
	}
	// The full advertisement it asked for makes the cluster known.
	b, _ := proto.Marshal(advert("east", "s1", 12, time.Now(), 1000, 1000))
	must(t, bus.PublishAdvert(ctx, "east", b))
	deadline := time.Now().Add(5 * time.Second)
	for len(r.Views()) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the full advertisement did not make the cluster known")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A view's nodes are shared until OwnNodes: charging them after it (as the
// scheduling loop does for work the agent has not advertised yet) leaves
// the registry and the next view untouched.
func TestOwnNodesCopies(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}
	r := New(Options{Clock: clk.Now})
	must(t, r.ApplyAdvert("east", advert("east", "s1", 1, clk.Now(), 1000, 1000)))
	v := r.Views()
	v[0].OwnNodes()
	v[0].Cluster.Nodes[0].Res.GPUs[0].FreeMilli = 0
	v[0].Cluster.Nodes[0].Name = "renamed"
	if got := freeOf(t, r, "east"); got != 2000 {
		t.Fatalf("free %d after a caller changed its view, want 2000", got)
	}
	if n := r.Views()[0].Cluster.Nodes[0].Name; n != "n1" {
		t.Fatalf("node name %q after a caller changed its view", n)
	}
}
