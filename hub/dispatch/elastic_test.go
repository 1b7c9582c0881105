package dispatch

import (
	"testing"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// An elastic workload larger than its quota is admitted at the size the
// quota allows: the dispatch record charges that size, and the message the
// agent gets says to launch exactly that many replicas.
func TestElasticSizeIsWhatIsChargedAndLaunched(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 3)
	e.startAgent("east", 2, 4, 0)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	w := gpuWorkload("el", "acme/ml/train", 1)
	w.PodSets[0].Replicas, w.PodSets[0].MinReplicas = 8, 2
	e.submit(w)
	var rec *Record
	e.waitFor("the elastic workload to be dispatched", 20*time.Second, func() bool {
		w, _ := e.workload("el")
		if !folded(w) {
			return false
		}
		rec = recordOf(w)
		return true
	})
	if len(rec.Placement) != 1 || len(rec.Placement[0].Replicas) != 3 {
		t.Fatalf("placement %+v, want 3 replicas (the quota's 3 GPUs)", rec.Placement)
	}
	if len(rec.Usage) != 1 || rec.Usage[0].Milli != 3000 {
		t.Fatalf("usage %+v, want 3000 milli charged", rec.Usage)
	}
	if n := len(e.dispatchKeys()); n != 0 {
		t.Fatalf("%d dispatch records stored under their own keys; the dispatch belongs in the workload", n)
	}
	stored, _ := e.workload("el")
	msg := dispatchMsg(stored, rec)
	if got := msg.GetPlacement()[0].GetReplicas(); got != 3 {
		t.Fatalf("dispatch message replicas %d, want 3", got)
	}
	if n, err := msg.PodSetSize(0); err != nil || n != 3 {
		t.Fatalf("PodSetSize = %d, %v; want 3", n, err)
	}
	if stored.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
		t.Fatalf("workload still queued: %v", stored.GetStatus())
	}
}
