package api

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/protofast"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// fakeIntake stands in for the leader's loop: it takes a submit (and
// stores it, marked DISPATCHED, as the loop would store a placed one) or
// hands it back, and fails as told.
type fakeIntake struct {
	st   *store.Store
	take bool
	fail error

	mu    sync.Mutex
	calls [][]store.Op
}

func (f *fakeIntake) Submit(ctx context.Context, ws []*meridianv1.Workload, ops []store.Op) ([]*meridianv1.Workload, bool, error) {
	f.mu.Lock()
	f.calls = append(f.calls, ops)
	f.mu.Unlock()
	if f.fail != nil {
		return nil, true, f.fail
	}
	if !f.take {
		return nil, false, nil
	}
	out := make([]*meridianv1.Workload, len(ws))
	for i, w := range ws {
		out[i] = protofast.Clone(w)
		out[i].Status.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED
	}
	if _, err := f.st.Commit(ctx, nil, ops...); err != nil {
		return nil, true, err
	}
	return out, true, nil
}

// intakeEnv is an API whose intake is f, with a queue of its own (q).
func intakeEnv(t *testing.T, f *fakeIntake) (e *env, q string) {
	t.Helper()
	e = newEnv(t, func(d *Deps) { d.Intake = f })
	f.st = e.st
	q = tenant(t) + "/intake"
	e.mkQueues(t, strings.Split(q, "/")[0], q)
	return e, q
}

// The API offers every submit, single or batch, to the intake with its
// whole commit (each workload's create, its idempotency key, the queue's
// check) and answers with what the intake stored; a submit handed back
// is stored QUEUED by the API itself.
func TestSubmitsGoThroughTheIntake(t *testing.T) {
	for _, take := range []bool{true, false} {
		name := map[bool]string{true: "taken", false: "handed back"}[take]
		t.Run(name, func(t *testing.T) {
			f := &fakeIntake{take: take}
			e, q := intakeEnv(t, f)
			ctx := testCtx(t)
			want := meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED
			if take {
				want = meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED
			}

			w := validWorkload(q)
			w.IdempotencyKey = "one"
			resp, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.GetWorkload().GetStatus().GetPhase(); got != want {
				t.Fatalf("answered %v, want %v", got, want)
			}
			if _, err := e.wl.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: resp.GetWorkload().GetId()}); err != nil {
				t.Fatalf("the submit was not stored: %v", err)
			}
			f.mu.Lock()
			ops := f.calls[0]
			f.mu.Unlock()
			wk, _ := WorkloadKey(resp.GetWorkload().GetId())
			qk, _ := QueueKey(q)
			if len(ops) != 3 || ops[0].Key() != wk || ops[1].Key() != IdempotencyKey(q, "one") || ops[2].Key() != qk {
				t.Fatalf("the intake got ops on %v; want the workload, its idempotency key and the queue", opKeys(ops))
			}

			// The same key again replays, without asking the intake.
			again, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w})
			if err != nil || !again.GetReplayed() || again.GetWorkload().GetId() != resp.GetWorkload().GetId() {
				t.Fatalf("the repeat: %v, %v; want the stored workload, replayed", again, err)
			}

			batch := batchOf(5, q, "b")
			bresp, err := e.wl.SubmitWorkloads(ctx, &meridianv1.SubmitWorkloadsRequest{Workloads: batch})
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range bresp.GetResults() {
				if r.GetWorkload().GetName() != batch[i].GetName() || r.GetWorkload().GetStatus().GetPhase() != want {
					t.Fatalf("batch result %d = %v", i, r)
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.calls) != 2 || len(f.calls[1]) != 2*len(batch)+1 {
				t.Fatalf("the intake was asked %d times, the batch with %d ops; want twice, %d ops", len(f.calls), len(f.calls[len(f.calls)-1]), 2*len(batch)+1)
			}
		})
	}
}

// A client that asks for store_queued is answered by the API's own
// commit, QUEUED, without the intake being asked.
func TestStoreQueuedBypassesTheIntake(t *testing.T) {
	f := &fakeIntake{take: true}
	e, q := intakeEnv(t, f)
	ctx := testCtx(t)
	resp, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(q), StoreQueued: true})
	if err != nil || resp.GetWorkload().GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
		t.Fatalf("store_queued submit: %v, %v; want QUEUED", resp, err)
	}
	bresp, err := e.wl.SubmitWorkloads(ctx, &meridianv1.SubmitWorkloadsRequest{Workloads: batchOf(3, q, "sq"), StoreQueued: true})
	if err != nil || len(bresp.GetResults()) != 3 || bresp.GetResults()[2].GetWorkload().GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
		t.Fatalf("store_queued batch: %v, %v; want three QUEUED", bresp, err)
	}
	// Over REST it is a query parameter.
	body, err := protojson.Marshal(validWorkload(q))
	if err != nil {
		t.Fatal(err)
	}
	var rest meridianv1.SubmitWorkloadResponse
	e.rest(t, "POST", "/v1/workloads?store_queued=true", body, nil).decode(t, &rest)
	if rest.GetWorkload().GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
		t.Fatalf("REST store_queued submit answered %v", rest.GetWorkload().GetStatus())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) != 0 {
		t.Fatalf("the intake was asked %d times for store_queued submits", len(f.calls))
	}
}

// A commit the intake cannot vouch for (etcd did not answer) is the
// submit's error: the API does not store the workload again, under the
// same or a new id.
func TestSubmitReportsTheIntakesUnknownOutcome(t *testing.T) {
	f := &fakeIntake{fail: errors.New("store: commit 3 ops: context deadline exceeded")}
	e, q := intakeEnv(t, f)
	ctx := testCtx(t)
	before := e.workloadKeys(t)
	_, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(q)})
	if status.Code(err) == codes.OK {
		t.Fatal("a submit whose commit is unknown succeeded")
	}
	if n := e.workloadKeys(t) - before; n != 0 {
		t.Fatalf("%d workloads stored after an unknown outcome; the API must not store one itself", n)
	}
}

func opKeys(ops []store.Op) []string {
	keys := make([]string, len(ops))
	for i, o := range ops {
		keys[i] = o.Key()
	}
	return keys
}
