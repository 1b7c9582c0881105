package dispatch

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/protofast"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// requestCancel does what the API does: store a cancel request, whose
// condition's message says who asked and why, create-only.
func (e *env) requestCancel(id, msg string) {
	e.t.Helper()
	b, _ := protofast.MarshalDeterministic(&meridianv1.Condition{Type: ConditionCancelRequested,
		Status: meridianv1.ConditionStatus_CONDITION_STATUS_TRUE, Reason: "UserRequested", Message: msg, LastTransitionTime: timestamppb.Now()})
	k, _ := store.Key(store.KindCancelRequests, id)
	if _, err := e.st.Commit(e.ctx, nil, store.PutIfModRev(k, b, 0)); err != nil {
		e.t.Fatal(err)
	}
}

// requestCancelInWorkload does what the API of earlier releases did:
// append the condition to the workload itself, with a compare-and-swap.
// A loop must still act on such a workload (one written during a rolling
// upgrade, or before it).
func (e *env) requestCancelInWorkload(id, msg string) {
	e.t.Helper()
	w, rev := e.workload(id)
	w.Status.Conditions = append(w.Status.Conditions, &meridianv1.Condition{Type: ConditionCancelRequested,
		Status: meridianv1.ConditionStatus_CONDITION_STATUS_TRUE, Reason: "UserRequested", Message: msg, LastTransitionTime: timestamppb.Now()})
	b, _ := encodeWorkload(w)
	k, _ := WorkloadKey(id)
	if _, err := e.st.Commit(e.ctx, nil, store.PutIfModRev(k, b, rev)); err != nil {
		e.t.Fatal(err)
	}
}

// cancelRequestsLeft counts the stored cancel requests.
func (e *env) cancelRequestsLeft() int {
	e.t.Helper()
	items, _, err := e.st.List(e.ctx, store.Prefix(store.KindCancelRequests), 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(items)
}

func TestCancelRequests(t *testing.T) {
	for _, how := range []string{"request", "condition"} {
		t.Run(how, func(t *testing.T) { testCancelRequests(t, how) })
	}
}

func testCancelRequests(t *testing.T, how string) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 8)
	ag := e.startAgent("east", 1, 8, 0)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.submit(gpuWorkload("run", "acme/ml/train", 1), gpuWorkload("stuck", "acme/ml/none", 1))
	did := e.waitRunningOn("run", "east", 10*time.Second)

	request := e.requestCancel
	if how == "condition" {
		request = e.requestCancelInWorkload
	}
	request("run", "cancelled by user: wrong dataset")
	request("stuck", "cancelled by user: not needed") // QUEUED: the loop finishes it
	e.waitFor("both cancelled", 10*time.Second, func() bool {
		p1, _, _ := e.phaseOn("run")
		p2, _, _ := e.phaseOn("stuck")
		return p1 == meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED && p2 == meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED
	})
	if ag.cancelCount(did) != 1 {
		t.Fatalf("agent got %d cancels for %s, want 1", ag.cancelCount(did), did)
	}
	if len(ag.runningIDs()) != 0 {
		t.Fatalf("agent still runs %v", ag.runningIDs())
	}
	if n := e.dispatchRecords(); n != 0 {
		t.Fatalf("%d dispatch records left", n)
	}
	if w, _ := e.workload("run"); w.GetStatus().GetEndTime() == nil {
		t.Fatal("cancelled workload has no end time")
	}
	// Each request went with the write that acted on it.
	e.waitFor("cancel requests deleted", 5*time.Second, func() bool { return e.cancelRequestsLeft() == 0 })
	for _, id := range []string{"run", "stuck"} {
		if w, _ := e.workload(id); !hasCondition(w, ConditionCancelRequested) {
			t.Errorf("%s: the cancelled workload does not say a cancel was requested: %v", id, w.GetStatus())
		}
	}
	// The final message carries the user's reason, not the agent's
	// "cancelled by the hub" (or the hub's "cancelled by request").
	for id, want := range map[string]string{"run": "cancelled by user: wrong dataset", "stuck": "cancelled by user: not needed"} {
		w, _ := e.workload(id)
		if got := w.GetStatus().GetMessage(); got != want {
			t.Errorf("%s: message %q, want %q", id, got, want)
		}
		if w.GetStatus().GetPendingReason() != "" || w.GetStatus().GetPendingReasonCode() != "" {
			t.Errorf("%s: cancelled workload keeps a pending reason %q (%q)", id, w.GetStatus().GetPendingReason(), w.GetStatus().GetPendingReasonCode())
		}
	}
}

// A cancel requested while no hub leads waits in its key and takes effect
// once one does; a request for a workload that has finished meanwhile is
// dropped without touching the workload.
func TestCancelRequestOutlivesTheLeader(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 8)
	e.submit(gpuWorkload("later", "acme/ml/none", 1), gpuWorkload("done", "acme/ml/none", 1))
	e.requestCancel("later", "cancelled by user: while no hub led")
	// "done" finished before its request was acted on (it cannot run: no
	// quota; so the test ends it the way the loop would).
	w, rev := e.workload("done")
	w.Status.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED
	b, _ := encodeWorkload(w)
	k, _ := WorkloadKey("done")
	doneRev, err := e.st.Commit(e.ctx, nil, store.PutIfModRev(k, b, rev))
	if err != nil {
		t.Fatal(err)
	}
	e.requestCancel("done", "cancelled by user: too late")
	if p, _, _ := e.phaseOn("later"); p != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
		t.Fatalf("later is %v with no hub running", p)
	}
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.waitFor("later cancelled", 10*time.Second, func() bool {
		p, _, _ := e.phaseOn("later")
		return p == meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED
	})
	e.waitFor("cancel requests deleted", 5*time.Second, func() bool { return e.cancelRequestsLeft() == 0 })
	if w, _ := e.workload("later"); w.GetStatus().GetMessage() != "cancelled by user: while no hub led" {
		t.Fatalf("message %q", w.GetStatus().GetMessage())
	}
	if _, rev := e.workload("done"); rev != doneRev {
		t.Fatalf("the finished workload was written again (revision %d, was %d)", rev, doneRev)
	}
}

func TestPreemptionRequeuesVictims(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 16) // capacity binds, not quota
	ag := e.startAgent("east", 1, 8, 0)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	var low []string
	for i := 0; i < 8; i++ {
		w := gpuWorkload(fmt.Sprintf("low%d", i), "acme/ml/train", 1)
		w.Preemptible = true
		e.submit(w)
		low = append(low, w.Id)
	}
	for _, id := range low {
		e.waitRunningOn(id, "east", 10*time.Second)
	}
	high := gpuWorkload("high", "acme/ml/train", 4)
	high.Priority = 100
	e.submit(high)
	e.waitRunningOn("high", "east", 15*time.Second)

	requeued := 0
	for _, id := range low {
		w, _ := e.workload(id)
		st := w.GetStatus()
		switch st.GetPhase() {
		case meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED:
			requeued++
			if st.GetAttempts() != 1 || st.GetPendingReason() == "" || st.GetDispatchId() != "" {
				t.Fatalf("victim %s = %v", id, st)
			}
		case meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING:
		default:
			t.Fatalf("%s phase = %v", id, st.GetPhase())
		}
	}
	if requeued < 4 {
		t.Fatalf("%d victims requeued; the 4-GPU workload needed 4", requeued)
	}
	if got := len(ag.runningIDs()); got != 8-requeued+1 {
		t.Fatalf("agent runs %d dispatches, want %d", got, 8-requeued+1)
	}
}
