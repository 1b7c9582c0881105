package agent_test

import (
	"context"
	"testing"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
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
