package bench

import (
	"context"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/meridian-gpu/meridian/internal/telemetry"
)

// MERIDIAN_BENCH_TRACE=RATIO (e.g. 0.1) runs the dispatch benchmark with
// OpenTelemetry tracing on in the hub and in the agents' process, sampling
// RATIO of the submits (parentbased_traceidratio), both exporting over
// OTLP gRPC to a receiver in the benchmark's process that counts and drops
// the spans. Unset, tracing is off, as in a default deployment.
const traceEnv = "MERIDIAN_BENCH_TRACE"

// benchTraceRatio is the ratio MERIDIAN_BENCH_TRACE asks for.
func benchTraceRatio(b *testing.B) (float64, bool) {
	v := os.Getenv(traceEnv)
	if v == "" {
		return 0, false
	}
	r, err := strconv.ParseFloat(v, 64)
	if err != nil || r < 0 || r > 1 {
		b.Fatalf("%s: %q is not a ratio between 0 and 1", traceEnv, v)
	}
	return r, true
}

// spanSink is an OTLP trace receiver that counts what it is sent.
type spanSink struct {
	collectortrace.UnimplementedTraceServiceServer
	spans atomic.Int64
}

func (s *spanSink) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	var n int64
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
		}
	}
	s.spans.Add(n)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// startSpanSink serves a spanSink on loopback until the benchmark ends and
// returns its endpoint URL.
func startSpanSink(b *testing.B) (string, *spanSink) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	sink := &spanSink{}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, sink)
	go func() { _ = gs.Serve(l) }()
	b.Cleanup(gs.Stop)
	return "http://" + l.Addr().String(), sink
}

// traceEnvFor is the OTEL_* configuration of one traced process.
func traceEnvFor(endpoint string, ratio float64) map[string]string {
	return map[string]string{
		"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
		"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": strconv.FormatFloat(ratio, 'g', -1, 64),
	}
}

// setupTracing turns tracing on for service as env says.
func setupTracing(service string, env map[string]string) (*telemetry.Tracing, error) {
	return telemetry.Setup(context.Background(), telemetry.Options{ServiceName: service, Getenv: func(k string) string { return env[k] }})
}
