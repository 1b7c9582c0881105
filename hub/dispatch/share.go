package dispatch

import (
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// shareButStatus returns a workload equal to w that shares every field
// with w but the status, which it copies (shareButConditions). An
// agent's event changes only a workload's status (its phase, times,
// message, conditions), so the event transaction starts from such a copy
// of the loop's last write (recentWrites) instead of a deep copy: the pod
// sets, selectors, labels and runtime template, most of a workload's
// objects, are not copied again for every event. Nothing may change the
// shared fields; in tests a writeGuard checks it, and
// TestShareButStatusCopiesEveryField fails when a field added to Workload
// is not listed here.
//
// A workload with fields this hub does not know (a newer hub wrote it)
// is copied whole, as CloneVT keeps them and a shallow copy could not.
func shareButStatus(w *meridianv1.Workload) *meridianv1.Workload {
	if w == nil {
		return nil
	}
	if len(w.ProtoReflect().GetUnknown()) > 0 {
		return cloneWorkload(w)
	}
	c := withoutStatus(w)
	c.Status = shareButConditions(w.Status)
	return c
}

// shareButConditions returns a status equal to st that shares its
// timestamps, placement decision, assignment and quota charges with st
// and copies its conditions deeply. Nothing changes those shared parts
// in place: an event, a requeue or a finish sets a new timestamp or
// clears the assignment, it never edits one (the write guard of the tests
// checks it). Conditions are edited in place (a hold or backoff replaces
// its entry in the slice), so they are the one part copied: the rest was
// most of the objects a deep copy made for every event.
// TestShareButStatusCopiesEveryField fails when a field added to
// WorkloadStatus is not listed here; a status with fields this hub does
// not know is copied whole.
func shareButConditions(st *meridianv1.WorkloadStatus) *meridianv1.WorkloadStatus {
	if st == nil {
		return nil
	}
	if len(st.ProtoReflect().GetUnknown()) > 0 {
		return st.CloneVT()
	}
	c := &meridianv1.WorkloadStatus{
		Phase: st.Phase, Cluster: st.Cluster, DispatchId: st.DispatchId, PendingReason: st.PendingReason,
		Message: st.Message, ExitCode: st.ExitCode, Attempts: st.Attempts, StartTime: st.StartTime,
		EndTime: st.EndTime, DispatchTime: st.DispatchTime, UpdateTime: st.UpdateTime,
		PendingReasonCode: st.PendingReasonCode, Placement: st.Placement, AcceptTime: st.AcceptTime,
		Assignment: st.Assignment, QuotaCharge: st.QuotaCharge, DispatchTerm: st.DispatchTerm,
		DispatchTraceParent: st.DispatchTraceParent,
	}
	if len(st.Conditions) > 0 {
		c.Conditions = make([]*meridianv1.Condition, len(st.Conditions))
		for i, cond := range st.Conditions {
			c.Conditions[i] = cond.CloneVT()
		}
	}
	return c
}

// withoutStatus returns a workload that shares every field of w but the
// status, which it leaves out: the one list of Workload's fields that the
// copies made by hand (shareButStatus, dispatchSpec) build on. (hub/api's
// specOf is another thing: a deep copy without what the hub sets.) A field added to
// Workload and not listed here fails TestShareButStatusCopiesEveryField
// and TestDispatchSpecCarriesEveryField.
func withoutStatus(w *meridianv1.Workload) *meridianv1.Workload {
	return &meridianv1.Workload{
		Id: w.GetId(), Name: w.GetName(), Queue: w.GetQueue(), Priority: w.GetPriority(), Preemptible: w.GetPreemptible(),
		ClusterSelector: w.GetClusterSelector(), PodSets: w.GetPodSets(), Runtime: w.GetRuntime(),
		RequeueOnClusterLoss: w.GetRequeueOnClusterLoss(), Labels: w.GetLabels(), IdempotencyKey: w.GetIdempotencyKey(),
		CreateTime: w.GetCreateTime(), SubmittedBy: w.GetSubmittedBy(), MaxRuntime: w.GetMaxRuntime(),
		TraceParent: w.GetTraceParent(),
	}
}

// testWriteGuard, set by the package's tests, guards every loop's
// recentWrites: it is told of each entry put, handed out and dropped, and
// checks that nobody changed an entry after it was put, the rule that
// copies sharing its fields rely on (share_test.go). Nil in production.
var testWriteGuard writeGuard

type writeGuard interface {
	keep(key string, rev int64, w *meridianv1.Workload)
	check(key string, e ownWrite)
	release(key string, rev int64)
}
