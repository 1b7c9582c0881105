package server

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/internal/telemetry"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// otlpReceiver is an OTLP trace collector in the test process: the
// TraceService over gRPC and POST /v1/traces over HTTP, both on loopback.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []gotSpan
}

// gotSpan is one received span with the service.name of its resource.
type gotSpan struct {
	service string
	span    *tracepb.Span
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.add(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) add(req *collectortrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		svc := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				svc = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans = append(r.spans, gotSpan{service: svc, span: sp})
			}
		}
	}
}

func (r *otlpReceiver) snapshot() []gotSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]gotSpan(nil), r.spans...)
}

// startReceiver serves r over gRPC and HTTP and returns both endpoints.
func startReceiver(t *testing.T, r *otlpReceiver) (grpcURL, httpURL string) {
	t.Helper()
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, r)
	go func() { _ = gs.Serve(gl) }()
	t.Cleanup(gs.Stop)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, err := io.ReadAll(req.Body)
		var m collectortrace.ExportTraceServiceRequest
		if err != nil || req.URL.Path != "/v1/traces" || proto.Unmarshal(b, &m) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		r.add(&m)
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(hl) }()
	t.Cleanup(func() { _ = hs.Close() })
	return "http://" + gl.Addr().String(), "http://" + hl.Addr().String()
}

