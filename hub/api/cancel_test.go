package api

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/protofast"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// With no leader to act on it, a cancel stores its request, waits its
// bound, and answers with the workload as stored plus the request's
// condition. The API never writes the workload itself: only the loop
// does after creation (docs/design/single-writer-workloads.md).
func TestCancelWithoutALeader(t *testing.T) {
	e := newEnv(t, withoutLoop)
	ctx := testCtx(t)
	tn := tenant(t)
	e.mkQueues(t, tn)
	r, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(tn)})
	if err != nil {
		t.Fatal(err)
	}
	id := r.GetWorkload().GetId()
	_, before, err := e.svc.getWorkload(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := e.wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: id, Reason: "wrong data set"})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 150*time.Millisecond || took > 5*time.Second {
		t.Fatalf("cancel answered after %v; want the 150ms bound", took)
	}
	st := got.GetStatus()
	if st.GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED || !hasCondition(st, ConditionCancelRequested) {
		t.Fatalf("answer without a leader: %v", st)
	}
	w, after, err := e.svc.getWorkload(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if after != before || hasCondition(w.GetStatus(), ConditionCancelRequested) {
		t.Fatalf("the API wrote the workload (revision %d, was %d): %v", after, before, w.GetStatus())
	}
	rkey, _ := CancelRequestKey(id)
	b, reqRev, err := e.st.Get(ctx, rkey)
	if err != nil {
		t.Fatalf("no cancel request stored: %v", err)
	}
	cond := &meridianv1.Condition{}
	if err := protofast.Unmarshal(b, cond); err != nil || cond.GetMessage() != "cancelled by user: wrong data set" || cond.GetType() != ConditionCancelRequested {
		t.Fatalf("stored request %v (%v)", cond, err)
	}
	// Asking again is the same request: the first reason stays.
	again, err := e.wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: id, Reason: "changed my mind"})
	if err != nil {
		t.Fatal(err)
	}
	if _, rev2, _ := e.st.Get(ctx, rkey); rev2 != reqRev {
		t.Fatalf("a second cancel rewrote the request (revision %d, was %d)", rev2, reqRev)
	}
	if !hasCondition(again.GetStatus(), ConditionCancelRequested) {
		t.Fatalf("second answer: %v", again.GetStatus())
	}
	// A workload that already ended is answered as it is, and asks
	// nothing of the loop.
	ended, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(tn)})
	if err != nil {
		t.Fatal(err)
	}
	eid := ended.GetWorkload().GetId()
	ew, erev, _ := e.svc.getWorkload(ctx, eid)
	ew.Status.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
	storeWorkload(t, e, eid, ew, erev)
	back, err := e.wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: eid})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, ew) {
		t.Fatalf("cancel of a finished workload answered %v, want it unchanged", back.GetStatus())
	}
	ekey, _ := CancelRequestKey(eid)
	if _, _, err := e.st.Get(ctx, ekey); err == nil {
		t.Fatal("a cancel of a finished workload stored a request")
	}
}

// storeWorkload writes w at id over revision rev, as the loop would.
func storeWorkload(t *testing.T, e *env, id string, w *meridianv1.Workload, rev int64) {
	t.Helper()
	b, err := marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := WorkloadKey(id)
	if _, err := e.st.Commit(testCtx(t), nil, store.PutIfModRev(key, b, rev)); err != nil {
		t.Fatal(err)
	}
}
