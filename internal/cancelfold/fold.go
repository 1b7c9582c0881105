package cancelfold

import (
	"context"
	"strings"
	"time"

	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/protofast"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Run folds the cancel requests stored in st every interval until ctx
// ends: a queued workload becomes CANCELLED, an active one gets the
// request's condition, and the request goes in the same transaction. A
// request that does not decode is reported to bad (which may be nil).
func Run(ctx context.Context, st *store.Store, every time.Duration, bad func(key string)) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		Once(ctx, st, bad)
	}
}

// Once folds the requests stored now.
func Once(ctx context.Context, st *store.Store, bad func(key string)) {
	prefix := store.Prefix(store.KindCancelRequests)
	reqs, _, err := st.List(ctx, prefix, 0)
	if err != nil {
		return
	}
	for _, r := range reqs {
		cond := &meridianv1.Condition{}
		if protofast.Unmarshal(r.Value, cond) != nil {
			if bad != nil {
				bad(r.Key)
			}
			continue
		}
		ops := []store.Op{store.Delete(r.Key, r.ModRev)}
		if op, ok := fold(ctx, st, strings.TrimPrefix(r.Key, prefix), cond); ok {
			ops = append(ops, op)
		}
		_, _ = st.Commit(ctx, nil, ops...)
	}
}

// fold returns the write that carries out a request for workload id, and
// false when it has nothing to change (gone, or finished).
func fold(ctx context.Context, st *store.Store, id string, cond *meridianv1.Condition) (store.Op, bool) {
	key, err := store.Key(store.KindWorkloads, id)
	if err != nil {
		return store.Op{}, false
	}
	b, rev, err := st.Get(ctx, key)
	if err != nil {
		return store.Op{}, false
	}
	w := &meridianv1.Workload{}
	if protofast.Unmarshal(b, w) != nil || w.GetStatus() == nil {
		return store.Op{}, false
	}
	s := w.GetStatus()
	switch s.GetPhase() {
	case meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED, meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED, meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED:
		return store.Op{}, false
	}
	requested := false
	for _, c := range s.GetConditions() {
		requested = requested || c.GetType() == cond.GetType()
	}
	if !requested {
		s.Conditions = append(s.Conditions, cond)
	}
	if s.GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
		s.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED
		s.Message, s.EndTime = cond.GetMessage(), cond.GetLastTransitionTime()
		s.PendingReason, s.PendingReasonCode = "", ""
	}
	nb, err := protofast.MarshalDeterministic(w)
	if err != nil {
		return store.Op{}, false
	}
	return store.PutIfModRev(key, nb, rev), true
}
