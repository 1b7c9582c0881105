package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

const clusterID = "sim-a"

const clusterYAML = `
fractionalModes: [mps]
defaultDuration: 30s
nodes:
  - name: gpu
    count: 2
    gpus: 2
    acceleratorClass: nvidia-a100-40gb
    gpuMemoryMiB: 40960
    cpuMilli: 16000
    memoryMiB: 65536
    rack: r1
`

// env is one embedded NATS server, a simcluster, an agent and a "hub" side
// that publishes dispatches and collects events, all real.
type env struct {
	t     testing.TB
	ns    *embednats.Server
	hub   *natsbus.Bus
	sim   *simcluster.Cluster
	clock *simcluster.FakeClock
	agent *agent.Agent

	mu      sync.Mutex
	batches int // EventBatch messages received
	events  []*agentv1.DispatchEvent
	arrived map[string]time.Time // event id -> when the hub side got it
	hbs     []*agentv1.Heartbeat
	deltas  []*agentv1.AdvertisementDelta
	ads     []*agentv1.Advertisement

	// wrap, when set by newEnv's before hook, wraps the connector.
	wrap func(agent.Connector) agent.Connector
	// launchParallelism, when set by the before hook, is the agent's.
	launchParallelism int
	// advertiseInterval, when set by the before hook, replaces 300 ms.
	advertiseInterval time.Duration
	// now, when set by the before hook, is the agent's clock.
	now func() time.Time

	stop context.CancelFunc
	done chan error
}

