package agent_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// TestDispatchFromBeforeASilenceIsRefused: an agent silent for longer than
// the hub's cluster timeout (a paused process) refuses a dispatch created
// before its silence ended, instead of launching it next to the copy the
// hub gave another cluster when it declared this one LOST; a dispatch
// created after is launched. Found by the chaos soak: an agent paused past
// the timeout launched its backlog of requeued dispatches on resuming, so
// 47 workloads ran on two clusters at once until the hub's cancels came.
func TestDispatchFromBeforeASilenceIsRefused(t *testing.T) {
	var skew atomic.Int64 // the agent's clock jumps ahead, as after a pause
	e := newEnv(t, func(e *env) {
		e.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		sub, err := e.hub.Conn().Subscribe(agent.RegisterSubject(clusterID), func(m *nats.Msg) {
			ack, _ := proto.Marshal(&agentv1.RegisterAck{ClusterId: clusterID, Accepted: true, HubId: "hub-test",
				LostTimeout: durationpb.New(500 * time.Millisecond)})
			_ = m.Respond(ack)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	})
	dispatch := func(id string, created time.Time) {
		m := dispatchMsg(id, 1, nil)
		m.GetDispatch().CreatedAt = timestamppb.New(created)
		e.publish(id, m)
	}
	// Before any silence: launched.
	dispatch("before", time.Now())
	e.waitFor("before accepted", e.started("before"))
	// Silent for 3 s: the next heartbeat sees the gap.
	created := time.Now().Add(time.Second)
	skew.Store(int64(3 * time.Second))
	time.Sleep(200 * time.Millisecond) // a few heartbeats
	dispatch("during", created)
	e.waitFor("during rejected", e.hasEvent("during", rejected))
	if ev := e.event("during", rejected); !strings.Contains(ev.GetReason(), "stale dispatch") {
		t.Fatalf("reason %q, want a stale dispatch", ev.GetReason())
	}
	// Created just after the silence ended by the agent's clock: the hub
	// stamps with its own, which may run ahead, so it is refused too.
	dispatch("within-skew", time.Now().Add(time.Duration(skew.Load())))
	e.waitFor("within-skew rejected", e.hasEvent("within-skew", rejected))
	dispatch("after", time.Now().Add(time.Duration(skew.Load())+agent.DefaultClockSkew+500*time.Millisecond))
	e.waitFor("after accepted", e.started("after"))
	if n := e.sim.Launches(); n != 2 {
		t.Fatalf("launches %d, want 2 (before, after)", n)
	}
}

// TestDispatchFromBeforeAPartitionIsRefused: the same for an agent that
// kept running but could not reach NATS for longer than the cluster
// timeout: its heartbeats of that time failed to publish (the bus fails
// fast while disconnected), so they do not end the silence.
func TestDispatchFromBeforeAPartitionIsRefused(t *testing.T) {
	e := newEnv(t, func(e *env) {
		sub, err := e.hub.Conn().Subscribe(agent.RegisterSubject(clusterID), func(m *nats.Msg) {
			ack, _ := proto.Marshal(&agentv1.RegisterAck{ClusterId: clusterID, Accepted: true, HubId: "hub-test",
				LostTimeout: durationpb.New(500 * time.Millisecond)})
			_ = m.Respond(ack)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	})
	publish := func(id string, created time.Time) {
		t.Helper()
		m := dispatchMsg(id, 1, nil)
		m.GetDispatch().CreatedAt = timestamppb.New(created)
		payload, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := e.hub.PublishDispatch(ctx, clusterID, id, payload)
			cancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("publish %s: %v", id, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	publish("before", time.Now())
	e.waitFor("before accepted", e.started("before"))
	if err := e.ns.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past the 500 ms cluster timeout
	created := time.Now()               // the hub made it while the agent was away
	if err := e.ns.Restart(); err != nil {
		t.Fatal(err)
	}
	publish("during", created)
	e.waitFor("during rejected", e.hasEvent("during", rejected))
	publish("after", time.Now().Add(agent.DefaultClockSkew+500*time.Millisecond))
	e.waitFor("after accepted", e.started("after"))
	if n := e.sim.Launches(); n != 2 {
		t.Fatalf("launches %d, want 2 (before, after)", n)
	}
}

// TestSilenceWhileDispatchesWaitToLaunch: the agent is paused (its clock
// jumps past the hub's cluster timeout) while one dispatch is inside the
// connector's Launch and another waits for the only launch slot. On
// waking, the first is cancelled as soon as its launch returns and the
// second is refused without a launch: both were created before the
// silence ended, and the hub may have given them to another cluster.
// Found by the chaos soak: an agent stopped with a batch of dispatches
// waiting for slots launched them on waking (67 workloads ran twice).
func TestSilenceWhileDispatchesWaitToLaunch(t *testing.T) {
	var skew atomic.Int64
	g := &gatedLaunch{gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	e := newEnv(t, func(e *env) {
		e.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		e.launchParallelism = 1
		e.wrap = func(c agent.Connector) agent.Connector { g.Connector = c; return g }
		sub, err := e.hub.Conn().Subscribe(agent.RegisterSubject(clusterID), func(m *nats.Msg) {
			ack, _ := proto.Marshal(&agentv1.RegisterAck{ClusterId: clusterID, Accepted: true, HubId: "hub-test",
				LostTimeout: durationpb.New(500 * time.Millisecond)})
			_ = m.Respond(ack)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	})
	created := time.Now()
	for _, id := range []string{"in-launch", "waiting"} {
		m := dispatchMsg(id, 1, nil)
		m.GetDispatch().CreatedAt = timestamppb.New(created)
		e.publish(id, m)
	}
	<-g.arrived // one is inside Launch, the other waits for the slot
	time.Sleep(100 * time.Millisecond)
	skew.Store(int64(3 * time.Second)) // the pause
	time.Sleep(200 * time.Millisecond) // heartbeats see the gap
	close(g.gate)
	e.waitFor("in-launch refused", e.hasEvent("in-launch", rejected))
	e.waitFor("waiting refused", e.hasEvent("waiting", rejected))
	for _, id := range []string{"in-launch", "waiting"} {
		if ev := e.event(id, rejected); !strings.Contains(ev.GetReason(), "stale dispatch") {
			t.Fatalf("%s: reason %q, want a stale dispatch", id, ev.GetReason())
		}
		if e.started(id)() {
			t.Fatalf("%s: reported launched", id)
		}
	}
	_, calls := g.snapshot()
	launched := map[string]bool{}
	for _, c := range calls {
		if id, ok := strings.CutPrefix(c, "launch-start:"); ok {
			launched[id] = true
		}
	}
	if launched["waiting"] || !launched["in-launch"] || !slices.Contains(calls, "cancel:in-launch") {
		t.Fatalf("connector calls %v: want in-launch launched and cancelled, waiting never launched", calls)
	}
}
