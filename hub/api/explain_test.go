package api

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// wideChecker says that a pod set of more than 100 replicas can never
// fit, as a small fleet would.
type wideChecker struct{ calls int }

func (c *wideChecker) NeverFits(w *meridianv1.Workload) (string, bool) {
	c.calls++
	for _, ps := range w.GetPodSets() {
		if ps.GetReplicas() > 100 {
			return "can never fit: a cluster has at most 64 nvidia-h100-80gb GPUs, the workload needs 1000 GPUs in one cluster", true
		}
	}
	return "", false
}

func TestRejectIfNeverFits(t *testing.T) {
	checker := &wideChecker{}
	e := newEnv(t, func(d *Deps) { d.FitChecker = checker })
	bare := newEnv(t) // no FitChecker: the flag is a no-op
	tn := tenant(t)
	leaf := tn + "/vision/train"
	e.mkQueues(t, tn, tn+"/vision", leaf)
	wide := func() *meridianv1.Workload {
		w := validWorkload(leaf)
		w.PodSets[0].Replicas = 1000
		return w
	}
	tests := []struct {
		name   string
		env    *env
		w      *meridianv1.Workload
		reject bool
		want   codes.Code
	}{
		{"never fits and the flag is set: refused", e, wide(), true, codes.FailedPrecondition},
		{"never fits without the flag: stored, waits with a reason", e, wide(), false, codes.OK},
		{"fits with the flag: stored", e, validWorkload(leaf), true, codes.OK},
		{"no checker: the flag is a no-op", bare, wide(), true, codes.OK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.env.keyCount(t)
			_, err := tc.env.wl.SubmitWorkload(testCtx(t), &meridianv1.SubmitWorkloadRequest{Workload: tc.w, RejectIfNeverFits: tc.reject})
			if got := status.Code(err); got != tc.want {
				t.Fatalf("code %v (%v), want %v", got, err, tc.want)
			}
			stored := tc.env.keyCount(t) - before
			if tc.want != codes.OK {
				if stored != 0 {
					t.Fatalf("a refused submit stored %d keys", stored)
				}
				st := status.Convert(err)
				if !slices.Contains(fields(err), "reject_if_never_fits") || !strings.Contains(st.Message(), "reject_if_never_fits: ") ||
					!strings.Contains(st.Message(), ": a cluster has at most 64 nvidia-h100-80gb GPUs, the workload needs 1000 GPUs in one cluster") {
					t.Fatalf("error %q (fields %v) does not name the field and the reason", st.Message(), fields(err))
				}
				var pf *errdetails.PreconditionFailure
				for _, d := range st.Details() {
					if p, ok := d.(*errdetails.PreconditionFailure); ok {
						pf = p
					}
				}
				if pf == nil || len(pf.GetViolations()) != 1 || pf.GetViolations()[0].GetType() != "NEVER_FITS" {
					t.Fatalf("PreconditionFailure detail = %v", pf)
				}
				return
			}
			if stored == 0 {
				t.Fatal("an accepted submit stored nothing")
			}
		})
	}
	if checker.calls != 2 {
		t.Fatalf("checker called %d times, want 2 (only with the flag)", checker.calls)
	}
	// Over REST the body is the workload and the flag a query parameter;
	// the refusal is a 400 naming the field.
	r := e.rest(t, "POST", "/v1/workloads?reject_if_never_fits=true", mustJSON(t, wide()), nil)
	if r.code != 400 || !slices.Contains(fields(r.status(t).Err()), "reject_if_never_fits") {
		t.Fatalf("REST refusal: HTTP %d %s", r.code, r.body)
	}
}

