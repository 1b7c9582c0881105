package e2eutil

import (
	"context"
	"fmt"
	"testing"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// Workloads drives a hub's workload API for a test and fails it with the
// tail of the fixture's log, so a failure shows what the hub and agents
// were doing.
type Workloads struct {
	WL  meridianv1.WorkloadServiceClient
	Log *LogBuffer
}

// Failf fails t with the log's tail appended.
func (h Workloads) Failf(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Fatalf(format+"\n--- fixture log (tail) ---\n%s", append(args, h.Log.Tail(6000))...)
}

// Submit submits w over gRPC and returns its id.
func (h Workloads) Submit(t *testing.T, w *meridianv1.Workload) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := h.WL.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w})
	if err != nil {
		t.Fatalf("submit %s: %v", w.GetName(), err)
	}
	return resp.GetWorkload().GetId()
}

// Get reads one workload.
func (h Workloads) Get(t *testing.T, id string) *meridianv1.Workload {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := h.WL.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: id})
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return w
}

// WaitPhase polls the workload until it reaches want; another terminal
// phase, or the limit, fails the test.
func (h Workloads) WaitPhase(t *testing.T, id string, want meridianv1.WorkloadPhase, limit time.Duration) *meridianv1.Workload {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		w := h.Get(t, id)
		p := w.GetStatus().GetPhase()
		if p == want {
			return w
		}
		if TerminalPhase(p) {
			h.Failf(t, "workload %s (%s) is %s (exit %v, %q), want %s", id, w.GetName(), p, ExitOf(w.GetStatus().ExitCode), w.GetStatus().GetMessage(), want)
		}
		if time.Now().After(deadline) {
			h.Failf(t, "workload %s (%s) still %s after %s (reason %q), want %s", id, w.GetName(), p, limit, w.GetStatus().GetPendingReason(), want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TerminalPhase reports whether a workload in phase p is finished.
func TerminalPhase(p meridianv1.WorkloadPhase) bool {
	switch p {
	case meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED, meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED,
		meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED:
		return true
	}
	return false
}

// ExitOf renders an optional exit code, "none" when there is none.
func ExitOf(code *int32) string {
	if code == nil {
		return "none"
	}
	return fmt.Sprint(*code)
}
