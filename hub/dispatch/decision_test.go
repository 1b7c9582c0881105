package dispatch

import (
	"fmt"
	"strings"
	"testing"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// The dispatch stores why its cluster won, in the same write, and Explain
// shows it for dispatched, running and finished work.
func TestExplainShowsPlacementDecision(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 64)
	e.startAgent("east", 2, 8, 0) // 16 GPUs
	e.startAgent("west", 1, 8, 0) // 8 GPUs: the tighter fit for 4
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.waitKnown(h, "east", "west")

	e.submit(gpuWorkload("w4", "acme/ml/train", 4))
	e.waitRunningOn("w4", "west", 10*time.Second)
	w, _ := e.workload("w4")
	pd := w.GetStatus().GetPlacement()
	if pd == nil || len(pd.GetClusters()) != 2 || pd.GetClusters()[0].GetCluster() != "west" || !pd.GetClusters()[0].GetChosen() {
		t.Fatalf("stored placement = %v, want west chosen over east", pd)
	}
	if want := "tightest fit: leaves 4 GPUs free on west vs 12 GPUs on east"; pd.GetRule() != want {
		t.Fatalf("rule = %q, want %q", pd.GetRule(), want)
	}
	if n := len(pd.String()); n > 400 {
		t.Fatalf("placement decision is %d bytes; keep it a few hundred", n)
	}
	ex, err := h.loop.Explain(e.ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if ex.GetPlacementRule() != pd.GetRule() || len(ex.GetPlacement()) != 2 || ex.GetPlacement()[1].GetScore() != 12 {
		t.Fatalf("explain placement = %v / %q", ex.GetPlacement(), ex.GetPlacementRule())
	}
}

// Cross-cluster preemption through the loop: the high-priority workload
// preempts on the cluster needing the fewest victims (west: 2 jobs of 4
// GPUs, not east's 8 jobs of 1 GPU) and runs there; east is untouched.
func TestPreemptionPicksClusterWithFewestVictims(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 64) // capacity binds, not quota
	e.startAgent("east", 1, 8, 0)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.waitKnown(h, "east")
	var east, west []string
	for i := 0; i < 8; i++ {
		w := gpuWorkload(fmt.Sprintf("small%d", i), "acme/ml/train", 1)
		w.Preemptible = true
		e.submit(w)
		east = append(east, w.Id)
	}
	for _, id := range east {
		e.waitRunningOn(id, "east", 10*time.Second)
	}
	e.startAgent("west", 1, 8, 0)
	e.waitKnown(h, "west")
	for i := 0; i < 2; i++ {
		w := gpuWorkload(fmt.Sprintf("half%d", i), "acme/ml/train", 4)
		w.Preemptible = true
		e.submit(w)
		west = append(west, w.Id)
	}
	for _, id := range west {
		e.waitRunningOn(id, "west", 10*time.Second)
	}

	high := gpuWorkload("high", "acme/ml/train", 8)
	high.Priority = 100
	e.submit(high)
	e.waitRunningOn("high", "west", 15*time.Second)
	for _, id := range east {
		if w, _ := e.workload(id); w.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING {
			t.Fatalf("%s on east is %v; east needed 8 victims and must be left alone: %v", id, w.GetStatus().GetPhase(), w.GetStatus())
		}
	}
	for _, id := range west {
		if w, _ := e.workload(id); w.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
			t.Fatalf("%s on west is %v, want requeued by the preemption", id, w.GetStatus().GetPhase())
		}
	}
	w, _ := e.workload("high")
	if rule := w.GetStatus().GetPlacement().GetRule(); !strings.HasPrefix(rule, "nominated after preemption: takes the room its preemptions freed on west") {
		t.Fatalf("high's placement rule = %q", rule)
	}
}
