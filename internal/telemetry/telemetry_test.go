package telemetry

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestSetupOffByDefault(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"nothing set":  {},
		"none":         {"OTEL_TRACES_EXPORTER": "none"},
		"sdk disabled": {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"},
	} {
		t.Run(name, func(t *testing.T) {
			tr, err := Setup(context.Background(), Options{ServiceName: "x", Getenv: envOf(env)})
			if err != nil {
				t.Fatal(err)
			}
			if tr.Enabled() || tr.TracerProvider() != nil {
				t.Fatalf("tracing on with %v", env)
			}
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSetupRejectsBadVariables(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"exporter":    {"OTEL_TRACES_EXPORTER": "zipkin"},
		"protocol":    {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
		"endpoint":    {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"},
		"sampler":     {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "sometimes"},
		"sampler arg": {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Setup(context.Background(), Options{Getenv: envOf(env)}); err == nil {
				t.Fatalf("no error for %v", env)
			}
		})
	}
}

func TestSetupOTLPBothProtocols(t *testing.T) {
	for _, proto := range []string{"grpc", "http/protobuf"} {
		tr, err := Setup(context.Background(), Options{ServiceName: "meridian-hub", Getenv: envOf(map[string]string{
			"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": proto,
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
		})})
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		if !tr.Enabled() {
			t.Fatalf("%s: tracing off", proto)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // nothing to flush; do not wait on the closed port
		_ = tr.Shutdown(ctx)
	}
}

func TestServiceNameAndResource(t *testing.T) {
	rec := tracetest.NewInMemoryExporter()
	tr, err := Setup(context.Background(), Options{ServiceName: "meridian-agent", Version: "v9", Exporter: rec,
		Processor: sdktrace.NewSimpleSpanProcessor,
		Getenv:    envOf(map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test,team=a%20b"})})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.TracerProvider().Tracer("t").Start(context.Background(), "s")
	span.End()
	spans := rec.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	got := map[string]string{}
	for _, kv := range spans[0].Resource.Attributes() {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	for k, v := range map[string]string{"service.name": "meridian-agent", "service.version": "v9", "deployment.environment": "test", "team": "a b"} {
		if got[k] != v {
			t.Errorf("resource %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

func sampledSC(sampled bool) trace.SpanContext {
	f := trace.TraceFlags(0)
	if sampled {
		f = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: f, Remote: true})
}

func TestSamplerFromEnv(t *testing.T) {
	root := sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: trace.TraceID{8: 0xff, 9: 0xff, 10: 0xff, 11: 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff}, Name: "x"}
	withLink := root
	withLink.Links = []trace.Link{{SpanContext: sampledSC(true)}}
	unsampledLink := root
	unsampledLink.Links = []trace.Link{{SpanContext: sampledSC(false)}}
	sampledParent := root
	sampledParent.ParentContext = trace.ContextWithRemoteSpanContext(context.Background(), sampledSC(true))
	unsampledParent := root
	unsampledParent.ParentContext = trace.ContextWithRemoteSpanContext(context.Background(), sampledSC(false))

	s, err := SamplerFromEnv(envOf(map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"}))
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		p    sdktrace.SamplingParameters
		want bool
	}{
		"root with a high trace id is not sampled at 10%": {root, false},
		"a root linked to a sampled trace is":             {withLink, true},
		"a root linked to an unsampled trace is not":      {unsampledLink, false},
		"a child of a sampled parent is":                  {sampledParent, true},
		"a child of an unsampled parent is not":           {unsampledParent, false},
	} {
		if got := s.ShouldSample(c.p).Decision == sdktrace.RecordAndSample; got != c.want {
			t.Errorf("%s: sampled=%v", name, got)
		}
	}
	for _, name := range []string{"", "always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off"} {
		if _, err := SamplerFromEnv(envOf(map[string]string{"OTEL_TRACES_SAMPLER": name})); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
}

func TestTraceParentRoundTrip(t *testing.T) {
	for _, sampled := range []bool{true, false} {
		sc := sampledSC(sampled)
		s := TraceParent(sc)
		got, ok := ParseTraceParent(s)
		if !ok || got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || got.IsSampled() != sampled || !got.IsRemote() {
			t.Fatalf("%q -> %v %v", s, got, ok)
		}
	}
	if s := TraceParent(sampledSC(true)); s != "00-01020300000000000000000000000000-0405000000000000-01" {
		t.Fatalf("TraceParent = %q", s)
	}
	for _, bad := range []string{"", "00-0102", "01-01020300000000000000000000000000-0405000000000000-01",
		"00-01020300000000000000000000000000-0405000000000000-0G", "00-00000000000000000000000000000000-0405000000000000-01",
		"00-01020300000000000000000000000000x0405000000000000-01", "00-0102030000000000000000000000000A-0405000000000000-01"} {
		if _, ok := ParseTraceParent(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	if TraceParent(trace.SpanContext{}) != "" {
		t.Fatal("invalid span context has a traceparent")
	}
}

func TestStartWithoutRecordingParentAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, span := Start(ctx, "x")
		span.End()
		_, span = StartFrom(c, nil, sampledSC(true), "y")
		span.End()
		_, span = StartFrom(c, noopProvider{}, sampledSC(false), "z")
		span.End()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations with tracing off", allocs)
	}
}

func TestStartUsesTheParentsProvider(t *testing.T) {
	rec := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(rec))
	ctx, parent := tp.Tracer("t").Start(context.Background(), "parent")
	_, child := Start(ctx, "child")
	child.End()
	parent.End()
	_, cont := StartFrom(context.Background(), tp, parent.SpanContext(), "continued")
	cont.End()
	spans := rec.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans", len(spans))
	}
	for _, s := range spans {
		if s.Name != "parent" && s.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("%s: parent %v", s.Name, s.Parent.SpanID())
		}
	}
}

type noopProvider struct{ trace.TracerProvider }
