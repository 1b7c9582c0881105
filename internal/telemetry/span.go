package telemetry

import (
	"context"
	"encoding/hex"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Start starts a child of the span in ctx with that span's own provider.
// When the span in ctx does not record (tracing is off, or the trace was
// not sampled) it returns ctx and that span unchanged: no span is made and
// nothing is allocated. Set attributes after checking span.IsRecording(),
// so that building them costs nothing either.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(Scope).Start(ctx, name, opts...)
}

// StartFrom continues the sampled trace of parent (a span context stored
// with a record or received in message headers) with tp. Without tp or a
// sampled parent it makes no span and returns ctx with a non-recording
// span, allocating nothing.
func StartFrom(ctx context.Context, tp trace.TracerProvider, parent trace.SpanContext, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if tp == nil || !parent.IsSampled() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return tp.Tracer(Scope).Start(trace.ContextWithRemoteSpanContext(ctx, parent), name, opts...)
}

// Fail marks span as failed with err, if both are set.
func Fail(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// TraceParent is the W3C traceparent header value of sc, or "" when sc is
// not valid.
func TraceParent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	var b [55]byte
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags())})
	return string(b[:])
}

// ParseTraceParent parses a W3C traceparent value (version 00) into a
// remote span context; ok is false when s is empty or malformed.
func ParseTraceParent(s string) (sc trace.SpanContext, ok bool) {
	if len(s) != 55 || s[0:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}, false
	}
	var (
		tid   trace.TraceID
		sid   trace.SpanID
		flags [1]byte
	)
	if !unhexLower(tid[:], s[3:35]) || !unhexLower(sid[:], s[36:52]) || !unhexLower(flags[:], s[53:55]) {
		return trace.SpanContext{}, false
	}
	sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}

// unhexLower decodes lower-case hex (what the W3C format allows) into dst.
func unhexLower(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, ok1 := nibble(s[2*i])
		lo, ok2 := nibble(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func nibble(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
