package agent

import (
	"slices"
	"testing"
	"time"

	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
)

const (
	evAccepted  = agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED
	evRunning   = agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING
	evCancelled = agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_CANCELLED
)

func outboxAgent() *Agent {
	a := &Agent{held: map[string]*entry{}, m: NewMetrics(nil), outWake: make(chan struct{}, 1), session: "s1"}
	a.cfg.Now = time.Now
	return a
}

func outboxIDs(a *Agent) []string {
	var out []string
	for _, it := range a.out {
		out = append(out, it.ev.GetEventId())
	}
	return out
}

// RUNNING takes the place of its dispatch's unpublished ACCEPTED, keeps its
// position (and sequence number) among other dispatches' events, and is
// stored for whoever waits on the ACCEPTED.
func TestRunningReplacesUnsentAccepted(t *testing.T) {
	a := outboxAgent()
	acc := a.enqueueLocked(a.newEvent("x", "wx", evAccepted))
	a.enqueueLocked(a.newEvent("y", "wy", evAccepted))
	seq := acc.ev.GetSeq()
	run := a.enqueueLocked(a.newEvent("x", "wx", evRunning))
	if run != acc {
		t.Fatal("RUNNING got its own outbox item; want the ACCEPTED's")
	}
	if got, want := outboxIDs(a), []string{"x:running", "y:accepted"}; !slices.Equal(got, want) {
		t.Fatalf("outbox %v, want %v", got, want)
	}
	if acc.ev.GetSeq() != seq || acc.ev.GetSessionId() != "s1" {
		t.Fatalf("merged event seq %d session %q, want seq %d session s1", acc.ev.GetSeq(), acc.ev.GetSessionId(), seq)
	}
}

// An ACCEPTED that is being published now is never changed: the RUNNING
// goes out after it.
func TestRunningAfterAcceptedInFlight(t *testing.T) {
	a := outboxAgent()
	acc := a.enqueueLocked(a.newEvent("x", "wx", evAccepted))
	a.sending = 1
	run := a.enqueueLocked(a.newEvent("x", "wx", evRunning))
	if run == acc || acc.ev.GetType() != evAccepted {
		t.Fatal("the in-flight ACCEPTED was changed")
	}
	if got, want := outboxIDs(a), []string{"x:accepted", "x:running"}; !slices.Equal(got, want) {
		t.Fatalf("outbox %v, want %v", got, want)
	}
	if run.ev.GetSeq() <= acc.ev.GetSeq() {
		t.Fatalf("RUNNING seq %d not after ACCEPTED's %d", run.ev.GetSeq(), acc.ev.GetSeq())
	}
}

// When a later event of the dispatch is already queued, RUNNING does not
// jump back over it.
func TestRunningKeepsOrderBehindLaterEvents(t *testing.T) {
	a := outboxAgent()
	a.enqueueLocked(a.newEvent("x", "wx", evAccepted))
	a.enqueueLocked(a.newEvent("x", "wx", evCancelled))
	a.enqueueLocked(a.newEvent("x", "wx", evRunning))
	if got, want := outboxIDs(a), []string{"x:accepted", "x:cancelled", "x:running"}; !slices.Equal(got, want) {
		t.Fatalf("outbox %v, want %v", got, want)
	}
}
