package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-gpu/meridian/internal/flowwindow"
	"github.com/meridian-gpu/meridian/internal/protofast"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// DefaultRequestTimeout bounds a unary request whose client set no
// deadline, so a stalled etcd never pins handlers forever.
const DefaultRequestTimeout = 30 * time.Second

// DefaultMaxRequestBytes is the largest request message the hub accepts
// over gRPC and the largest REST body: 2 MiB, comfortably above a workload
// at its validation limits (16 pod sets and a 256 KiB runtime template).
const DefaultMaxRequestBytes = 2 << 20

// Metrics are the API's Prometheus collectors.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	panics   prometheus.Counter
	// submitTxn is how many submits shared each etcd transaction (group
	// commit): near 1 at low rates, larger under load.
	submitTxn prometheus.Histogram
	// stored counts new workloads by who wrote them first: the leader's
	// scheduling loop (intake) or the API's group commit.
	stored *prometheus.CounterVec
}

// NewMetrics creates the collectors and registers them on reg (nil means
// not registered anywhere, for tests).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "meridian", Subsystem: "api", Name: "requests_total",
			Help: "API requests handled, by gRPC method and status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "meridian", Subsystem: "api", Name: "request_duration_seconds",
			Help:    "API request latency by gRPC method (streams: their whole life).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "meridian", Subsystem: "api", Name: "panics_total",
			Help: "Handler panics recovered and answered with Internal.",
		}),
		submitTxn: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "meridian", Subsystem: "api", Name: "submits_per_transaction",
			Help:    "Submits that shared one etcd transaction (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		stored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "meridian", Subsystem: "api", Name: "submitted_workloads_total",
			Help: "New workloads stored, by writer: intake (the leader's scheduling loop, with its decision; already DISPATCHED when placed) or group_commit (the API, QUEUED).",
		}, []string{"writer"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.latency, m.panics, m.submitTxn, m.stored} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("api: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

// ServerOptions returns the gRPC server options every hub uses: a
// receive-size limit (maxRecv bytes; 0 means DefaultMaxRequestBytes), the
// interceptor chains (outermost first: logging and metrics, a default
// deadline for unary calls, then panic recovery) and the protobuf codec of
// internal/protofast (the same wire, decoded and encoded by the generated
// code). m may be nil.
func ServerOptions(log *slog.Logger, m *Metrics, maxRecv int) []grpc.ServerOption {
	if maxRecv <= 0 {
		maxRecv = DefaultMaxRequestBytes
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxRecv),
		grpc.ChainUnaryInterceptor(UnaryObserve(log, m), UnaryDeadline(DefaultRequestTimeout), UnaryRecover(log, m)),
		grpc.ChainStreamInterceptor(StreamObserve(log, m), StreamRecover(log, m)),
		protofast.ServerOption(),
		// Requests run on long-lived workers whose stacks have already
		// grown to the handler's depth, instead of each on a new
		// goroutine that grows its stack by copying (1.5% of the CPU at
		// 2,000 submits/s). When all are busy, gRPC starts a goroutine
		// as before, so a slow request never holds up another.
		grpc.NumStreamWorkers(streamWorkers),
	}, flowwindow.ServerOptions()...) // fixed windows: half the system calls
}

// streamWorkers is how many requests the API serves on reused goroutines
// at once: more than the handful a two-core hub runs at a time, since a
// submit waits for its group commit.
const streamWorkers = 64

// requestSubject names the workload (or other object) a request is about,
// for logs.
func requestSubject(req any) []any {
	switch r := req.(type) {
	case *meridianv1.SubmitWorkloadRequest:
		return []any{"workload_name", r.GetWorkload().GetName(), "queue", r.GetWorkload().GetQueue()}
	case *meridianv1.SubmitWorkloadsRequest:
		if ws := r.GetWorkloads(); len(ws) > 0 {
			return []any{"workloads", len(ws), "queue", ws[0].GetQueue()}
		}
		return nil
	case interface{ GetId() string }:
		return []any{"id", r.GetId()}
	case interface{ GetPath() string }:
		return []any{"path", r.GetPath()}
	case interface{ GetQueue() *meridianv1.Queue }:
		return []any{"path", r.GetQueue().GetPath()}
	}
	return nil
}

func panicErr(log *slog.Logger, m *Metrics, method string, req any, p any) error {
	if m != nil {
		m.panics.Inc()
	}
	args := []any{"method", method, "panic", fmt.Sprint(p), "stack", string(debug.Stack())}
	args = append(args, requestSubject(req)...)
	log.Error("recovered panic in API handler", args...)
	return status.Errorf(codes.Internal, "internal error in %s; the hub logged the details", method)
}

// UnaryDeadline gives a unary request without a deadline one of d.
func UnaryDeadline(d time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if _, ok := ctx.Deadline(); !ok && d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return h(ctx, req)
	}
}

// UnaryRecover turns a panic in a handler into an Internal error and logs
// it with the request's workload id (or name and queue for a submit).
func UnaryRecover(log *slog.Logger, m *Metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				resp, err = nil, panicErr(log, m, info.FullMethod, req, p)
			}
		}()
		return h(ctx, req)
	}
}

// StreamRecover is UnaryRecover for streams.
func StreamRecover(log *slog.Logger, m *Metrics) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = panicErr(log, m, info.FullMethod, nil, p)
			}
		}()
		return h(srv, ss)
	}
}

func observe(log *slog.Logger, m *Metrics, method string, req any, start time.Time, err error) {
	code := status.Code(err)
	if errors.Is(err, context.Canceled) {
		code = codes.Canceled
	}
	d := time.Since(start)
	if m != nil {
		m.requests.WithLabelValues(method, code.String()).Inc()
		m.latency.WithLabelValues(method).Observe(d.Seconds())
	}
	args := []any{"method", method, "code", code.String(), "duration", d}
	args = append(args, requestSubject(req)...)
	switch code {
	case codes.OK, codes.NotFound, codes.Canceled:
		log.Debug("api request", args...)
	case codes.Internal, codes.Unknown, codes.DataLoss, codes.Unavailable:
		log.Error("api request failed", append(args, "err", err)...)
	default:
		log.Info("api request refused", append(args, "err", err)...)
	}
}

// UnaryObserve logs each request with slog and records its metrics.
func UnaryObserve(log *slog.Logger, m *Metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := h(ctx, req)
		observe(log, m, info.FullMethod, req, start, err)
		return resp, err
	}
}

// StreamObserve is UnaryObserve for streams.
func StreamObserve(log *slog.Logger, m *Metrics) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		start := time.Now()
		err := h(srv, ss)
		observe(log, m, info.FullMethod, nil, start, err)
		return err
	}
}

// Register installs the four services on g.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	meridianv1.RegisterWorkloadServiceServer(g, s)
	meridianv1.RegisterQueueServiceServer(g, s)
	meridianv1.RegisterClusterServiceServer(g, s)
	meridianv1.RegisterAdminServiceServer(g, s)
}