func tracingFor(t *testing.T, service string, env map[string]string) *telemetry.Tracing {
	t.Helper()
	tr, err := telemetry.Setup(context.Background(), telemetry.Options{ServiceName: service, Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Enabled() {
		t.Fatalf("%s: tracing off with %v", service, env)
	}
	t.Cleanup(func() { tr.Close(nil) })
	return tr
}

// tracedFederation starts an OTLP receiver, a hub and the east agent, both
// tracing into it (the hub sampling everything), the acme queues, and
// waits for east to be READY. It returns the receiver, both tracings, the
// REST base URL and a context that ends with the test.
func tracedFederation(t *testing.T) (*otlpReceiver, *telemetry.Tracing, *telemetry.Tracing, string, context.Context) {
	t.Helper()
	recv := &otlpReceiver{}
	grpcURL, httpURL := startReceiver(t, recv)
	hubTr := tracingFor(t, "meridian-hub", map[string]string{
		"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": grpcURL,
		"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1",
	})
	agentTr := tracingFor(t, "meridian-agent", map[string]string{
		"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT": httpURL,
	})
	s, _ := runHub(t, Config{DataDir: t.TempDir(), HubID: "hub-a", UnsafeNoFsync: true, LeaderTTL: time.Second, Logger: testLogger(),
		TracerProvider: hubTr.TracerProvider()})
	waitReady(t, s)
	base := "http://" + s.Addrs().HTTP
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	stopAgent := startEastAgent(t, ctx, s.NATSURL(), 200*time.Millisecond, natsbus.WithTracerProvider(agentTr.TracerProvider()))
	t.Cleanup(stopAgent)
	createAcmeQueues(t, base)
	waitFor(t, 15*time.Second, "cluster east ready", func() bool {
		code, body := get(t, base+"/v1/clusters/east")
		return code == 200 && strings.Contains(body, "CLUSTER_STATE_READY")
	})
	return recv, hubTr, agentTr, base, ctx
}

// TestOneTracePerWorkload submits one workload through REST to a hub on
// embedded etcd and NATS with a simulated cluster's agent, both tracing to
// an OTLP receiver in this process (the hub over gRPC, the agent over
// HTTP, each with its own service.name), and checks that the workload's
// trace holds the submit, the commit, the dispatch, the NATS hops, the
// agent's consume and launch and the events back, parented back to the
// REST request, and that the scheduling cycle's span links to it.
func TestOneTracePerWorkload(t *testing.T) {
	recv, hubTr, agentTr, base, ctx := tracedFederation(t)
	code, body := post(t, base+"/v1/workloads", `{"queue":"acme/vision","labels":{"meridian.io/sim-duration":"200ms"},
		"podSets":[{"name":"w","replicas":2,"resources":{"gpuMilli":1000,"acceleratorClass":"nvidia-h100-80gb"}}]}`)
	if code != 200 {
		t.Fatalf("submit: %d %s", code, body)
	}
	var sub meridianv1.SubmitWorkloadResponse
	if err := protojson.Unmarshal([]byte(body), &sub); err != nil {
		t.Fatal(err)
	}
	id := sub.GetWorkload().GetId()
	submitSC, ok := telemetry.ParseTraceParent(sub.GetWorkload().GetTraceParent())
	if !ok || !submitSC.IsSampled() {
		t.Fatalf("submit answered trace_parent %q", sub.GetWorkload().GetTraceParent())
	}
	waitFor(t, 20*time.Second, "workload "+id+" SUCCEEDED", func() bool {
		code, body := get(t, base+"/v1/workloads/"+id)
		var w meridianv1.Workload
		return code == 200 && protojson.Unmarshal([]byte(body), &w) == nil && w.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
	})

	traceID := submitSC.TraceID()
	tid := traceID[:]
	// Every stage's span in the workload's trace, by name and service.
	want := []struct{ service, name string }{
		{"meridian-hub", "POST /v1/workloads"},                             // otelhttp, the root
		{"meridian-hub", "meridian.v1.WorkloadService/SubmitWorkload"},     // otelgrpc server (and client) spans
		{"meridian-hub", "meridian.schedule.intake|meridian.store.commit"}, // stored by the loop, or by the API
		{"meridian-hub", "meridian.dispatch"},
		{"meridian-hub", "send meridian.dispatch.east"},
		{"meridian-agent", "process meridian.dispatch.east"},
		{"meridian-agent", "meridian.agent.launch"},
		{"meridian-agent", "send meridian.events.east"},
		{"meridian-hub", "process meridian.events.east"},
	}
	var spans []gotSpan
	missing := func() []string {
		_ = hubTr.ForceFlush(ctx)
		_ = agentTr.ForceFlush(ctx)
		spans = recv.snapshot()
		var out []string
		for _, w := range want {
			found := false
			for _, g := range spans {
				if g.service == w.service && slices.Contains(strings.Split(w.name, "|"), g.span.GetName()) && string(g.span.GetTraceId()) == string(tid) {
					found = true
					break
				}
			}
			if !found {
				out = append(out, w.service+" "+w.name)
			}
		}
		// The hub applies the final event too (the agent's last publish):
		// ACCEPTED and RUNNING (or RUNNING in ACCEPTED's place, when the
		// work ran before the agent published ACCEPTED), then SUCCEEDED.
		if countEvents(spans, tid) < 2 {
			out = append(out, "the hub's processing of the start (ACCEPTED, RUNNING) and of SUCCEEDED")
		}
		return out
	}
	deadline := time.Now().Add(20 * time.Second)
	for m := missing(); len(m) > 0; m = missing() {
		if time.Now().After(deadline) {
			t.Fatalf("the workload's trace lacks %v; received:\n%s", m, describe(spans))
		}
		time.Sleep(100 * time.Millisecond)
	}

	byID := map[string]gotSpan{}
	var root []gotSpan
	for _, g := range spans {
		if string(g.span.GetTraceId()) != string(tid) {
			continue
		}
		byID[string(g.span.GetSpanId())] = g
		if len(g.span.GetParentSpanId()) == 0 {
			root = append(root, g)
		}
	}
	if len(root) != 1 || root[0].span.GetName() != "POST /v1/workloads" || root[0].service != "meridian-hub" {
		t.Fatalf("the trace's roots are %s, want the REST request alone", describe(root))
	}
	// Every span of the trace, the agent's included, reaches the root
	// through its parents, and the stored traceparent is one of them.
	services := map[string]bool{}
	for _, g := range byID {
		services[g.service] = true
		cur, hops := g, 0
		for len(cur.span.GetParentSpanId()) > 0 {
			p, ok := byID[string(cur.span.GetParentSpanId())]
			if !ok || hops > 50 {
				t.Fatalf("%s %q: parent chain breaks at %q", g.service, g.span.GetName(), cur.span.GetName())
			}
			cur, hops = p, hops+1
		}
		if string(cur.span.GetSpanId()) != string(root[0].span.GetSpanId()) {
			t.Fatalf("%s %q does not descend from the root", g.service, g.span.GetName())
		}
	}
	if !services["meridian-hub"] || !services["meridian-agent"] {
		t.Fatalf("services in the trace: %v", services)
	}
	sid := submitSC.SpanID()
	if sp, ok := byID[string(sid[:])]; !ok || !strings.Contains(sp.span.GetName(), "SubmitWorkload") || sp.span.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Fatalf("the stored traceparent names %v, not the gRPC server span of the submit", sp.span.GetName())
	}
	// The agent's consume span is a child of the hub's publish.
	for _, g := range byID {
		if g.span.GetName() == "process meridian.dispatch.east" {
			if p := byID[string(g.span.GetParentSpanId())]; p.span.GetName() != "send meridian.dispatch.east" || p.service != "meridian-hub" {
				t.Fatalf("the agent's consume span's parent is %s %q", p.service, p.span.GetName())
			}
		}
	}
	// The cycle that placed it is a span of its own trace linked to the
	// submit's span, and the dispatch span links back to it.
	var cycle *tracepb.Span
	for _, g := range spans {
		if g.span.GetName() != "meridian.schedule.cycle" {
			continue
		}
		for _, l := range g.span.GetLinks() {
			if string(l.GetTraceId()) == string(tid) && string(l.GetSpanId()) == string(sid[:]) {
				cycle = g.span
			}
		}
	}
	if cycle == nil {
		t.Fatalf("no scheduling cycle span links to the submit; received:\n%s", describe(spans))
	}
	if string(cycle.GetTraceId()) == string(tid) || len(cycle.GetParentSpanId()) != 0 {
		t.Fatal("the cycle span should be a root of its own trace")
	}
	linked := false
	for _, g := range byID {
		if g.span.GetName() == "meridian.dispatch" {
			for _, l := range g.span.GetLinks() {
				linked = linked || string(l.GetSpanId()) == string(cycle.GetSpanId())
			}
			if attr(g.span, "meridian.workload.id") != id || attr(g.span, "meridian.cluster") != "east" {
				t.Errorf("dispatch span attributes %v", g.span.GetAttributes())
			}
		}
	}
	if !linked {
		t.Fatal("the dispatch span does not link to the cycle span")
	}
	// The submit was stored by the leader's loop (its intake span says it
	// was taken; the cycle that stored it links to the submit, as checked
	// above), or by a group commit whose shared etcd transaction links to
	// the submit's commit span.
	for _, g := range spans {
		if g.span.GetName() == "meridian.schedule.intake" && string(g.span.GetTraceId()) == string(tid) && takenAttr(g.span) {
			return
		}
	}
	commitLinked := false
	for _, g := range spans {
		if g.span.GetName() != "meridian.store.group_commit" {
			continue
		}
		for _, l := range g.span.GetLinks() {
			if c, ok := byID[string(l.GetSpanId())]; ok && c.span.GetName() == "meridian.store.commit" {
				commitLinked = true
			}
		}
	}
	if !commitLinked {
		t.Fatal("no group commit span links to the submit's commit span")
	}
}

func countEvents(spans []gotSpan, tid []byte) int {
	n := 0
	for _, g := range spans {
		if g.service == "meridian-hub" && g.span.GetName() == "process meridian.events.east" && string(g.span.GetTraceId()) == string(tid) {
			n++
		}
	}
	return n
}

// takenAttr is the intake span's meridian.intake.taken.
func takenAttr(sp *tracepb.Span) bool {
	for _, kv := range sp.GetAttributes() {
		if kv.GetKey() == "meridian.intake.taken" {
			return kv.GetValue().GetBoolValue()
		}
	}
	return false
}

func attr(sp *tracepb.Span, key string) string {
	for _, kv := range sp.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

func describe(spans []gotSpan) string {
	lines := make([]string, 0, len(spans))
	for _, g := range spans {
		lines = append(lines, fmt.Sprintf("  %s trace=%s span=%s parent=%s %s %q links=%d", g.service,
			hex.EncodeToString(g.span.GetTraceId())[:8], hex.EncodeToString(g.span.GetSpanId())[:8],
			hex.EncodeToString(g.span.GetParentSpanId()), g.span.GetKind(), g.span.GetName(), len(g.span.GetLinks())))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
