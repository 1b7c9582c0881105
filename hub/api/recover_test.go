package api

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

type panicExplainer struct{}

func (panicExplainer) Explain(context.Context, *meridianv1.Workload) (*meridianv1.ExplainWorkloadResponse, error) {
	var m map[string]int
	m["boom"]++ // nil map write: a real runtime panic
	return nil, nil
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestPanicBecomesInternalAndIsCounted(t *testing.T) {
	e := newEnv(t, func(d *Deps) { d.Explainer = panicExplainer{} })
	ctx := testCtx(t)
	tn := tenant(t)
	e.mkQueues(t, tn)
	sub, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(tn)})
	if err != nil {
		t.Fatal(err)
	}
	// The interceptors on their own, with a log and a registry we can read.
	var logs syncBuf
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	svc := e.svc
	h := func(ctx context.Context, req any) (any, error) {
		return svc.ExplainWorkload(ctx, req.(*meridianv1.ExplainWorkloadRequest))
	}
	obs, rec := UnaryObserve(log, m), UnaryRecover(log, m)
	info := &grpcInfo
	_, err = obs(ctx, &meridianv1.ExplainWorkloadRequest{Id: sub.GetWorkload().GetId()}, info, func(ctx context.Context, req any) (any, error) {
		return rec(ctx, req, info, h)
	})
	wantCode(t, err, codes.Internal)
	if !strings.Contains(logs.String(), sub.GetWorkload().GetId()) || !strings.Contains(logs.String(), "recovered panic") {
		t.Fatalf("panic log lacks the workload id: %s", logs.String())
	}
	if got := counterValue(t, m.panics); got != 1 {
		t.Fatalf("panics_total = %v", got)
	}
	if got := counterValue(t, m.requests.WithLabelValues(info.FullMethod, "Internal")); got != 1 {
		t.Fatalf("requests_total{Internal} = %v", got)
	}
	// Through the real server: Internal, and the server keeps serving.
	_, err = e.wl.ExplainWorkload(ctx, &meridianv1.ExplainWorkloadRequest{Id: sub.GetWorkload().GetId()})
	wantCode(t, err, codes.Internal)
	if _, err := e.wl.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: sub.GetWorkload().GetId()}); err != nil {
		t.Fatalf("server did not survive the panic: %v", err)
	}
}

var grpcInfo = grpc.UnaryServerInfo{FullMethod: "/meridian.v1.WorkloadService/ExplainWorkload"}

func counterValue(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func TestUnaryDeadline(t *testing.T) {
	cases := []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		maxLeft time.Duration
	}{
		{"no deadline gets one", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, time.Second},
		{"client deadline kept", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, 50 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := c.ctx()
			defer cancel()
			var left time.Duration
			_, err := UnaryDeadline(time.Second)(ctx, nil, &grpcInfo, func(ctx context.Context, _ any) (any, error) {
				dl, ok := ctx.Deadline()
				if !ok {
					t.Fatal("handler has no deadline")
				}
				left = time.Until(dl)
				return nil, nil
			})
			if err != nil || left <= 0 || left > c.maxLeft {
				t.Fatalf("deadline %s left (max %s), err %v", left, c.maxLeft, err)
			}
		})
	}
}
