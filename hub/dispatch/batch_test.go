package dispatch

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// runOnTwoClusters starts agents c1 and c2 (four nodes of 64 GPUs each) and
// hub-a, submits n one-GPU workloads to team/a and waits until every one
// runs.
func (e *env) runOnTwoClusters(n int) (*hub, []*agent) {
	e.putQueue("team/a", 400)
	agents := []*agent{e.startAgent("c1", 4, 64, 0), e.startAgent("c2", 4, 64, 0)}
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.waitKnown(h, "c1", "c2")
	var ws []*meridianv1.Workload
	for i := range n {
		ws = append(ws, gpuWorkload(fmt.Sprintf("w%03d", i), "team/a", 1))
	}
	e.submit(ws...)
	e.waitFor("every workload running", 30*time.Second, func() bool {
		return e.countPhase(meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING) == n
	})
	return h, agents
}

// TestDispatchBatches: a cycle's dispatches for a cluster whose agent
// reads batches go in one message; an agent that does not (an older one)
// gets one message per dispatch, never a batch. Either way every workload
// is launched exactly once, and the stream holds fewer messages than
// dispatches only where batches went.
func TestDispatchBatches(t *testing.T) {
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			e := newEnv(t, fastConfig())
			e.batching = batching
			const n = 300
			h, agents := e.runOnTwoClusters(n)
			launched, received := 0, 0
			for _, a := range agents {
				launched += len(a.checkLaunchedOnce(t))
				a.mu.Lock()
				received += a.batches
				a.mu.Unlock()
			}
			if launched != n {
				t.Fatalf("%d workloads launched, want %d", launched, n)
			}
			info, err := e.stream(natsbus.StreamDispatch)
			if err != nil {
				t.Fatal(err)
			}
			sent := metricValue(t, h.loop.m.batches)
			if batching {
				if received == 0 || sent == 0 || info.State.Msgs >= n {
					t.Fatalf("with batching: %v batches sent, %d received, %d messages stored for %d dispatches", sent, received, info.State.Msgs, n)
				}
			} else if received != 0 || sent != 0 || info.State.Msgs < n {
				// (More than n when a republish outlived the stream's
				// dedupe window on a slow machine.)
				t.Fatalf("without batching: %v batches sent, %d received, %d messages stored for %d dispatches", sent, received, info.State.Msgs, n)
			}
			// The agent answers a batch with one EventBatch (ACCEPTED and
			// RUNNING of each), which the hub read: every workload runs.
			evInfo, err := e.stream(natsbus.StreamEvents)
			if err != nil {
				t.Fatal(err)
			}
			if batching && evInfo.State.Msgs >= 2*n {
				t.Fatalf("with batching: %d event messages for %d events", evInfo.State.Msgs, 2*n)
			}
			t.Logf("%d dispatches in %d messages, %d events in %d", n, info.State.Msgs, 2*n, evInfo.State.Msgs)
		})
	}
}

// stream reads a JetStream stream's info through a connection of the
// test's own.
func (e *env) stream(name string) (*jetstream.StreamInfo, error) {
	bus, err := natsbus.Connect(e.ctx, e.url, natsbus.WithName("test-stream-info"))
	if err != nil {
		return nil, err
	}
	defer bus.Close()
	s, err := bus.JetStream().Stream(e.ctx, name)
	if err != nil {
		return nil, err
	}
	return s.Info(e.ctx)
}

// TestEventBatchWithABadEvent: an event of a batch that cannot be used is
// dropped alone; the others are applied.
func TestEventBatchWithABadEvent(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("team/a", 8)
	a := e.startAgent("c1", 1, 8, 0)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.waitKnown(h, "c1")
	e.submit(gpuWorkload("w1", "team/a", 1), gpuWorkload("w2", "team/a", 1))
	d1 := e.waitRunningOn("w1", "c1", 10*time.Second)
	d2 := e.waitRunningOn("w2", "c1", 10*time.Second)
	succeeded := agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED
	bad := a.newEvent("", "w9", succeeded, "")
	bad.EventId = "bad"
	if err := a.eventBatch([]*agentv1.DispatchEvent{a.newEvent(d1, "w1", succeeded, ""), bad, a.newEvent(d2, "w2", succeeded, "")}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("both succeeded", 10*time.Second, func() bool {
		w1, _ := e.workload("w1")
		w2, _ := e.workload("w2")
		return w1.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED &&
			w2.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
	})
}
