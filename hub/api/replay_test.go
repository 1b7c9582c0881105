package api

import (
	"context"
	"testing"

	"github.com/meridian-gpu/meridian/hub/auth"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// A client that retries a submit with the same key and the same body gets
// the stored workload back, also when authentication is on: the stored
// record carries submitted_by (and a trace parent), which the client never
// sent. Found by the chaos soak: a submit that timed out on a paused hub
// and was retried on another got AlreadyExists "a different body".
func TestReplayWithAuthenticatedCaller(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	tn := tenant(t)
	e.mkQueues(t, tn)
	ctx = context.WithValue(ctx, callerKey{}, &Caller{Principal: &auth.Principal{User: "alice", Method: auth.MethodToken}})
	w := validWorkload(tn)
	w.IdempotencyKey = "retry-1"
	first, err := e.svc.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w})
	if err != nil {
		t.Fatal(err)
	}
	if first.GetWorkload().GetSubmittedBy() != "alice" {
		t.Fatalf("submitted_by = %q, want alice", first.GetWorkload().GetSubmittedBy())
	}
	again, err := e.svc.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w})
	if err != nil {
		t.Fatalf("retry with the same body: %v", err)
	}
	if !again.GetReplayed() || again.GetWorkload().GetId() != first.GetWorkload().GetId() {
		t.Fatalf("retry = %s replayed %v, want a replay of %s", again.GetWorkload().GetId(), again.GetReplayed(), first.GetWorkload().GetId())
	}
	// A different body under the same key is still refused.
	w.Priority++
	if _, err := e.svc.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w}); err == nil {
		t.Fatal("a different body under the same key was accepted")
	}
}
