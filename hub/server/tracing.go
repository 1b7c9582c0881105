package server

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/meridian-gpu/meridian/internal/telemetry"
)

// Tracing of the API (Config.TracerProvider): the gRPC server and the
// gateway's client get otelgrpc stats handlers and the REST gateway an
// otelhttp handler, so a REST submit is one trace: the HTTP server span,
// the gateway's client call, the gRPC server span (the submit's span, see
// hub/api). Without a provider none of them is installed. Health checks
// are not traced. Metrics stay with Prometheus: the handlers get a no-op
// meter.

func grpcServerTracing(tp trace.TracerProvider) []grpc.ServerOption {
	if tp == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpcOptions(tp)...))}
}

func gatewayClientTracing(tp trace.TracerProvider) []grpc.DialOption {
	if tp == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpcOptions(tp)...))}
}

func otelgrpcOptions(tp trace.TracerProvider) []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(telemetry.Propagator),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool {
			return !strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.Health/")
		}),
	}
}

// restTracing wraps the REST gateway's handler.
func restTracing(tp trace.TracerProvider, h http.Handler) http.Handler {
	if tp == nil {
		return h
	}
	return otelhttp.NewHandler(h, "meridian.rest",
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(telemetry.Propagator),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + routeOf(r.URL.Path) }),
	)
}

// routeOf keeps a span name's cardinality low: the path's first two
// segments ("/v1/workloads/w-123:cancel" is "/v1/workloads").
func routeOf(path string) string {
	parts := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 3)
	if len(parts) > 2 {
		parts = parts[:2]
	}
	if len(parts) == 2 {
		if i := strings.IndexByte(parts[1], ':'); i >= 0 {
			parts[1] = parts[1][:i]
		}
	}
	return "/" + strings.Join(parts, "/")
}
