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
	pd := &meridianv1.PlacementDecision{Rule: clip(d.Text(), 400)}
	for _, c := range d.Clusters[:d.N] {
		pd.Clusters = append(pd.Clusters, &meridianv1.ClusterScore{Cluster: c.Cluster, Score: c.Score(), Detail: clip(c.Detail(), 160), Chosen: c.Chosen})
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
