package agent_test

import (
	"context"
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
