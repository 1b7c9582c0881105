package natsbus

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meridian-gpu/meridian/internal/telemetry"
)

// WithTracerProvider turns tracing on for this bus: each publish whose
// caller passes a sampled span context gets a producer span and carries
// it in W3C traceparent/tracestate headers, and each consumed message
// with such headers gets a consumer span whose context the handler
// receives. nil (the default) leaves tracing off: no headers are read or
// written.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) error { o.tp = tp; return nil }
}

// HeaderCarrier adapts NATS message headers to OpenTelemetry propagation.
// nats.Header is case-sensitive (unlike HTTP headers, nothing
// canonicalizes its keys): it writes keys in lower case, as W3C trace
// context asks, and reads them in any case, so a publisher that wrote
// "Traceparent" or "TRACEPARENT" is understood.
type HeaderCarrier nats.Header

// Get returns the first value of key, matched case-insensitively.
func (h HeaderCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Set stores value under the lower-case key, replacing any spelling of it.
func (h HeaderCarrier) Set(key, value string) {
	lk := strings.ToLower(key)
	for k := range h {
		if k != lk && strings.EqualFold(k, key) {
			delete(h, k)
		}
	}
	h[lk] = []string{value}
}

// Keys lists the header keys.
func (h HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// TraceFromHeader is the remote span context carried in h, invalid when h
// carries none.
func TraceFromHeader(h nats.Header) trace.SpanContext {
	if len(h) == 0 {
		return trace.SpanContext{}
	}
	ctx := telemetry.Propagator.Extract(context.Background(), HeaderCarrier(h))
	return trace.SpanContextFromContext(ctx)
}

// injectTrace writes sc into h (made when nil) and returns h.
func injectTrace(h nats.Header, sc trace.SpanContext) nats.Header {
	if h == nil {
		h = nats.Header{}
	}
	telemetry.Propagator.Inject(trace.ContextWithSpanContext(context.Background(), sc), HeaderCarrier(h))
	return h
}

// startSend starts the producer span of one publish, a child of parent,
// and returns it with the headers that carry it. With tracing off or an
// unsampled parent the span does not record, and the headers carry parent
// if it is valid (nil otherwise).
func (b *Bus) startSend(ctx context.Context, parent trace.SpanContext, subj, msgID string) (trace.Span, nats.Header) {
	_, span := telemetry.StartFrom(ctx, b.opts.tp, parent, "send "+subj, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(messagingAttrs(subj, msgID, "send")...)
		return span, injectTrace(nil, span.SpanContext())
	}
	if parent.IsValid() {
		return span, injectTrace(nil, parent)
	}
	return span, nil
}

// startProcess starts the consumer span of one delivery from its headers.
func (b *Bus) startProcess(ctx context.Context, h nats.Header, subj, msgID string, delivered uint64) (context.Context, trace.Span) {
	if b.opts.tp == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	ctx, span := telemetry.StartFrom(ctx, b.opts.tp, TraceFromHeader(h), "process "+subj, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(append(messagingAttrs(subj, msgID, "process"), attribute.Int64("messaging.nats.delivery_count", int64(delivered)))...)
	}
	return ctx, span
}

// StartItemProcess starts the consumer span of one item of a message that
// carries several (a dispatch batch), continuing the item's own trace,
// parent, as the bus continues a single message's from its headers. It
// records nothing without a tracer provider or a sampled parent.
func (b *Bus) StartItemProcess(ctx context.Context, parent trace.SpanContext, subj, itemID string) (context.Context, trace.Span) {
	if b.opts.tp == nil || !parent.IsSampled() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	ctx, span := telemetry.StartFrom(ctx, b.opts.tp, parent, "process "+subj, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(messagingAttrs(subj, itemID, "process")...)
	}
	return ctx, span
}

func messagingAttrs(subj, msgID, op string) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.operation.type", op),
		attribute.String("messaging.destination.name", subj),
		attribute.String("messaging.message.id", msgID),
		attribute.String("meridian.cluster", clusterOf(subj)),
	}
}
