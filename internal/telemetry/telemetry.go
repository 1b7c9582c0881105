package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope name of every Meridian span.
const Scope = "github.com/meridian-gpu/meridian"

// Propagator is the W3C trace context propagator (traceparent and
// tracestate) Meridian uses on every hop.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Options configures Setup.
type Options struct {
	// ServiceName is service.name unless OTEL_SERVICE_NAME sets it.
	ServiceName string
	// Version is service.version.
	Version string
	// Getenv looks up a variable; nil means os.Getenv.
	Getenv func(string) string
	// Exporter, when set, replaces the OTLP exporter (tests, benchmarks)
	// and turns tracing on whatever OTEL_TRACES_EXPORTER says.
	Exporter sdktrace.SpanExporter
	// Sampler, when set, replaces the one OTEL_TRACES_SAMPLER names.
	Sampler sdktrace.Sampler
	// Processor, when set, wraps the exporter instead of the default batch
	// span processor (tests use a synchronous one).
	Processor func(sdktrace.SpanExporter) sdktrace.SpanProcessor
}

// Tracing is what Setup made. The zero value and nil are "off".
type Tracing struct {
	sdk *sdktrace.TracerProvider
}

// TracerProvider is the provider to hand to components, nil when off.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil || t.sdk == nil {
		return nil
	}
	return t.sdk
}

// Enabled reports whether tracing is on.
func (t *Tracing) Enabled() bool { return t != nil && t.sdk != nil }

// ForceFlush exports every finished span now.
func (t *Tracing) ForceFlush(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	return t.sdk.ForceFlush(ctx)
}

// Shutdown flushes and stops the exporter. It is safe on nil and off.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	return t.sdk.Shutdown(ctx)
}

// Setup builds tracing from the standard variables:
//
//	OTEL_SDK_DISABLED=true              tracing off whatever else is set
//	OTEL_TRACES_EXPORTER                "otlp" turns tracing on; unset or "none" leaves it off
//	OTEL_EXPORTER_OTLP_TRACES_PROTOCOL  "grpc" or "http/protobuf" (the default),
//	  or OTEL_EXPORTER_OTLP_PROTOCOL
//	OTEL_EXPORTER_OTLP_TRACES_ENDPOINT  full URL of the traces endpoint, or
//	  OTEL_EXPORTER_OTLP_ENDPOINT       base URL (/v1/traces is appended for HTTP)
//	OTEL_TRACES_SAMPLER                 always_on, always_off, traceidratio,
//	                                    parentbased_always_on (default),
//	                                    parentbased_always_off, parentbased_traceidratio
//	OTEL_TRACES_SAMPLER_ARG             the ratio for the *traceidratio samplers (default 1)
//	OTEL_SERVICE_NAME                   service.name (default Options.ServiceName)
//	OTEL_RESOURCE_ATTRIBUTES            more resource attributes
//
// The exporters also read their other OTEL_EXPORTER_OTLP_* variables
// (headers, timeout, certificates, compression) themselves, and the batch
// processor its OTEL_BSP_* ones.
func Setup(ctx context.Context, o Options) (*Tracing, error) {
	env := o.Getenv
	if env == nil {
		env = os.Getenv
	}
	if strings.EqualFold(strings.TrimSpace(env("OTEL_SDK_DISABLED")), "true") {
		return &Tracing{}, nil
	}
	exp := o.Exporter
	if exp == nil {
		switch v := strings.ToLower(strings.TrimSpace(env("OTEL_TRACES_EXPORTER"))); v {
		case "", "none":
			return &Tracing{}, nil
		case "otlp":
			var err error
			if exp, err = otlpExporter(ctx, env); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER=%q: only \"otlp\" and \"none\" are supported", v)
		}
	}
	sampler := o.Sampler
	if sampler == nil {
		var err error
		if sampler, err = SamplerFromEnv(env); err != nil {
			return nil, err
		}
	}
	name := strings.TrimSpace(env("OTEL_SERVICE_NAME"))
	if name == "" {
		name = o.ServiceName
	}
	if name == "" {
		name = "meridian"
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", name)}
	if o.Version != "" {
		attrs = append(attrs, attribute.String("service.version", o.Version))
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithDetectors(envResource{env}),
		resource.WithAttributes(attrs...), // after the variables: OTEL_SERVICE_NAME already won above
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	var sp sdktrace.SpanProcessor
	if o.Processor != nil {
		sp = o.Processor(exp)
	} else {
		sp = sdktrace.NewBatchSpanProcessor(exp)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sampler),
		sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(sp),
	)
	return &Tracing{sdk: tp}, nil
}