func logger() *slog.Logger {
	if os.Getenv("MERIDIAN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newEnv(t testing.TB, before func(e *env)) *env {
	t.Helper()
	return startEnv(t, before, true)
}

// newEnvNoWait starts the agent without waiting for its first heartbeat.
func newEnvNoWait(t testing.TB, before func(e *env)) *env {
	t.Helper()
	return startEnv(t, before, false)
}

func startEnv(t testing.TB, before func(e *env), wait bool) *env {
	t.Helper()
	ns, err := embednats.Start(embednats.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := []natsbus.Option{natsbus.WithReconnectWait(50 * time.Millisecond), natsbus.WithNakBackoff(50*time.Millisecond, 200*time.Millisecond)}
	hub, err := natsbus.Connect(ctx, ns.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Close)
	if err := hub.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	cfg, err := simcluster.ParseConfig([]byte(clusterYAML))
	if err != nil {
		t.Fatal(err)
	}
	clock := simcluster.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	sim, err := simcluster.New(cfg, simcluster.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	e := &env{t: t, ns: ns, hub: hub, sim: sim, clock: clock, done: make(chan error, 1), arrived: map[string]time.Time{}}

	if _, err := hub.ConsumeEvents(context.Background(), func(_ context.Context, d natsbus.Delivery) error {
		evs, err := decodeEvents(d)
		if err != nil {
			t.Errorf("events message %s: %v", d.MsgID, err)
			return natsbus.Permanent(err)
		}
		e.mu.Lock()
		if len(evs) > 1 {
			e.batches++
		}
		for _, ev := range evs {
			e.events = append(e.events, ev)
			e.arrived[ev.EventId] = time.Now()
		}
		e.mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// SubscribeHeartbeats flushes with its context, which nats.go wants to
	// have a deadline; the subscription lives as long as that context.
	hbctx, hbcancel := context.WithTimeout(context.Background(), time.Hour)
	t.Cleanup(hbcancel)
	if _, err := hub.SubscribeHeartbeats(hbctx, func(_ string, p []byte) {
		var hb agentv1.Heartbeat
		if proto.Unmarshal(p, &hb) == nil {
			e.mu.Lock()
			e.hbs = append(e.hbs, &hb)
			e.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	// Full snapshots and deltas share the advert subject; they are told
	// apart the way the hub's fleet registry does.
	if _, err := hub.WatchAdverts(context.Background(), func(_ string, p []byte) {
		var ad agentv1.Advertisement
		if proto.Unmarshal(p, &ad) == nil && len(ad.ProtoReflect().GetUnknown()) == 0 {
			e.mu.Lock()
			e.ads = append(e.ads, &ad)
			e.mu.Unlock()
			return
		}
		var d agentv1.AdvertisementDelta
		if proto.Unmarshal(p, &d) == nil {
			e.mu.Lock()
			e.deltas = append(e.deltas, &d)
			e.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(e)
	}
	abus, err := natsbus.Connect(ctx, ns.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	var conn agent.Connector = sim
	if e.wrap != nil {
		conn = e.wrap(sim)
	}
	advertise := 300 * time.Millisecond
	if e.advertiseInterval > 0 {
		advertise = e.advertiseInterval
	}
	a, err := agent.New(agent.Config{
		ClusterID: clusterID, Bus: abus, Connector: conn, Logger: logger(),
		HeartbeatInterval: 50 * time.Millisecond, AdvertiseInterval: advertise,
		ChangeDelay: 10 * time.Millisecond, RegisterTimeout: 300 * time.Millisecond, AnswerTimeout: 2 * time.Second,
		LaunchParallelism: e.launchParallelism, Now: e.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.agent = a
	actx, stop := context.WithCancel(context.Background())
	e.stop = stop
	go func() { e.done <- a.Run(actx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-e.done:
			if err != nil {
				t.Errorf("agent Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("agent did not stop within 10s")
		}
		abus.Close()
	})
	// The agent is up once its first heartbeat arrives.
	if wait {
		e.waitFor("first heartbeat", func() bool { return len(e.hbs) > 0 })
	}
	return e
}

// decodeEvents reads an events message as the hub does: one
// DispatchEvent under its event id, or an EventBatch under a "batch:" id.
func decodeEvents(d natsbus.Delivery) ([]*agentv1.DispatchEvent, error) {
	if strings.HasPrefix(d.MsgID, agentv1.EventBatchMsgIDPrefix) {
		var b agentv1.EventBatch
		if err := proto.Unmarshal(d.Payload, &b); err != nil {
			return nil, err
		}
		if len(b.Events) < 2 {
			return nil, fmt.Errorf("a batch of %d events", len(b.Events))
		}
		return b.Events, nil
	}
	var ev agentv1.DispatchEvent
	if err := proto.Unmarshal(d.Payload, &ev); err != nil {
		return nil, err
	}
	if d.MsgID != ev.EventId {
		return nil, fmt.Errorf("Nats-Msg-Id %q != event_id %q", d.MsgID, ev.EventId)
	}
	return []*agentv1.DispatchEvent{&ev}, nil
}

func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		e.mu.Lock()
		ok := cond()
		e.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.t.Fatalf("timed out waiting for %s; events so far: %s", what, e.eventTypesLocked(""))
}

// eventTypesLocked lists "<dispatch>:<type>" for the events of dispatch id
// (all when id is ""), in arrival order.
func (e *env) eventTypesLocked(id string) []string {
	var out []string
	for _, ev := range e.events {
		if id == "" || ev.DispatchId == id {
			out = append(out, ev.EventId)
		}
	}
	return out
}

func (e *env) eventsOf(id string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.eventTypesLocked(id)
}

func (e *env) hasEvent(id string, t agentv1.DispatchEventType) func() bool {
	want := agent.EventID(id, t)
	return func() bool { return slices.Contains(e.eventTypesLocked(id), want) }
}

func (e *env) event(id string, t agentv1.DispatchEventType) *agentv1.DispatchEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.events {
		if ev.DispatchId == id && ev.Type == t {
			return ev
		}
	}
	return nil
}

func (e *env) publish(msgID string, m *agentv1.HubMessage) {
	e.t.Helper()
	payload, err := proto.Marshal(m)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.hub.PublishDispatch(ctx, clusterID, msgID, payload); err != nil {
		e.t.Fatalf("publish %s: %v", msgID, err)
	}
}

func dispatchMsg(id string, gpus int32, labels map[string]string) *agentv1.HubMessage {
	wl := &meridianv1.Workload{Id: "wl-" + id, Queue: "t/a", Labels: labels, PodSets: []*meridianv1.PodSet{{
		Name: "main", Replicas: 1, Resources: &meridianv1.Resources{GpuMilli: 1000 * gpus, CpuMilli: 1000, MemoryMib: 1024},
	}}}
	return &agentv1.HubMessage{Kind: &agentv1.HubMessage_Dispatch{Dispatch: &agentv1.Dispatch{
		DispatchId: id, WorkloadId: wl.Id, Attempt: 1, Workload: wl, ClusterId: clusterID,
		Placement: []*agentv1.PodSetPlacement{{PodSet: "main", Nodes: []string{"gpu-1"}}},
	}}}
}

func cancelMsg(id string, preempt bool) *agentv1.HubMessage {
	return &agentv1.HubMessage{Kind: &agentv1.HubMessage_Cancel{Cancel: &agentv1.DispatchCancel{
		DispatchId: id, WorkloadId: "wl-" + id, Preempt: preempt, Reason: "test", ClusterId: clusterID,
		GracePeriod: durationpb.New(time.Second),
	}}}
}

// sameLife reports whether got is want, allowing the agent to have sent
// RUNNING in place of an ACCEPTED it had not published yet (simcluster's
// work runs from its launch, so the two often reach the outbox together).
func sameLife(got, want []string) bool {
	if slices.Equal(got, want) {
		return true
	}
	var merged []string
	for i, w := range want {
		if strings.HasSuffix(w, ":accepted") && i+1 < len(want) && strings.HasSuffix(want[i+1], ":running") {
			continue
		}
		merged = append(merged, w)
	}
	return slices.Equal(got, merged)
}

// started is true once id is accepted or running (RUNNING may stand for
// both).
func (e *env) started(id string) func() bool {
	return func() bool { return e.hasEvent(id, accepted)() || e.hasEvent(id, running)() }
}

func ids(id string, ts ...agentv1.DispatchEventType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = agent.EventID(id, t)
	}
	return out
}

const (
	accepted  = agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED
	rejected  = agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_REJECTED
	running   = agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING
	succeeded = agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED
	failed    = agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_FAILED
	preempted = agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_PREEMPTED
	cancelled = agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_CANCELLED
)

func TestDispatchLifecycle(t *testing.T) {
	tests := map[string]struct {
		gpus     int32
		labels   map[string]string
		want     []agentv1.DispatchEventType
		exitCode int32
		reason   string
	}{
		"succeeds": {gpus: 1, labels: map[string]string{simcluster.LabelDuration: "20s"}, want: []agentv1.DispatchEventType{accepted, running, succeeded}},
		"fails with exit code": {gpus: 1, labels: map[string]string{simcluster.LabelDuration: "20s", simcluster.LabelExitCode: "7"},
			want: []agentv1.DispatchEventType{accepted, running, failed}, exitCode: 7, reason: "code 7"},
		"rejected when nothing fits": {gpus: 8, want: []agentv1.DispatchEventType{rejected}, reason: "does not fit"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.publish("d1", dispatchMsg("d1", tc.gpus, tc.labels))
			last := tc.want[len(tc.want)-1]
			if last != rejected {
				e.waitFor("running", e.hasEvent("d1", running))
				e.clock.Advance(20 * time.Second)
			}
			e.waitFor(last.String(), e.hasEvent("d1", last))
			if got, want := e.eventsOf("d1"), ids("d1", tc.want...); !sameLife(got, want) {
				t.Fatalf("events %v, want %v", got, want)
			}
			ev := e.event("d1", last)
			if tc.reason != "" && !strings.Contains(ev.Reason, tc.reason) {
				t.Errorf("reason %q does not mention %q", ev.Reason, tc.reason)
			}
			if last == succeeded || last == failed {
				if ev.ExitCode == nil || *ev.ExitCode != tc.exitCode {
					t.Errorf("exit code %v, want %d", ev.ExitCode, tc.exitCode)
				}
				if ev.GetUsage().GetGpuMilliSeconds() != 20*1000 {
					t.Errorf("usage %d gpu-milli-s, want 20000", ev.GetUsage().GetGpuMilliSeconds())
				}
			}
			// Sequence numbers grow in arrival order, one session.
			e.mu.Lock()
			for i := 1; i < len(e.events); i++ {
				if e.events[i].Seq <= e.events[i-1].Seq || e.events[i].SessionId != e.agent.SessionID() {
					t.Errorf("event %d: seq %d after %d, session %q", i, e.events[i].Seq, e.events[i-1].Seq, e.events[i].SessionId)
				}
			}
			e.mu.Unlock()
			e.waitFor("empty heartbeat", func() bool { return len(e.hbs) > 0 && len(e.hbs[len(e.hbs)-1].Dispatches) == 0 })
		})
	}
}

func TestDuplicateDeliveryLaunchesOnce(t *testing.T) {
	e := newEnv(t, nil)
	m := dispatchMsg("dup", 1, nil)
	// Three copies under different Nats-Msg-Ids get past the stream's
	// dedupe, as a republish after the window would.
	e.publish("dup", m)
	e.publish("dup-again", m)
	e.waitFor("running", e.hasEvent("dup", running))
	e.publish("dup-third", m)
	e.waitFor("backlog drained", func() bool {
		n, err := e.hub.DispatchBacklog(context.Background(), clusterID)
		return err == nil && n == 0
	})
	if got := e.sim.Launches(); got != 1 {
		t.Fatalf("launches = %d, want 1", got)
	}
	if got, want := e.eventsOf("dup"), ids("dup", accepted, running); !sameLife(got, want) {
		t.Fatalf("events %v, want %v (each stored once)", got, want)
	}
	// A redelivery after it finished is answered, not relaunched.
	e.clock.Advance(time.Minute)
	e.waitFor("succeeded", e.hasEvent("dup", succeeded))
	e.publish("dup-late", m)
	e.waitFor("backlog drained", func() bool {
		n, err := e.hub.DispatchBacklog(context.Background(), clusterID)
		return err == nil && n == 0
	})
	if got := e.sim.Launches(); got != 1 {
		t.Fatalf("launches after a late redelivery = %d, want 1", got)
	}
}

func TestCancelAndPreempt(t *testing.T) {
	tests := map[string]struct {
		preempt bool
		want    agentv1.DispatchEventType
	}{
		"cancel":  {false, cancelled},
		"preempt": {true, preempted},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.publish("d1", dispatchMsg("d1", 2, nil))
			e.waitFor("running", e.hasEvent("d1", running))
			e.publish("d1/cancel", cancelMsg("d1", tc.preempt))
			e.waitFor(tc.want.String(), e.hasEvent("d1", tc.want))
			if got, want := e.eventsOf("d1"), ids("d1", accepted, running, tc.want); !sameLife(got, want) {
				t.Fatalf("events %v, want %v", got, want)
			}
			if e.sim.Running() != 0 {
				t.Fatal("work still running after cancel")
			}
			// A cancel for a dispatch never seen is answered, and the
			// dispatch arriving afterwards is not launched.
			e.publish("ghost/cancel", cancelMsg("ghost", tc.preempt))
			e.waitFor("ghost answer", e.hasEvent("ghost", tc.want))
			e.publish("ghost", dispatchMsg("ghost", 1, nil))
			e.waitFor("backlog drained", func() bool {
				n, err := e.hub.DispatchBacklog(context.Background(), clusterID)
				return err == nil && n == 0
			})
			if got := e.sim.Launches(); got != 1 {
				t.Fatalf("launches = %d, want 1 (the cancelled ghost must not run)", got)
			}
		})
	}
}

func TestNATSOutageKeepsWorkRunning(t *testing.T) {
	e := newEnv(t, nil)
	e.publish("long", dispatchMsg("long", 1, map[string]string{simcluster.LabelDuration: "10m"}))
	e.publish("short", dispatchMsg("short", 1, map[string]string{simcluster.LabelDuration: "1m"}))
	e.waitFor("both running", func() bool { return e.hasEvent("long", running)() && e.hasEvent("short", running)() })

	if err := e.ns.Close(); err != nil {
		t.Fatal(err)
	}
	// The hub is unreachable for a long (simulated) while: "short" ends,
	// "long" must keep running; nothing is cancelled.
	time.Sleep(300 * time.Millisecond)
	e.clock.Advance(2 * time.Minute)
	time.Sleep(300 * time.Millisecond)
	if got := e.sim.Running(); got != 1 {
		t.Fatalf("running during the outage = %d, want 1 (long)", got)
	}
	list, err := e.sim.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range list {
		if w.State == agent.StateCancelled || w.State == agent.StatePreempted {
			t.Fatalf("%s was stopped during the outage: %v", w.DispatchID, w.State)
		}
	}
	e.mu.Lock()
	before := len(e.events)
	e.mu.Unlock()

	if err := e.ns.Restart(); err != nil {
		t.Fatal(err)
	}
	e.waitFor("short's success after reconnect", e.hasEvent("short", succeeded))
	e.mu.Lock()
	if len(e.events) <= before {
		t.Errorf("no events after reconnect")
	}
	e.mu.Unlock()
	e.waitFor("heartbeat holding long only", func() bool {
		if len(e.hbs) == 0 {
			return false
		}
		hb := e.hbs[len(e.hbs)-1]
		return len(hb.Dispatches) == 1 && hb.Dispatches[0].DispatchId == "long" && hb.Dispatches[0].State == running
	})
	// The durable dispatch consumer resumes: new work is taken again.
	e.publish("after", dispatchMsg("after", 1, map[string]string{simcluster.LabelDuration: "1m"}))
	e.waitFor("a dispatch after the outage running", e.hasEvent("after", running))
	e.clock.Advance(10 * time.Minute)
	e.waitFor("long's success", e.hasEvent("long", succeeded))
	if got := e.sim.Launches(); got != 3 {
		t.Errorf("launches = %d, want 3", got)
	}
	for _, id := range []string{"long", "short"} {
		if got, want := e.eventsOf(id), ids(id, accepted, running, succeeded); !sameLife(got, want) {
			t.Errorf("%s events %v, want %v", id, got, want)
		}
	}
}

func TestVanishedClusterGoesSilent(t *testing.T) {
	var mu sync.Mutex
	var registers []*agentv1.Register
	e := newEnv(t, func(e *env) {
		sub, err := e.hub.Conn().Subscribe(agent.RegisterSubject(clusterID), func(m *nats.Msg) {
			var reg agentv1.Register
			if proto.Unmarshal(m.Data, &reg) == nil {
				mu.Lock()
				registers = append(registers, &reg)
				mu.Unlock()
			}
			ack, _ := proto.Marshal(&agentv1.RegisterAck{ClusterId: clusterID, Accepted: true, CurrentDispatchIds: []string{"v"}})
			_ = m.Respond(ack)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	})
	e.publish("v", dispatchMsg("v", 1, map[string]string{simcluster.LabelDuration: "1m"}))
	e.waitFor("running", e.hasEvent("v", running))
	e.sim.SetVanished(true)
	time.Sleep(150 * time.Millisecond) // let an in-flight heartbeat land
	e.mu.Lock()
	hbs := len(e.hbs)
	e.mu.Unlock()
	e.clock.Advance(time.Minute)
	time.Sleep(300 * time.Millisecond)
	e.mu.Lock()
	if len(e.hbs) != hbs {
		t.Errorf("%d heartbeats while vanished", len(e.hbs)-hbs)
	}
	if slices.Contains(e.eventTypesLocked("v"), agent.EventID("v", succeeded)) {
		t.Error("event published while vanished")
	}
	e.mu.Unlock()
	e.sim.SetVanished(false)
	e.waitFor("success after returning", e.hasEvent("v", succeeded))
	// The returning cluster registers again, in the same session.
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(registers)
		mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d registers, want a second one after the cluster returned", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if registers[0].SessionId != registers[1].SessionId || registers[0].SessionId != e.agent.SessionID() {
		t.Errorf("session changed between registers: %q, %q", registers[0].SessionId, registers[1].SessionId)
	}
}

func TestAdvertisementFollowsLaunches(t *testing.T) {
	e := newEnv(t, nil)
	freeOn := func(nodes []*agentv1.Node, name string) int64 {
		var f int64
		for _, n := range nodes {
			if n.Name == name {
				for _, g := range n.Gpus {
					f += int64(g.FreeMilli)
				}
			}
		}
		return f
	}
	e.waitFor("full advertisement", func() bool { return len(e.ads) > 0 && freeOn(e.ads[len(e.ads)-1].Nodes, "gpu-1") == 2000 })
	e.publish("big", dispatchMsg("big", 2, map[string]string{simcluster.LabelDuration: "1m"}))
	e.waitFor("delta with gpu-1 full", func() bool {
		return len(e.deltas) > 0 && freeOn(e.deltas[len(e.deltas)-1].UpsertedNodes, "gpu-1") == 0
	})
	e.waitFor("heartbeat holding big", func() bool {
		hb := e.hbs[len(e.hbs)-1]
		return len(hb.Dispatches) == 1 && hb.Dispatches[0].DispatchId == "big"
	})
	e.waitFor("full advertisement with gpu-1 full", func() bool { return freeOn(e.ads[len(e.ads)-1].Nodes, "gpu-1") == 0 })
	e.clock.Advance(time.Minute)
	e.waitFor("delta with gpu-1 free again", func() bool {
		return freeOn(e.deltas[len(e.deltas)-1].UpsertedNodes, "gpu-1") == 2000
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, d := range e.deltas {
		if d.BaseSeq >= d.Seq {
			t.Errorf("delta %d: base_seq %d not below seq %d", i, d.BaseSeq, d.Seq)
		}
		if slices.ContainsFunc(d.UpsertedNodes, func(n *agentv1.Node) bool { return n.Name == "gpu-0" }) {
			t.Errorf("delta %d re-sent the unchanged node gpu-0", i)
		}
	}
}

func TestRegisterAckCancelsStaleWork(t *testing.T) {
	e := newEnv(t, func(e *env) {
		// Work left by a previous agent session.
		for _, id := range []string{"keep", "stale"} {
			d := dispatchMsg(id, 1, nil).GetDispatch()
			d.Placement = nil
			if err := e.sim.Launch(context.Background(), d); err != nil {
				t.Fatal(err)
			}
		}
		sub, err := e.hub.Conn().Subscribe(agent.RegisterSubject(clusterID), func(m *nats.Msg) {
			var reg agentv1.Register
			if err := proto.Unmarshal(m.Data, &reg); err != nil {
				t.Errorf("register: %v", err)
				return
			}
			if !slices.Equal(reg.KnownDispatchIds, []string{"keep", "stale"}) {
				t.Errorf("register known ids %v, want [keep stale]", reg.KnownDispatchIds)
			}
			ack, _ := proto.Marshal(&agentv1.RegisterAck{ClusterId: clusterID, Accepted: true, CurrentDispatchIds: []string{"keep"}, HubId: "hub-test"})
			_ = m.Respond(ack)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	})
	e.waitFor("stale cancelled", e.hasEvent("stale", cancelled))
	e.waitFor("keep reported running", e.hasEvent("keep", running))
	for id, want := range map[string][]string{"keep": ids("keep", accepted, running), "stale": ids("stale", accepted, running, cancelled)} {
		if got := e.eventsOf(id); !sameLife(got, want) {
			t.Errorf("%s events %v, want %v", id, got, want)
		}
	}
	if e.sim.Running() != 1 {
		t.Fatalf("running = %d, want 1 (keep)", e.sim.Running())
	}
	held := e.agent.Held()
	if len(held) != 1 || held[0].DispatchID != "keep" {
		t.Fatalf("held %+v, want keep only", held)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	ns, err := embednats.Start(embednats.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	bus, err := natsbus.Connect(context.Background(), ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	cfg, _ := simcluster.ParseConfig([]byte(clusterYAML))
	sim, _ := simcluster.New(cfg, simcluster.Options{})
	defer sim.Close()
	tests := map[string]struct {
		cfg   agent.Config
		field string
	}{
		"no cluster id":      {agent.Config{Bus: bus, Connector: sim}, "ClusterID"},
		"bad cluster id":     {agent.Config{ClusterID: "a.b", Bus: bus, Connector: sim}, "ClusterID"},
		"no bus":             {agent.Config{ClusterID: "c", Connector: sim}, "Bus"},
		"no connector":       {agent.Config{ClusterID: "c", Bus: bus}, "Connector"},
		"negative heartbeat": {agent.Config{ClusterID: "c", Bus: bus, Connector: sim, HeartbeatInterval: -time.Second}, "HeartbeatInterval"},
		"negative advertise": {agent.Config{ClusterID: "c", Bus: bus, Connector: sim, AdvertiseInterval: -1}, "AdvertiseInterval"},
		"negative answer":    {agent.Config{ClusterID: "c", Bus: bus, Connector: sim, AnswerTimeout: -1}, "AnswerTimeout"},
		"negative parallel":  {agent.Config{ClusterID: "c", Bus: bus, Connector: sim, LaunchParallelism: -1}, "LaunchParallelism"},
		"huge parallel":      {agent.Config{ClusterID: "c", Bus: bus, Connector: sim, LaunchParallelism: agent.MaxLaunchParallelism + 1}, "LaunchParallelism"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := agent.New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err %v, want one naming %s", err, tc.field)
			}
		})
	}
	if _, err := agent.New(agent.Config{ClusterID: "c", Bus: bus, Connector: sim}); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
}

func TestEventID(t *testing.T) {
	tests := map[string]struct {
		t    agentv1.DispatchEventType
		want string
	}{
		"accepted": {accepted, "d-1:accepted"},
		"rejected": {rejected, "d-1:rejected"},
		"failed":   {failed, "d-1:failed"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := agent.EventID("d-1", tc.t); got != tc.want {
				t.Fatalf("EventID = %q, want %q", got, tc.want)
			}
		})
	}
}

// faultyLaunch fails the first n Launch calls with a fault (not a
// rejection), as a backend API outage would.
type faultyLaunch struct {
	agent.Connector
	mu    sync.Mutex
	fails int
	calls int
}

func (f *faultyLaunch) Launch(ctx context.Context, d *agentv1.Dispatch) error {
	f.mu.Lock()
	f.calls++
	fail := f.calls <= f.fails
	f.mu.Unlock()
	if fail {
		return errors.New("backend API unavailable")
	}
	return f.Connector.Launch(ctx, d)
}

func TestLaunchFaultIsRetried(t *testing.T) {
	var fl *faultyLaunch
	e := newEnv(t, func(e *env) {
		e.wrap = func(c agent.Connector) agent.Connector {
			fl = &faultyLaunch{Connector: c, fails: 2}
			return fl
		}
	})
	e.publish("retry", dispatchMsg("retry", 1, nil))
	e.waitFor("running after retries", e.hasEvent("retry", running))
	if got, want := e.eventsOf("retry"), ids("retry", accepted, running); !sameLife(got, want) {
		t.Fatalf("events %v, want %v (no REJECTED for a fault)", got, want)
	}
	fl.mu.Lock()
	calls := fl.calls
	fl.mu.Unlock()
	if calls != 3 || e.sim.Launches() != 1 {
		t.Fatalf("launch calls %d (want 3), real launches %d (want 1)", calls, e.sim.Launches())
	}
}

func TestRefusedAgentStaysSilentUntilAccepted(t *testing.T) {
	var mu sync.Mutex
	registers := 0
	e := newEnvNoWait(t, func(e *env) {
		sub, err := e.hub.Conn().Subscribe(agent.RegisterSubject(clusterID), func(m *nats.Msg) {
			mu.Lock()
			registers++
			accept := registers >= 3
			mu.Unlock()
			ack, _ := proto.Marshal(&agentv1.RegisterAck{ClusterId: clusterID, Accepted: accept, Reason: "protocol too new"})
			_ = m.Respond(ack)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	})
	// Refused twice (about 300 ms apart): no heartbeat may arrive before
	// the third register is accepted.
	e.waitFor("heartbeat after acceptance", func() bool { return len(e.hbs) > 0 })
	mu.Lock()
	defer mu.Unlock()
	if registers < 3 {
		t.Fatalf("heartbeat sent after %d registers, before the hub accepted the agent", registers)
	}
}

// TestBareHubEncoding publishes as hub/dispatch does today: a bare Dispatch
// under its dispatch id and a bare DispatchCancel under "cancel:<id>".
func TestBareHubEncoding(t *testing.T) {
	e := newEnv(t, nil)
	pub := func(msgID string, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.hub.PublishDispatch(context.Background(), clusterID, msgID, b); err != nil {
			t.Fatal(err)
		}
	}
	pub("bare", dispatchMsg("bare", 1, nil).GetDispatch())
	e.waitFor("running", e.hasEvent("bare", running))
	pub("cancel:bare", cancelMsg("bare", false).GetCancel())
	e.waitFor("cancelled", e.hasEvent("bare", cancelled))
	if got, want := e.eventsOf("bare"), ids("bare", accepted, running, cancelled); !sameLife(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// TestAgentRestartAdoptsWork stops the agent while work runs, lets one
// dispatch finish while no agent listens, and starts a new agent process
// (new session) on the same cluster.
func TestAgentRestartAdoptsWork(t *testing.T) {
	e := newEnv(t, nil)
	e.publish("long", dispatchMsg("long", 1, map[string]string{simcluster.LabelDuration: "10m"}))
	e.publish("short", dispatchMsg("short", 1, map[string]string{simcluster.LabelDuration: "1m"}))
	e.waitFor("both running", func() bool { return e.hasEvent("long", running)() && e.hasEvent("short", running)() })
	first := e.agent.SessionID()
	e.stop()
	select {
	case err := <-e.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("first agent did not stop")
	}
	e.done <- nil // the env's cleanup waits for one result
	e.clock.Advance(2 * time.Minute)
	if e.sim.Running() != 1 {
		t.Fatalf("running = %d after the agent stopped, want 1", e.sim.Running())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	bus, err := natsbus.Connect(ctx, e.ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	a2, err := agent.New(agent.Config{ClusterID: clusterID, Bus: bus, Connector: e.sim, Logger: logger(),
		HeartbeatInterval: 50 * time.Millisecond, RegisterTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if a2.SessionID() == first {
		t.Fatal("a new agent reused the session id")
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a2.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("second agent: %v", err)
		}
	}()
	e.waitFor("short's success reported by the new session", e.hasEvent("short", succeeded))
	e.waitFor("a heartbeat of the new session holding long", func() bool {
		hb := e.hbs[len(e.hbs)-1]
		return hb.SessionId == a2.SessionID() && len(hb.Dispatches) == 1 && hb.Dispatches[0].DispatchId == "long"
	})
	if got := e.sim.Launches(); got != 2 {
		t.Fatalf("launches = %d, want 2 (nothing relaunched)", got)
	}
	for _, id := range []string{"long", "short"} {
		want := ids(id, accepted, running)
		if id == "short" {
			want = append(want, agent.EventID(id, succeeded))
		}
		if got := e.eventsOf(id); !sameLife(got, want) {
			t.Errorf("%s events %v, want %v (each stored once across sessions)", id, got, want)
		}
	}
}

// An agent whose first register finds no hub (started before it, or
// outliving a hub restart while NATS stayed up) registers once a hub
// listens, without a reconnect to prompt it.
func TestRegisterRetriedUntilAHubAnswers(t *testing.T) {
	e := newEnv(t, nil)
	time.Sleep(300 * time.Millisecond) // the first register has found nobody
	got := make(chan *agentv1.Register, 16)
	sub, err := e.hub.Conn().Subscribe(agent.RegisterSubject(clusterID), func(m *nats.Msg) {
		var reg agentv1.Register
		if err := proto.Unmarshal(m.Data, &reg); err != nil {
			t.Errorf("register: %v", err)
			return
		}
		ack, _ := proto.Marshal(&agentv1.RegisterAck{ClusterId: clusterID, Accepted: true, HubId: "hub-late"})
		_ = m.Respond(ack)
		got <- &reg
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	select {
	case reg := <-got:
		if reg.GetClusterId() != clusterID {
			t.Fatalf("register from %q", reg.GetClusterId())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no register reached a hub that started after the agent")
	}
	// Answered: the agent stops asking.
	time.Sleep(2 * time.Second)
	if n := len(got); n > 0 {
		t.Fatalf("%d more registers after one was answered", n)
	}
}

// TestFullAdvertisementOnRequest: a hub that has no base for the agent's
// deltas asks for a full advertisement and gets one at once, not at the
// next periodic one (an hour away here); hubs asking together get one.
func TestFullAdvertisementOnRequest(t *testing.T) {
	e := newEnv(t, func(e *env) { e.advertiseInterval = time.Hour })
	fulls := func() int { e.mu.Lock(); defer e.mu.Unlock(); return len(e.ads) }
	deadline := time.Now().Add(5 * time.Second)
	for fulls() == 0 { // the one at start
		if time.Now().After(deadline) {
			t.Fatal("no full advertisement at start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	before := fulls()
	for range 3 { // three hubs ask at once
		if err := e.hub.RequestAdvert(clusterID); err != nil {
			t.Fatal(err)
		}
	}
	deadline = time.Now().Add(5 * time.Second)
	for fulls() == before {
		if time.Now().After(deadline) {
			t.Fatal("no full advertisement after a hub asked")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if got := fulls() - before; got != 1 {
		t.Fatalf("%d full advertisements for three requests at once, want 1", got)
	}
}
