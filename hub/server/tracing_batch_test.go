package server

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meridian-gpu/meridian/internal/telemetry"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// TestBatchedDispatchesKeepTheirTraces: workloads stored together are
// dispatched together, in one DispatchBatch message to the agent, and
// each dispatch still lands in its own workload's trace: the agent's
// processing and launch spans descend from the hub's span of that
// workload's dispatch.
func TestBatchedDispatchesKeepTheirTraces(t *testing.T) {
	recv, hubTr, agentTr, base, ctx := tracedFederation(t)

	one := `{"queue":"acme/vision","labels":{"meridian.io/sim-duration":"200ms"},"podSets":[{"name":"w","replicas":1,"resources":{"gpuMilli":1000,"acceleratorClass":"nvidia-h100-80gb"}}]}`
	code, body := post(t, base+"/v1/workloads:batchSubmit", `{"workloads":[`+strings.Repeat(one+",", 3)+one+`]}`)
	if code != 200 {
		t.Fatalf("batch submit: %d %s", code, body)
	}
	var sub meridianv1.SubmitWorkloadsResponse
	if err := protojson.Unmarshal([]byte(body), &sub); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{} // workload id -> trace id
	for _, r := range sub.GetResults() {
		w := r.GetWorkload()
		sc, ok := telemetry.ParseTraceParent(w.GetTraceParent())
		if !ok || !sc.IsSampled() {
			t.Fatalf("workload %s answered trace_parent %q", w.GetId(), w.GetTraceParent())
		}
		tid := sc.TraceID()
		ids[w.GetId()] = string(tid[:])
	}
	if len(ids) != 4 {
		t.Fatalf("%d workloads stored, want 4: %s", len(ids), body)
	}
	for id := range ids {
		waitFor(t, 20*time.Second, "workload "+id+" SUCCEEDED", func() bool {
			code, body := get(t, base+"/v1/workloads/"+id)
			var w meridianv1.Workload
			return code == 200 && protojson.Unmarshal([]byte(body), &w) == nil && w.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
		})
	}

	// Each workload's launch span is in its own trace, under the agent's
	// processing span, under the hub's dispatch span of that workload.
	var spans []gotSpan
	check := func() string {
		_ = hubTr.ForceFlush(ctx)
		_ = agentTr.ForceFlush(ctx)
		spans = recv.snapshot()
		byID := map[string]gotSpan{}
		for _, g := range spans {
			byID[string(g.span.GetSpanId())] = g
		}
		for id, tid := range ids {
			var launch *gotSpan
			for i, g := range spans {
				if g.service == "meridian-agent" && g.span.GetName() == "meridian.agent.launch" && attr(g.span, "meridian.workload.id") == id {
					launch = &spans[i]
				}
			}
			if launch == nil {
				return "no launch span for " + id
			}
			if string(launch.span.GetTraceId()) != tid {
				return "the launch of " + id + " is not in its workload's trace"
			}
			process, ok := byID[string(launch.span.GetParentSpanId())]
			if !ok || process.span.GetName() != "process meridian.dispatch.east" {
				return "the launch of " + id + " has no processing span for a parent"
			}
			dispatch, ok := byID[string(process.span.GetParentSpanId())]
			if !ok || dispatch.service != "meridian-hub" || attr(dispatch.span, "meridian.workload.id") != id {
				return "the processing of " + id + " does not descend from the hub's dispatch of it"
			}
		}
		return ""
	}
	deadline := time.Now().Add(20 * time.Second)
	for m := check(); m != ""; m = check() {
		if time.Now().After(deadline) {
			t.Fatalf("%s; received:\n%s", m, describe(spans))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The four went out in one message: no per-dispatch send span.
	sends := 0
	for _, g := range spans {
		if g.span.GetName() == "send meridian.dispatch.east" {
			sends++
		}
	}
	if sends != 0 {
		t.Fatalf("%d single dispatch messages sent, want none (one batch)", sends)
	}
}
