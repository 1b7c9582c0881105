package dispatch

import (
	"strings"
	"testing"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func TestExplainAndQueueStatus(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 8)
	e.startAgent("east", 1, 8, 0)
	e.startAgent("west", 1, 4, 0)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.waitKnown(h, "east", "west")

	e.submit(gpuWorkload("holder", "acme/ml/train", 6))
	e.waitRunningOn("holder", "east", 10*time.Second)
	big := gpuWorkload("big", "acme/ml/train", 2)
	big.PodSets[0].Replicas = 3
	e.submit(big)
	e.waitFor("big to get a quota reason", 5*time.Second, func() bool {
		w, _ := e.workload("big")
		return strings.Contains(w.GetStatus().GetPendingReason(), "quota")
	})

	w, _ := e.workload("big")
	ex, err := h.loop.Explain(e.ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if ex.GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED || !strings.Contains(ex.GetPendingReason(), "quota") || ex.GetQueuePosition() != 1 {
		t.Fatalf("explain header = %v / %q / %d", ex.GetPhase(), ex.GetPendingReason(), ex.GetQueuePosition())
	}
	// 8 GPUs of quota, 6 held by "holder": 2 available, 6 requested.
	if len(ex.GetQuota()) != 1 || ex.GetQuota()[0].GetFits() || ex.GetQuota()[0].GetRequestedMilli() != 6000 || ex.GetQuota()[0].GetAvailableMilli() != 2000 {
		t.Fatalf("quota checks = %v", ex.GetQuota())
	}
	want := map[string]string{"east": "1 of 3 replicas fit", "west": "2 of 3 replicas fit"}
	if len(ex.GetClusters()) != 2 {
		t.Fatalf("cluster lines = %v", ex.GetClusters())
	}
	for _, cf := range ex.GetClusters() {
		all := strings.Join(cf.GetLines(), " | ")
		if cf.GetFits() || !strings.Contains(all, want[cf.GetCluster()]) {
			t.Fatalf("%s: fits=%v lines %q; want %q", cf.GetCluster(), cf.GetFits(), all, want[cf.GetCluster()])
		}
	}
	// A running workload is explained by its phase, without a reason.
	hw, _ := e.workload("holder")
	if ex, err := h.loop.Explain(e.ctx, hw); err != nil || ex.GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING || len(ex.GetClusters()) != 0 {
		t.Fatalf("explain running = %v, %v", ex, err)
	}

	qs := h.loop.QueueStatus("acme/ml/train")
	if qs == nil || qs.GetRunningWorkloads() != 1 || qs.GetPendingWorkloads() != 1 {
		t.Fatalf("queue status = %v", qs)
	}
	var h100 *meridianv1.ClassUsage
	for _, c := range qs.GetClasses() {
		if c.GetAcceleratorClass() == "h100" {
			h100 = c
		}
	}
	if h100 == nil || h100.GetUsageMilli() != 6000 || h100.GetBorrowedMilli() != 0 || h100.GetLentMilli() != 0 || h100.GetFairshareFactor() <= 0 {
		t.Fatalf("h100 usage = %v", h100)
	}
	// The parent sums its subtree.
	if p := h.loop.QueueStatus("acme"); p == nil || p.GetRunningWorkloads() != 1 || p.GetPendingWorkloads() != 1 {
		t.Fatalf("acme status = %v", p)
	}
}
