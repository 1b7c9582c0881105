package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

func batchOf(ms ...*agentv1.HubMessage) *agentv1.HubMessage {
	b := &agentv1.DispatchBatch{}
	for _, m := range ms {
		b.Dispatches = append(b.Dispatches, m.GetDispatch())
	}
	return &agentv1.HubMessage{Kind: &agentv1.HubMessage_Batch{Batch: b}}
}

// TestDispatchBatch: every dispatch of a batch is launched once and
// answered; a batch delivered again (under another message id, as after
// a lost acknowledgement) launches nothing again; a batch that holds a
// dispatch already launched alone launches only the new ones; and one
// dispatch that can never be handled does not hold back the others.
func TestDispatchBatch(t *testing.T) {
	e := newEnv(t, nil)
	drained := func() bool {
		n, err := e.hub.DispatchBacklog(context.Background(), clusterID)
		return err == nil && n == 0
	}
	e.publish("b1", batchOf(dispatchMsg("b1-a", 0, nil), dispatchMsg("b1-b", 0, nil), dispatchMsg("b1-c", 0, nil)))
	for _, id := range []string{"b1-a", "b1-b", "b1-c"} {
		e.waitFor(id+" running", e.hasEvent(id, running))
	}
	e.publish("b1-again", batchOf(dispatchMsg("b1-a", 0, nil), dispatchMsg("b1-b", 0, nil), dispatchMsg("b1-c", 0, nil)))
	e.publish("single", dispatchMsg("single", 0, nil))
	e.waitFor("single running", e.hasEvent("single", running))
	e.publish("b2", batchOf(dispatchMsg("single", 0, nil), dispatchMsg("b2-a", 0, nil)))
	e.waitFor("b2-a running", e.hasEvent("b2-a", running))
	e.waitFor("backlog drained", drained)
	if got := e.sim.Launches(); got != 5 {
		t.Fatalf("launches = %d, want 5 (b1-a, b1-b, b1-c, single, b2-a, each once)", got)
	}
	for _, id := range []string{"b1-a", "b1-b", "b1-c", "single", "b2-a"} {
		if got, want := e.eventsOf(id), ids(id, accepted, running); !sameLife(got, want) {
			t.Fatalf("%s: events %v, want %v (each stored once)", id, got, want)
		}
	}

	bad := batchOf(dispatchMsg("b3-a", 0, nil), dispatchMsg("b3-b", 0, nil))
	bad.GetBatch().Dispatches[0].DispatchId = "" // can never be handled
	e.publish("b3", bad)
	e.waitFor("b3-b running despite its broken neighbour", e.hasEvent("b3-b", running))
	e.waitFor("backlog drained", drained)
	if got := e.sim.Launches(); got != 6 {
		t.Fatalf("launches = %d, want 6", got)
	}
}

// TestEventBatchesOnlyToAHubThatReadsThem: to a hub whose RegisterAck
// lists event-batch, events go several to a message, each stored once; to
// one that does not, one message each (the other tests: their hub side
// never answers Register).
func TestEventBatchesOnlyToAHubThatReadsThem(t *testing.T) {
	e := newEnv(t, func(e *env) {
		sub, err := e.hub.Conn().Subscribe(agent.RegisterSubject(clusterID), func(m *nats.Msg) {
			ack, _ := proto.Marshal(&agentv1.RegisterAck{ClusterId: clusterID, Accepted: true, Capabilities: []string{agentv1.CapabilityEventBatch}})
			_ = m.Respond(ack)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	})
	var ms []*agentv1.HubMessage
	var names []string
	for i := range 20 {
		id := fmt.Sprintf("ev-%02d", i)
		ms, names = append(ms, dispatchMsg(id, 0, nil)), append(names, id)
	}
	e.publish("ev-batch", batchOf(ms...))
	for _, id := range names {
		e.waitFor(id+" running", e.hasEvent(id, running))
	}
	e.mu.Lock()
	batches := e.batches
	e.mu.Unlock()
	if batches == 0 {
		t.Fatalf("20 dispatches launched together, and not one EventBatch reached a hub that reads them")
	}
	for _, id := range names {
		if got, want := e.eventsOf(id), ids(id, accepted, running); !sameLife(got, want) {
			t.Fatalf("%s: events %v, want %v (each stored once)", id, got, want)
		}
	}
	t.Logf("%d EventBatch messages", batches)
}

// TestNoEventBatchesWithoutTheCapability: a hub that does not list
// event-batch gets one message per event.
func TestNoEventBatchesWithoutTheCapability(t *testing.T) {
	e := newEnv(t, func(e *env) {
		sub, err := e.hub.Conn().Subscribe(agent.RegisterSubject(clusterID), func(m *nats.Msg) {
			ack, _ := proto.Marshal(&agentv1.RegisterAck{ClusterId: clusterID, Accepted: true})
			_ = m.Respond(ack)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	})
	var ms []*agentv1.HubMessage
	for i := range 20 {
		ms = append(ms, dispatchMsg(fmt.Sprintf("one-%02d", i), 0, nil))
	}
	e.publish("one-batch", batchOf(ms...))
	for i := range 20 {
		e.waitFor("running", e.hasEvent(fmt.Sprintf("one-%02d", i), running))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.batches != 0 {
		t.Fatalf("%d EventBatch messages sent to a hub that does not read them", e.batches)
	}
}

// gateOne holds the launch of one dispatch id until its gate opens.
type gateOne struct {
	agent.Connector
	id      string
	gate    chan struct{}
	arrived chan struct{}
}

func (g *gateOne) Launch(ctx context.Context, d *agentv1.Dispatch) error {
	if d.GetDispatchId() == g.id {
		g.arrived <- struct{}{}
		<-g.gate
	}
	return g.Connector.Launch(ctx, d)
}

// TestBusyDispatchHoldsNoLaunchWorker: batches that name a dispatch whose
// launch another message is still making do not tie up the agent's launch
// workers waiting for it: the batches' other dispatches launch meanwhile,
// and the busy one is launched once and answered in every message.
func TestBusyDispatchHoldsNoLaunchWorker(t *testing.T) {
	g := &gateOne{id: "busy", gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	e := newEnv(t, func(e *env) {
		e.launchParallelism = 2 // two launch workers, both needed below
		e.wrap = func(c agent.Connector) agent.Connector { g.Connector = c; return g }
	})
	e.publish("busy", dispatchMsg("busy", 0, nil))
	select {
	case <-g.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the busy launch never started")
	}
	e.publish("b1", batchOf(dispatchMsg("busy", 0, nil), dispatchMsg("b1-a", 0, nil)))
	e.publish("b2", batchOf(dispatchMsg("busy", 0, nil), dispatchMsg("b2-a", 0, nil)))
	for _, id := range []string{"b1-a", "b2-a"} {
		e.waitFor(id+" running while busy still launches", e.hasEvent(id, running))
	}
	close(g.gate)
	e.waitFor("busy running", e.hasEvent("busy", running))
	e.waitFor("backlog drained", func() bool {
		n, err := e.hub.DispatchBacklog(context.Background(), clusterID)
		return err == nil && n == 0
	})
	if got := e.sim.Launches(); got != 3 {
		t.Fatalf("launches = %d, want 3 (busy, b1-a, b2-a, each once)", got)
	}
}
