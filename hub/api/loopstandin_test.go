package api

import (
	"context"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/protofast"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// foldCancels stands in for the leader's loop in this package's tests,
// which run the API without one: it does with each stored cancel request
// what the loop's housekeeping does (hub/dispatch, where the real loop's
// fold is tested), so that the API's tests see cancels take effect. A
// queued workload becomes CANCELLED, an active one gets the condition,
// and the request goes in the same transaction.
func foldCancels(ctx context.Context, t testing.TB, e *env) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		reqs, _, err := e.st.List(ctx, store.Prefix(store.KindCancelRequests), 0)
		if err != nil {
			continue
		}
		for _, r := range reqs {
			cond := &meridianv1.Condition{}
			if protofast.Unmarshal(r.Value, cond) != nil {
				t.Errorf("stored cancel request %s does not decode", r.Key)
				continue
			}
			id := r.Key[len(store.Prefix(store.KindCancelRequests)):]
			ops := []store.Op{store.Delete(r.Key, r.ModRev)}
			if w, rev, err := e.svc.getWorkload(ctx, id); err == nil && !IsTerminal(w.GetStatus().GetPhase()) {
				st := w.GetStatus()
				if !hasCondition(st, ConditionCancelRequested) {
					st.Conditions = append(st.Conditions, cond)
				}
				if st.GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
					st.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED
					st.Message, st.EndTime = cond.GetMessage(), cond.GetLastTransitionTime()
					st.PendingReason, st.PendingReasonCode = "", ""
				}
				b, _ := marshal(w)
				key, _ := WorkloadKey(id)
				ops = append(ops, store.PutIfModRev(key, b, rev))
			}
			_, _ = e.st.Commit(ctx, nil, ops...)
		}
	}
}
