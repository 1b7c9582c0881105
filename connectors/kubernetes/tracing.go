package kubernetes

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-gpu/meridian/internal/telemetry"
)

// createJob creates j, inside a "kubernetes create Job" client span when
// the launch is traced. An AlreadyExists answer (a redelivered dispatch)
// is returned as is and not marked as a failure.
func (c *Connector) createJob(ctx context.Context, dispatchID string, j *batchv1.Job) error {
	ctx, span := telemetry.Start(ctx, "kubernetes create Job", trace.WithSpanKind(trace.SpanKindClient))
	if !span.IsRecording() {
		_, err := c.kube.BatchV1().Jobs(c.cfg.Namespace).Create(ctx, j, metav1.CreateOptions{})
		return err
	}
	defer span.End()
	span.SetAttributes(attribute.String("meridian.dispatch.id", dispatchID), attribute.String("k8s.namespace.name", c.cfg.Namespace),
		attribute.String("k8s.job.name", j.Name))
	_, err := c.kube.BatchV1().Jobs(c.cfg.Namespace).Create(ctx, j, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		span.SetAttributes(attribute.Bool("meridian.already_exists", true))
	case err != nil:
		telemetry.Fail(span, err)
	}
	return err
}
