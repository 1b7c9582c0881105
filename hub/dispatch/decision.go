package dispatch

import (
	"github.com/meridian-gpu/meridian/hub/scheduler"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// placementOf turns the core's decision record into the status field the
// dispatch commit writes with the workload, in the same transaction as the
// dispatch record: at most three clusters and one sentence, a few hundred
// bytes. It stays on the workload as history after the record is deleted,
// so Explain can show it for running and finished work. nil when the core
// recorded nothing.
func placementOf(d scheduler.Decision) *meridianv1.PlacementDecision {
	if d.N == 0 {
		return nil
	}
	pd := &meridianv1.PlacementDecision{Rule: clip(d.Text(), 400), Clusters: make([]*meridianv1.ClusterScore, d.N)}
	// One allocation for the compared clusters, not one each: every
	// dispatch makes these.
	scores := make([]meridianv1.ClusterScore, d.N)
	for i, c := range d.Clusters[:d.N] {
		s := &scores[i]
		s.Cluster, s.Score, s.Detail, s.Chosen = c.Cluster, c.Score(), clip(c.Detail(), 160), c.Chosen
		pd.Clusters[i] = s
	}
	return pd
}

// explainPlacement copies a dispatched workload's placement decision into
// an Explain answer.
func explainPlacement(w *meridianv1.Workload, resp *meridianv1.ExplainWorkloadResponse) {
	pd := w.GetStatus().GetPlacement()
	if pd == nil {
		return
	}
	resp.Placement, resp.PlacementRule = pd.GetClusters(), pd.GetRule()
}