// setStatus replaces a stored workload's status, as the scheduling loop
// would.
func (e *env) setStatus(t testing.TB, id string, st *meridianv1.WorkloadStatus) {
	t.Helper()
	w, rev, err := e.svc.getWorkload(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	w.Status = st
	b, err := marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	k, err := WorkloadKey(id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Commit(testCtx(t), nil, store.PutIfModRev(k, b, rev)); err != nil {
		t.Fatal(err)
	}
}

// Explain on a workload that is not waiting says where it runs or how it
// ended, over gRPC and REST alike, instead of an empty cluster list.
func TestExplainNotQueued(t *testing.T) {
	e := newEnv(t)
	tn := tenant(t)
	leaf := tn + "/vision/train"
	e.mkQueues(t, tn, tn+"/vision", leaf)
	at := func(s string) *timestamppb.Timestamp {
		ts, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return timestamppb.New(ts)
	}
	tests := []struct {
		name     string
		st       *meridianv1.WorkloadStatus
		clusters int
		lines    string
		code     string
		reason   string
		rule     string // placement rule shown, from the stored status
	}{
		{
			name:     "queued, nothing decided yet",
			st:       &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED, PendingReason: PendingWaitingForScheduler},
			clusters: 0, code: "WaitingForScheduler", reason: PendingWaitingForScheduler,
		},
		{
			name: "queued with a stored reason and code",
			st: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED,
				PendingReason: "can never fit: no registered cluster has nvidia-h100-80gb GPUs", PendingReasonCode: "NeverFits"},
			clusters: 0, code: "NeverFits", reason: "can never fit: no registered cluster has nvidia-h100-80gb GPUs",
		},
		{
			name: "running",
			st: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING, Cluster: "east", Attempts: 1,
				DispatchTime: at("2026-05-01T09:59:00Z"), StartTime: at("2026-05-01T10:00:00Z")},
			clusters: 1, lines: "running on east since 2026-05-01T10:00:00Z (attempt 1)",
		},
		{
			name: "dispatched",
			st: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED, Cluster: "east", Attempts: 2,
				DispatchTime: at("2026-05-01T09:59:00Z")},
			clusters: 1, lines: "dispatched to east at 2026-05-01T09:59:00Z (attempt 2); waiting for the cluster to accept it",
		},
		{
			name: "failed",
			st: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED, Cluster: "east", Attempts: 1,
				EndTime: at("2026-05-01T11:00:00Z"), ExitCode: proto.Int32(3), Message: "OOMKilled"},
			clusters: 1, lines: "failed on east at 2026-05-01T11:00:00Z, exit code 3: OOMKilled",
		},
		{
			name: "succeeded, with the stored placement decision",
			st: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED, Cluster: "east", Attempts: 1,
				EndTime: at("2026-05-01T11:00:00Z"), Placement: &meridianv1.PlacementDecision{Rule: "tightest fit: leaves 0 GPUs free on east vs 8 GPUs on west",
					Clusters: []*meridianv1.ClusterScore{{Cluster: "east", Chosen: true, Detail: "chosen; leaves 0 GPUs free"}, {Cluster: "west", Score: 8, Detail: "leaves 8 GPUs free"}}}},
			clusters: 1, lines: "succeeded on east at 2026-05-01T11:00:00Z", rule: "tightest fit: leaves 0 GPUs free on east vs 8 GPUs on west",
		},
		{
			name: "queued again after a preemption shows no old placement",
			st: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED, PendingReason: "waiting", PendingReasonCode: "NoFit", Cluster: "east",
				Placement: &meridianv1.PlacementDecision{Rule: "only eligible cluster: east", Clusters: []*meridianv1.ClusterScore{{Cluster: "east", Chosen: true}}}},
			code: "NoFit", reason: "waiting",
		},
		{
			name: "cancelled while running",
			st: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED, Cluster: "east",
				EndTime: at("2026-05-01T11:00:00Z"), Message: "cancelled by user: wrong dataset"},
			clusters: 1, lines: "cancelled on east at 2026-05-01T11:00:00Z: cancelled by user: wrong dataset",
		},
		{
			name: "cancelled while queued has no cluster to describe",
			st: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED,
				EndTime: at("2026-05-01T11:00:00Z"), Message: "cancelled by user"},
			clusters: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := e.wl.SubmitWorkload(testCtx(t), &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(leaf)})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetWorkload().GetId()
			e.setStatus(t, id, tc.st)
			ex, err := e.wl.ExplainWorkload(testCtx(t), &meridianv1.ExplainWorkloadRequest{Id: id})
			if err != nil {
				t.Fatal(err)
			}
			var rest meridianv1.ExplainWorkloadResponse
			e.rest(t, "GET", "/v1/workloads/"+id+":explain", nil, nil).decode(t, &rest)
			for via, got := range map[string]*meridianv1.ExplainWorkloadResponse{"gRPC": ex, "REST": &rest} {
				if got.GetPendingReasonCode() != tc.code || got.GetPendingReason() != tc.reason || len(got.GetClusters()) != tc.clusters {
					t.Fatalf("%s: reason %q (%q), %d clusters; want %q (%q), %d", via, got.GetPendingReason(), got.GetPendingReasonCode(),
						len(got.GetClusters()), tc.reason, tc.code, tc.clusters)
				}
				if tc.clusters == 1 {
					cf := got.GetClusters()[0]
					if cf.GetCluster() != tc.st.GetCluster() || !cf.GetFits() || strings.Join(cf.GetLines(), " | ") != tc.lines {
						t.Fatalf("%s: cluster %q fits=%v lines %q; want %q", via, cf.GetCluster(), cf.GetFits(), cf.GetLines(), tc.lines)
					}
				}
				if got.GetEvaluateTime() == nil {
					t.Fatalf("%s: no evaluate time", via)
				}
				if got.GetPlacementRule() != tc.rule || (tc.rule != "" && (len(got.GetPlacement()) != 2 || got.GetPlacement()[1].GetScore() != 8)) || (tc.rule == "" && len(got.GetPlacement()) != 0) {
					t.Fatalf("%s: placement %v %q, want rule %q", via, got.GetPlacement(), got.GetPlacementRule(), tc.rule)
				}
			}
		})
	}
}
