package dispatch

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// requestCancel does what the API does for dispatched work: append the
// CancelRequested condition, whose message says who asked and why, with a
// compare-and-swap.
func (e *env) requestCancel(id, msg string) {
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

func TestCancelRequests(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 8)
	ag := e.startAgent("east", 1, 8, 0)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.submit(gpuWorkload("run", "acme/ml/train", 1), gpuWorkload("stuck", "acme/ml/none", 1))
	did := e.waitRunningOn("run", "east", 10*time.Second)

	e.requestCancel("run", "cancelled by user: wrong dataset")
	e.requestCancel("stuck", "cancelled by user: not needed") // QUEUED with the condition: the loop finishes it
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