// envResource reads OTEL_RESOURCE_ATTRIBUTES through Options.Getenv.
type envResource struct{ env func(string) string }

func (d envResource) Detect(context.Context) (*resource.Resource, error) {
	v := strings.TrimSpace(d.env("OTEL_RESOURCE_ATTRIBUTES"))
	if v == "" {
		return resource.Empty(), nil
	}
	var attrs []attribute.KeyValue
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%w: OTEL_RESOURCE_ATTRIBUTES: %q is not key=value", resource.ErrPartialResource, kv)
		}
		if u, err := url.QueryUnescape(strings.TrimSpace(val)); err == nil {
			val = u
		}
		attrs = append(attrs, attribute.String(strings.TrimSpace(k), val))
	}
	return resource.NewSchemaless(attrs...), nil
}

func otlpExporter(ctx context.Context, env func(string) string) (sdktrace.SpanExporter, error) {
	proto := strings.TrimSpace(env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if proto == "" {
		proto = strings.TrimSpace(env("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	endpoint := strings.TrimSpace(env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	perSignal := endpoint != ""
	if !perSignal {
		endpoint = strings.TrimSpace(env("OTEL_EXPORTER_OTLP_ENDPOINT"))
	}
	if endpoint != "" {
		if u, err := url.Parse(endpoint); err != nil || u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("telemetry: OTLP endpoint %q: want a URL such as http://collector:4318", endpoint)
		}
	}
	switch proto {
	case "grpc":
		var opts []otlptracegrpc.Option
		if endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("telemetry: OTLP gRPC exporter: %w", err)
		}
		return exp, nil
	case "", "http/protobuf":
		var opts []otlptracehttp.Option
		if endpoint != "" {
			if !perSignal {
				endpoint = strings.TrimSuffix(endpoint, "/") + "/v1/traces"
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("telemetry: OTLP HTTP exporter: %w", err)
		}
		return exp, nil
	default:
		return nil, fmt.Errorf("telemetry: OTLP protocol %q: want grpc or http/protobuf", proto)
	}
}

// SamplerFromEnv is the sampler OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG name. The parent-based samplers decide a root
// span with LinkAware, so a span that only links to sampled traces (the
// scheduling cycle, a shared etcd commit) is kept with them.
func SamplerFromEnv(env func(string) string) (sdktrace.Sampler, error) {
	name := strings.ToLower(strings.TrimSpace(env("OTEL_TRACES_SAMPLER")))
	ratio := 1.0
	if arg := strings.TrimSpace(env("OTEL_TRACES_SAMPLER_ARG")); arg != "" && strings.HasSuffix(name, "traceidratio") {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("telemetry: OTEL_TRACES_SAMPLER_ARG=%q: want a ratio between 0 and 1", arg)
		}
		ratio = r
	}
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(LinkAware(sdktrace.AlwaysSample())), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(LinkAware(sdktrace.NeverSample())), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(LinkAware(sdktrace.TraceIDRatioBased(ratio))), nil
	default:
		return nil, fmt.Errorf("telemetry: OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
	}
}

// LinkAware samples a span that links to at least one sampled span, and
// leaves every other decision to root.
func LinkAware(root sdktrace.Sampler) sdktrace.Sampler { return linkAware{root} }

type linkAware struct{ root sdktrace.Sampler }

func (s linkAware) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	for _, l := range p.Links {
		if l.SpanContext.IsSampled() {
			return sdktrace.SamplingResult{
				Decision:   sdktrace.RecordAndSample,
				Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState(),
			}
		}
	}
	return s.root.ShouldSample(p)
}

func (s linkAware) Description() string { return "LinkAware{" + s.root.Description() + "}" }

// Close flushes and stops tracing within five seconds, logging a failure.
// It is what a main defers.
func (t *Tracing) Close(log *slog.Logger) {
	if !t.Enabled() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil && log != nil {
		log.Warn("flushing traces on exit", "err", err)
	}
}
