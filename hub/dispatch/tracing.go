package dispatch

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/internal/telemetry"
)

// Tracing (Deps.TracerProvider). The loop continues a workload's trace
// from the traceparent the API stored with it (Workload.trace_parent):
//
//   - meridian.schedule.cycle: one span per cycle that dispatched a traced
//     workload, a root of its own trace (a cycle serves many workloads)
//     linked to each dispatched workload's submit span;
//   - meridian.dispatch: one span per dispatched traced workload, a child of
//     its submit span linked to the cycle, from the cycle's start until the
//     dispatch is committed and published; its traceparent is stored in the
//     dispatch record, so a republish after a crash continues it too;
//   - the NATS publish (natsbus) as its child, and the hub's processing of
//     the agent's events as children of the agent's publishes.
//
// Without a provider, or for a workload whose submit was not sampled, none
// of this makes a span or allocates. The core (hub/scheduler) is never
// traced: the cycle span is opened around it, from here.

// cycleTrace holds the spans of one cycle's traced dispatches; nil when
// nothing in the cycle is traced.
type cycleTrace struct {
	cycle trace.Span
	spans map[string]trace.Span // by workload id
}

// startCycleTrace opens the cycle span and a dispatch span for each traced
// workload the plan dispatches.
func (l *Loop) startCycleTrace(start time.Time, plan *scheduler.Plan, b *built, term int64) *cycleTrace {
	if l.tp == nil || len(plan.Dispatches) == 0 {
		return nil
	}
	var (
		links   []trace.Link
		parents map[string]trace.SpanContext
	)
	for _, d := range plan.Dispatches {
		w := b.byID[d.WorkloadID]
		if w == nil {
			continue
		}
		sc, ok := telemetry.ParseTraceParent(w.doc().GetTraceParent())
		if !ok || !sc.IsSampled() {
			continue
		}
		if parents == nil {
			parents = map[string]trace.SpanContext{}
		}
		parents[d.WorkloadID] = sc
		links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("meridian.workload.id", d.WorkloadID)}})
	}
	if len(links) == 0 {
		return nil
	}
	ctx, cycle := l.tp.Tracer(telemetry.Scope).Start(context.Background(), "meridian.schedule.cycle",
		trace.WithNewRoot(), trace.WithTimestamp(start), trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.Int("meridian.cycle.pending", len(b.snap.Pending)),
			attribute.Int("meridian.cycle.planned_dispatches", len(plan.Dispatches)),
			attribute.Int("meridian.cycle.planned_preemptions", len(plan.Preemptions)),
			attribute.Int64("meridian.leader.term", term),
		))
	ct := &cycleTrace{cycle: cycle, spans: make(map[string]trace.Span, len(parents))}
	for id, sc := range parents {
		_, sp := telemetry.StartFrom(ctx, l.tp, sc, "meridian.dispatch", trace.WithTimestamp(start),
			trace.WithLinks(trace.Link{SpanContext: cycle.SpanContext()}),
			trace.WithAttributes(attribute.String("meridian.workload.id", id)))
		ct.spans[id] = sp
	}
	return ct
}

// traceParent is what the dispatch record of workloadID stores: its
// dispatch span's traceparent, or "".
func (ct *cycleTrace) traceParent(workloadID string) string {
	if ct == nil {
		return ""
	}
	sp, ok := ct.spans[workloadID]
	if !ok {
		return ""
	}
	return telemetry.TraceParent(sp.SpanContext())
}

// describe records the dispatch of workloadID on its span.
func (ct *cycleTrace) describe(r *Record) {
	if ct == nil {
		return
	}
	if sp, ok := ct.spans[r.WorkloadID]; ok {
		sp.SetAttributes(attribute.String("meridian.dispatch.id", r.DispatchID), attribute.String("meridian.cluster", r.Cluster),
			attribute.String("meridian.queue", r.Queue), attribute.Int("meridian.dispatch.attempt", int(r.Attempt)))
	}
}

// end closes the spans: a dispatch not in committed lost its commit (a
// conflict; the next cycle tries again).
func (ct *cycleTrace) end(committed map[string]bool, err error) {
	if ct == nil {
		return
	}
	n := 0
	for id, sp := range ct.spans {
		if committed[id] {
			n++
		} else {
			sp.SetAttributes(attribute.Bool("meridian.dispatch.committed", false))
			telemetry.Fail(sp, errNotCommitted)
		}
		sp.End()
	}
	ct.cycle.SetAttributes(attribute.Int("meridian.cycle.traced_dispatches", n))
	telemetry.Fail(ct.cycle, err)
	ct.cycle.End()
}

type notCommitted struct{}

func (notCommitted) Error() string {
	return "dispatch not committed (conflict or leadership lost); the next cycle decides again"
}

var errNotCommitted error = notCommitted{}

// recordTrace is the span context a publish of r continues.
func (l *Loop) recordTrace(r *Record) trace.SpanContext {
	if l.tp == nil || r.TraceParent == "" {
		return trace.SpanContext{}
	}
	sc, _ := telemetry.ParseTraceParent(r.TraceParent)
	return sc
}

// startEventSpan opens the span of the hub's processing of one agent
// event, a child of parent (the agent's publish, from the message headers,
// or the event's own trace_parent in a batch); it does not record when
// the event carries no sampled trace or tracing is off.
func (l *Loop) startEventSpan(parent trace.SpanContext, subject string, e *batchEvent) {
	if l.tp == nil {
		return
	}
	_, e.span = telemetry.StartFrom(context.Background(), l.tp, parent, "process "+subject, trace.WithSpanKind(trace.SpanKindConsumer))
	if e.span.IsRecording() {
		e.span.SetAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", subject), attribute.String("meridian.cluster", e.cluster),
			attribute.String("meridian.dispatch.id", e.ev.GetDispatchId()), attribute.String("meridian.workload.id", e.ev.GetWorkloadId()),
			attribute.String("meridian.event.type", e.ev.GetType().String()))
	}
}

// endEventSpans closes the events' spans.
func endEventSpans(evs []batchEvent) {
	for _, e := range evs {
		if e.span != nil {
			e.span.End()
		}
	}
}
