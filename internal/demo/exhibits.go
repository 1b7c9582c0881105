package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/meridian-gpu/meridian/connectors/simcluster"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// An exhibit is a workload the demo submits after its mix has finished, so
// that a newcomer finds something to explain: a few stay QUEUED, each for
// a different reason, held there by a long-running workload before them.
type exhibit struct {
	w *meridianv1.Workload
	// want is the phase to reach, and code the pending reason code when
	// that phase is QUEUED, before the next exhibit is submitted.
	want meridianv1.WorkloadPhase
	code string
	// why is printed beside the explain command of a waiting exhibit.
	why string
}

// exhibitResult is a submitted exhibit left waiting.
type exhibitResult struct {
	id, name, why string
	phase         meridianv1.WorkloadPhase
	code          string
	// reason is the pending reason the hub gave when the demo looked
	// last, which `meridianctl explain` shows too.
	reason string
}

// exhibits are sized for the simulated federation: us-west's two GB200
// nodes (4 GPUs each), eu-west's 4-GPU A100 nodes, and acme/sandbox's cap
// of 4 L40S. The holds run for a simulated day (24 minutes at the demo's
// time scale), longer than anyone explores.
func exhibits() []exhibit {
	const day = "24h"
	job := func(name, queue string, replicas, milli int32, class, dur string) *meridianv1.Workload {
		return &meridianv1.Workload{
			Name: name, Queue: queue, IdempotencyKey: "demo-exhibit-" + name,
			Labels: map[string]string{simcluster.LabelDuration: dur, "demo-kind": "exhibit"},
			PodSets: []*meridianv1.PodSet{{Name: "main", Replicas: replicas,
				Resources: &meridianv1.Resources{GpuMilli: milli, CpuMilli: 4000, MemoryMib: 16384, AcceleratorClass: class}}},
		}
	}
	running, queued := meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING, meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED
	return []exhibit{
		{w: job("sandbox-hold", "acme/sandbox", 1, 4000, "nvidia-l40s-48gb", day), want: running},
		{w: job("sandbox-more", "acme/sandbox", 1, 2000, "nvidia-l40s-48gb", "5m"), want: queued, code: "QuotaExceeded",
			why: "over quota: acme/sandbox may hold 4 L40S and sandbox-hold has them"},
		{w: job("gb200-hold", "acme/platform", 1, 2000, "nvidia-gb200-192gb", day), want: running},
		{w: job("gb200-pair", "acme/research", 2, 3000, "nvidia-gb200-192gb", "5m"), want: queued, code: "NoFit",
			why: "no fit now: 6 GB200 free, but 4 + 2 on two nodes; it needs 3 + 3"},
		{w: job("a100-eight", "acme/research", 1, 8000, "nvidia-a100-40gb", "5m"), want: queued, code: "NeverFits",
			why: "can never fit: 8 GPUs on one node, A100 nodes have 4"},
	}
}

// leaveExhibits submits the exhibits in order, each once the one before
// reached its phase, and returns those left waiting. An exhibit that does
// not reach its phase within limit is reported on the result, not as an
// error: the demo's run is done by then and should still end well.
func leaveExhibits(ctx context.Context, c client, limit time.Duration) ([]exhibitResult, error) {
	deadline := time.Now().Add(limit)
	var out []exhibitResult
	for _, e := range exhibits() {
		e.w.Preemptible = e.want != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING // holds stay put
		resp, err := c.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: e.w})
		if err != nil {
			return nil, fmt.Errorf("submit exhibit %s: %w", e.w.GetName(), err)
		}
		r := exhibitResult{id: resp.GetWorkload().GetId(), name: e.w.GetName(), why: e.why}
		r.phase, r.code, err = waitPhase(ctx, c, r.id, e.want, e.code, deadline)
		if err != nil {
			return nil, err
		}
		if r.phase != e.want || (e.code != "" && r.code != e.code) {
			r.why = fmt.Sprintf("%s (expected %s %s, is %s %s)", r.why, phaseName(e.want), e.code, phaseName(r.phase), r.code)
		}
		if e.want == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
			got, err := c.wl.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: r.id})
			if err != nil {
				return nil, fmt.Errorf("get exhibit %s: %w", r.name, err)
			}
			r.reason = got.GetStatus().GetPendingReason()
			out = append(out, r)
		}
	}
	return out, nil
}

// waitPhase polls workload id until it is in phase want (with pending
// reason code code, when set) or deadline passes, and returns what it saw
// last.
func waitPhase(ctx context.Context, c client, id string, want meridianv1.WorkloadPhase, code string, deadline time.Time) (meridianv1.WorkloadPhase, string, error) {
	for {
		resp, err := c.wl.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: id})
		if err != nil {
			return 0, "", fmt.Errorf("get %s: %w", id, err)
		}
		st := resp.GetStatus()
		reached := st.GetPhase() == want && (code == "" || st.GetPendingReasonCode() == code)
		// A QUEUED workload's reason is the first cycle's, not yet the
		// scheduler's, until a cycle has seen it.
		settled := !strings.HasPrefix(st.GetPendingReason(), "waiting for the scheduler")
		if (reached && settled) || !time.Now().Before(deadline) {
			return st.GetPhase(), st.GetPendingReasonCode(), nil
		}
		select {
		case <-ctx.Done():
			return 0, "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
