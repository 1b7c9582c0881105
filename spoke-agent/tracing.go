package agent

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

	"github.com/meridian-gpu/meridian/internal/telemetry"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
)

// Tracing. The agent's bus (natsbus.WithTracerProvider) gives each
// dispatch delivery a consumer span continuing the hub's publish; below
// it the agent opens meridian.agent.launch around the connector's Launch
// (the connectors open their own client spans inside: sbatch, slurmrestd,
// Job create), and every event it publishes for the dispatch (ACCEPTED,
// RUNNING, the final state) continues the delivery's span context, so the
// hub's processing of the event lands in the same trace. Untraced
// deliveries cost nothing: no span records, nothing is allocated.

// startLaunch opens the launch span; end records the outcome.
func startLaunch(ctx context.Context, d *agentv1.Dispatch, connector string) (context.Context, func(error)) {
	ctx, span := telemetry.Start(ctx, "meridian.agent.launch")
	if !span.IsRecording() {
		return ctx, noEnd
	}
	span.SetAttributes(
		attribute.String("meridian.dispatch.id", d.GetDispatchId()),
		attribute.String("meridian.workload.id", d.GetWorkloadId()),
		attribute.String("meridian.cluster", d.GetClusterId()),
		attribute.Int("meridian.dispatch.attempt", int(d.GetAttempt())),
		attribute.String("meridian.connector", connector),
	)
	return ctx, func(err error) {
		outcome := "accepted"
		switch {
		case err == nil:
		case IsRejected(err):
			outcome = "rejected"
			span.SetAttributes(attribute.String("meridian.reject_reason", RejectReason(err)))
		default:
			outcome = "error"
			telemetry.Fail(span, err)
		}
		span.SetAttributes(attribute.String("meridian.launch.outcome", outcome))
		span.End()
	}
}

func noEnd(error) {}
