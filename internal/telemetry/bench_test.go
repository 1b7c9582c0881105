package telemetry

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkStart compares the instrumentation's cost with tracing off
// (no provider: the path every instrumented call takes by default) and on,
// sampled and not, with a discarding exporter.
func BenchmarkStart(b *testing.B) {
	parentOf := func(tp trace.TracerProvider, sampled bool) context.Context {
		if tp == nil {
			return context.Background()
		}
		ctx, _ := tp.Tracer("b").Start(context.Background(), "parent")
		if !sampled {
			ctx = trace.ContextWithSpanContext(context.Background(), sampledSC(false))
		}
		return ctx
	}
	on := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(tracetest.NewNoopExporter())))
	for _, c := range []struct {
		name    string
		tp      trace.TracerProvider
		sampled bool
	}{{"off", nil, false}, {"on-unsampled", on, false}, {"on-sampled", on, true}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := parentOf(c.tp, c.sampled)
			stored := TraceParent(trace.SpanContextFromContext(ctx))
			b.ReportAllocs()
			for b.Loop() {
				_, span := Start(ctx, "child")
				span.End()
				sc, _ := ParseTraceParent(stored)
				_, span = StartFrom(ctx, c.tp, sc, "continued")
				span.End()
			}
		})
	}
}
