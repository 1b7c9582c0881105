package api

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// PendingCodeWaitingForScheduler is the pending_reason_code that goes with
// PendingWaitingForScheduler: nothing has been decided for the workload yet.
const PendingCodeWaitingForScheduler = "WaitingForScheduler"

// FitChecker tells whether a workload could ever run as written. The
// scheduling loop (hub/dispatch) implements it from the fleet and the queue
// limits it knows. It may be called concurrently, must not change state
// and must not block on I/O; SubmitWorkload calls it, before anything is
// stored, when reject_if_never_fits is set.
type FitChecker interface {
	// NeverFits reports whether w can never run as written (no registered
	// cluster could hold it even if empty, or it needs more than its queue
	// could ever hold) and, if so, why in plain words. w has passed
	// validation but has no id yet.
	NeverFits(w *meridianv1.Workload) (reason string, never bool)
}

// ExplainWorkload asks the Explainer, or answers from the stored status.
//
// A QUEUED workload gets its pending reason and code, its quota checks and
// one ClusterFit per cluster. Any other phase gets no pending reason; when
// it was dispatched, Clusters holds one ClusterFit for the cluster it runs
// or ran on, whose lines say where it runs and since when, or how it ended
// (see describeNotQueued), so that REST and gRPC clients get a plain
// answer too, and Placement and PlacementRule say why that cluster was
// chosen (stored with the dispatch).
func (s *Service) ExplainWorkload(ctx context.Context, req *meridianv1.ExplainWorkloadRequest) (*meridianv1.ExplainWorkloadResponse, error) {
	w, _, err := s.getWorkload(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	var resp *meridianv1.ExplainWorkloadResponse
	if s.d.Explainer != nil {
		resp, err = s.d.Explainer.Explain(ctx, w)
		if err != nil {
			if _, ok := status.FromError(err); ok {
				return nil, err
			}
			return nil, status.Errorf(codes.Internal, "explain %s: %v", w.GetId(), err)
		}
	}
	if resp == nil {
		resp = &meridianv1.ExplainWorkloadResponse{
			WorkloadId:   w.GetId(),
			Phase:        w.GetStatus().GetPhase(),
			EvaluateTime: w.GetStatus().GetUpdateTime(),
		}
		if resp.Phase == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
			resp.PendingReason = w.GetStatus().GetPendingReason()
			resp.PendingReasonCode = w.GetStatus().GetPendingReasonCode()
		}
	}
	if resp.EvaluateTime == nil {
		resp.EvaluateTime = timestamppb.New(s.now())
	}
	if resp.Phase != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
		resp.PendingReason, resp.PendingReasonCode, resp.QueuePosition = "", "", 0
		if len(resp.GetClusters()) == 0 {
			resp.Clusters = s.describeNotQueued(w)
		}
		if pd := w.GetStatus().GetPlacement(); pd != nil && resp.GetPlacementRule() == "" {
			// Why the cluster was chosen, as stored with the dispatch.
			resp.Placement, resp.PlacementRule = pd.GetClusters(), pd.GetRule()
		}
		return resp, nil
	}
	resp.Placement, resp.PlacementRule = nil, ""
	if resp.PendingReason == "" {
		resp.PendingReason = PendingWaitingForScheduler
	}
	if resp.PendingReasonCode == "" && resp.PendingReason == PendingWaitingForScheduler {
		resp.PendingReasonCode = PendingCodeWaitingForScheduler
	}
	return resp, nil
}

