package natsbus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestHeaderCarrierReadsAnyCaseWritesLowerCase(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, key := range []string{"traceparent", "Traceparent", "TRACEPARENT", "TraceParent"} {
		h := nats.Header{key: []string{tp}, "Tracestate": []string{"k=v"}}
		sc := TraceFromHeader(h)
		if !sc.IsValid() || !sc.IsSampled() || !sc.IsRemote() || sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
			t.Fatalf("%s: got %v", key, sc)
		}
		if got := sc.TraceState().Get("k"); got != "v" {
			t.Errorf("%s: tracestate k=%q", key, got)
		}
	}
	h := nats.Header{"Traceparent": []string{"stale"}}
	out := injectTrace(h, TraceFromHeader(nats.Header{"traceparent": []string{tp}}))
	if len(out["traceparent"]) != 1 || out["traceparent"][0] != tp {
		t.Fatalf("written headers %v", out)
	}
	if _, ok := out["Traceparent"]; ok {
		t.Fatalf("a differently cased copy stayed: %v", out)
	}
	if sc := TraceFromHeader(nil); sc.IsValid() {
		t.Fatal("a trace from no headers")
	}
	if sc := TraceFromHeader(nats.Header{"traceparent": []string{"garbage"}}); sc.IsValid() {
		t.Fatal("a trace from a malformed header")
	}
}

// TestTraceCrossesNATS publishes a dispatch and an event with a sampled
// parent over a real JetStream and checks that the consumer's span is the
// child of the producer's, which is the child of the parent; and that
// without a provider no headers are written.
func TestTraceCrossesNATS(t *testing.T) {
	s := newServer(t)
	rec := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(rec))
	b := newBus(t, s, WithTracerProvider(tp))
	ctx := testCtx(t, 20*time.Second)

	pctx, parent := tp.Tracer("test").Start(ctx, "submit")
	parent.End()
	got := make(chan trace.SpanContext, 4)
	h := func(hctx context.Context, d Delivery) error {
		got <- trace.SpanContextFromContext(hctx)
		return nil
	}
	if _, err := b.ConsumeDispatches(ctx, "c1", h); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ConsumeEvents(ctx, h); err != nil {
		t.Fatal(err)
	}
	errs, _ := b.PublishDispatches(ctx, []Dispatch{{Cluster: "c1", MsgID: "d-1", Payload: []byte("x"), Trace: parent.SpanContext()}})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	if _, err := b.PublishEvent(pctx, "c1", "e-1", []byte("y")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case sc := <-got:
			if sc.TraceID() != parent.SpanContext().TraceID() {
				t.Fatalf("handler span in trace %s, want %s", sc.TraceID(), parent.SpanContext().TraceID())
			}
		case <-ctx.Done():
			t.Fatal("no delivery")
		}
	}
	// The consumer spans end after the handler returns: poll.
	deadline := time.Now().Add(10 * time.Second)
	for len(rec.GetSpans()) < 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, sp := range rec.GetSpans() {
		byID[sp.SpanContext.SpanID()] = sp
	}
	var process int
	for _, sp := range byID {
		if sp.SpanKind != trace.SpanKindConsumer {
			continue
		}
		process++
		send, ok := byID[sp.Parent.SpanID()]
		if !ok || send.SpanKind != trace.SpanKindProducer || send.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("%s: parent %v is not a send span under the submit", sp.Name, sp.Parent.SpanID())
		}
	}
	if process != 2 {
		t.Fatalf("%d consumer spans, want 2: %v", process, rec.GetSpans())
	}

	// Off: no provider, no headers even with a sampled caller.
	off := newBus(t, s)
	if _, err := off.PublishDispatch(context.Background(), "c2", "d-2", []byte("x")); err != nil {
		t.Fatal(err)
	}
	st, err := off.JetStream().Stream(ctx, StreamDispatch)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, "meridian.dispatch.c2")
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get("traceparent") != "" {
		t.Fatalf("headers %v without tracing", m.Header)
	}
}
