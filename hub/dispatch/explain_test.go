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
	if w, _ := e.workload("big"); w.GetStatus().GetPendingReasonCode() != "QuotaExceeded" {
		t.Fatalf("stored pending reason code = %q, want QuotaExceeded (reason %q)", w.GetStatus().GetPendingReasonCode(), w.GetStatus().GetPendingReason())
	}

	w, _ := e.workload("big")
	ex, err := h.loop.Explain(e.ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if ex.GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED || !strings.Contains(ex.GetPendingReason(), "quota") || ex.GetQueuePosition() != 1 ||
		ex.GetPendingReasonCode() != "QuotaExceeded" {
		t.Fatalf("explain header = %v / %q (%q) / %d", ex.GetPhase(), ex.GetPendingReason(), ex.GetPendingReasonCode(), ex.GetQueuePosition())
	}
	// 8 GPUs of quota, 6 held by "holder": 2 available, 6 requested.
	if len(ex.GetQuota()) != 1 || ex.GetQuota()[0].GetFits() || ex.GetQuota()[0].GetRequestedMilli() != 6000 || ex.GetQuota()[0].GetAvailableMilli() != 2000 {
		t.Fatalf("quota checks = %v", ex.GetQuota())
	}
	// Each cluster's lines speak of that cluster alone, in sentences.
	want := map[string]string{
		"east": "its queue's quota holds it back: the federation has no idle h100 quota to lend: total usage 6 of 8 GPUs (sum of tenant nominals), 6 more requested | " +
			"pod set main: room for only 1 of the 3 replicas it needs",
		"west": "can never fit here, even when empty: 4 h100 GPUs in all, the workload needs 6 GPUs",
	}
	if len(ex.GetClusters()) != 2 {
		t.Fatalf("cluster lines = %v", ex.GetClusters())
	}
	for _, cf := range ex.GetClusters() {
		all := strings.Join(cf.GetLines(), " | ")
		if cf.GetFits() || all != want[cf.GetCluster()] {
			t.Fatalf("%s: fits=%v lines\n%q\nwant\n%q", cf.GetCluster(), cf.GetFits(), all, want[cf.GetCluster()])
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

// A workload that no cluster could ever hold is stored with the NeverFits
// code and a specific reason, and the loop's FitChecker says so before
// anything is stored.
func TestNeverFitsReasonAndChecker(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 10_000)
	e.startAgent("east", 2, 4, 0)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.waitKnown(h, "east")

	tests := []struct {
		name   string
		w      *meridianv1.Workload
		never  bool
		reason string
	}{
		{"replica larger than any node", gpuWorkload("wide", "acme/ml/train", 8), true,
			"can never fit: the largest node of h100 has 4 GPUs, a replica of pod set main needs 8"},
		{"fits a node", gpuWorkload("narrow", "acme/ml/train", 4), false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fresh := gpuWorkload("", tc.w.GetQueue(), tc.w.GetPodSets()[0].GetResources().GetGpuMilli()/1000)
			reason, never := h.loop.NeverFits(fresh)
			if never != tc.never || reason != tc.reason {
				t.Fatalf("NeverFits = %q, %v; want %q, %v", reason, never, tc.reason, tc.never)
			}
		})
	}
	e.submit(gpuWorkload("wide", "acme/ml/train", 8))
	e.waitFor("the NeverFits code", 5*time.Second, func() bool {
		w, _ := e.workload("wide")
		return w.GetStatus().GetPendingReasonCode() == "NeverFits"
	})
	if w, _ := e.workload("wide"); w.GetStatus().GetPendingReason() != tests[0].reason {
		t.Fatalf("stored reason %q, want %q", w.GetStatus().GetPendingReason(), tests[0].reason)
	}
}
