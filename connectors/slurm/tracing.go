package slurm

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meridian-gpu/meridian/internal/telemetry"
)

// submitTraced submits req with be inside a client span when the launch is
// traced: "slurm sbatch" for the CLI, "slurm POST /job/submit" for
// slurmrestd. Untraced, it is be.submit.
func submitTraced(ctx context.Context, be backend, dispatchID string, req SubmitRequest) (int64, error) {
	name := "slurm POST /job/submit"
	if be.name() == "cli" {
		name = "slurm sbatch"
	}
	ctx, span := telemetry.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	if !span.IsRecording() {
		return be.submit(ctx, req)
	}
	defer span.End()
	span.SetAttributes(attribute.String("meridian.dispatch.id", dispatchID), attribute.String("slurm.backend", be.name()),
		attribute.String("slurm.partition", req.Partition), attribute.Int("slurm.nodes", req.Nodes), attribute.String("slurm.gres", req.Gres))
	jobID, err := be.submit(ctx, req)
	if err != nil {
		telemetry.Fail(span, err)
		return 0, err
	}
	span.SetAttributes(attribute.Int64("slurm.job_id", jobID))
	return jobID, nil
}