// describeNotQueued explains a workload that is not waiting: one
// ClusterFit for the cluster it runs or ran on (Fits: it was dispatched
// there), with lines such as "running on east since 2026-05-01T10:00:00Z
// (attempt 1)" or "failed on east at ..., exit code 3: <message>". A
// workload that never left the queue (cancelled while QUEUED) has no
// cluster, so nothing is returned; its status message says how it ended.
func (s *Service) describeNotQueued(w *meridianv1.Workload) []*meridianv1.ClusterFit {
	st := w.GetStatus()
	cluster := st.GetCluster()
	if cluster == "" {
		return nil
	}
	at := func(ts *timestamppb.Timestamp) string {
		if ts == nil {
			return "an unknown time"
		}
		return ts.AsTime().UTC().Format(time.RFC3339)
	}
	attempt := ""
	if n := st.GetAttempts(); n > 0 {
		attempt = fmt.Sprintf(" (attempt %d)", n)
	}
	ended := func(verb string) string {
		line := fmt.Sprintf("%s on %s at %s", verb, cluster, at(st.GetEndTime()))
		if st.ExitCode != nil {
			line += fmt.Sprintf(", exit code %d", st.GetExitCode())
		}
		if m := strings.TrimSpace(st.GetMessage()); m != "" {
			line += ": " + m
		}
		return line
	}
	var lines []string
	active := false
	switch st.GetPhase() {
	case meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED:
		active = true
		lines = append(lines, fmt.Sprintf("dispatched to %s at %s%s; waiting for the cluster to accept it", cluster, at(st.GetDispatchTime()), attempt))
	case meridianv1.WorkloadPhase_WORKLOAD_PHASE_ACCEPTED:
		active = true
		lines = append(lines, fmt.Sprintf("accepted by %s, dispatched at %s%s; waiting for it to start", cluster, at(st.GetDispatchTime()), attempt))
	case meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING:
		active = true
		lines = append(lines, fmt.Sprintf("running on %s since %s%s", cluster, at(st.GetStartTime()), attempt))
	case meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED:
		lines = append(lines, ended("succeeded"))
	case meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED:
		lines = append(lines, ended("failed"))
	case meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED:
		lines = append(lines, ended("cancelled"))
	default:
		lines = append(lines, fmt.Sprintf("last dispatched to %s at %s%s", cluster, at(st.GetDispatchTime()), attempt))
	}
	if active && s.d.Clusters != nil {
		if c, ok := s.d.Clusters.GetCluster(cluster); ok {
			switch c.GetState() {
			case meridianv1.ClusterState_CLUSTER_STATE_LOST:
				lines = append(lines, fmt.Sprintf("cluster %s is lost now: the hub has not heard from its agent; the workload keeps running there unless it asks to be requeued on cluster loss", cluster))
			case meridianv1.ClusterState_CLUSTER_STATE_DRAINING:
				lines = append(lines, fmt.Sprintf("cluster %s is draining: running work stays, new work goes elsewhere", cluster))
			}
		}
	}
	return []*meridianv1.ClusterFit{{Cluster: cluster, Fits: true, Lines: lines}}
}

// rejectIfNeverFits answers a submit that set reject_if_never_fits: a
// FAILED_PRECONDITION naming the field, with the reason, when the
// workload can never run as written; nil otherwise. Without a FitChecker
// (a hub with no scheduling loop) the flag is a no-op: nothing can be
// judged, and the workload is stored as usual.
func (s *Service) rejectIfNeverFits(_ context.Context, w *meridianv1.Workload) error {
	if s.d.FitChecker == nil {
		return nil
	}
	reason, never := s.d.FitChecker.NeverFits(w)
	if !never {
		return nil
	}
	return neverFitsError(reason)
}

// neverFitsError is FAILED_PRECONDITION with a BadRequest detail naming
// reject_if_never_fits and a PreconditionFailure detail of type NEVER_FITS
// on the workload.
func neverFitsError(reason string) error {
	why := strings.TrimPrefix(reason, "can never fit: ")
	err := fieldError(codes.FailedPrecondition, "reject_if_never_fits",
		"the workload can never run as written, so it was not stored: %s", why)
	st, _ := status.FromError(err)
	if d, derr := st.WithDetails(&errdetails.PreconditionFailure{Violations: []*errdetails.PreconditionFailure_Violation{{
		Type: "NEVER_FITS", Subject: "workload", Description: why,
	}}}); derr == nil {
		return d.Err()
	}
	return err
}
