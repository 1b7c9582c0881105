package scheduler

import (
	"fmt"
	"strings"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// ClusterExplanation is how a workload stands on one cluster, in sentences
// a person can act on.
type ClusterExplanation struct {
	Cluster string
	// Fits is true when the whole gang has room on the cluster now and
	// nothing else holds it back.
	Fits bool
	// Lines explain the verdict: the first says whether the cluster could
	// take the workload and why not; then one line per pod set says how
	// many of its replicas have room there now, topology applied.
	Lines []string
}

// ExplainCluster explains w on the cluster of s with the given id, as if
// it were the only cluster: the filters that rule it out (phrased for that
// cluster alone), whether it could ever hold w, what Decide would do, and
// how many replicas of each pod set have room there now. It is pure, like
// Decide, and does not change s. An id that s does not hold gives a single
// line that says so.
func ExplainCluster(s *Snapshot, cfg Config, w *Workload, id string) ClusterExplanation {
	ex := ClusterExplanation{Cluster: id}
	var c *Cluster
	for i := range s.Clusters {
		if s.Clusters[i].ID == id {
			c = &s.Clusters[i]
		}
	}
	if c == nil {
		ex.Lines = []string{"not known to the scheduler"}
		return ex
	}
	p := &planner{snap: s, cfg: cfg}
	cs := newClusterState(c, nil)
	for _, f := range filters {
		switch f.name {
		case "class", "fractional", "node size":
			continue // the never-fits check below says it better
		}
		if ok, why := f.fn(p, cs, w); !ok {
			ex.Lines = []string{"not eligible: " + notEligible(why)}
			return ex
		}
	}
	if per, _, _ := newClusterCaps(c).neverOn(w); per != "" {
		ex.Lines = []string{"can never fit here, even when empty: " + per}
		return ex
	}
	for _, f := range filters {
		if ok, why := f.fn(p, cs, w); !ok {
			ex.Lines = []string{"not eligible: " + notEligible(why)}
			return ex
		}
	}

	one := *s
	one.Clusters = []Cluster{*c}
	one.Pending = []*Workload{w}
	plan := Decide(&one, cfg)
	if len(plan.Dispatches) == 1 {
		ex.Fits = true
		ex.Lines = []string{"fits now: the whole gang has room here"}
		return ex
	}
	var pe Pending
	for _, x := range plan.Pending {
		if x.WorkloadID == w.ID {
			pe = x
		}
	}
	switch pe.Code {
	case ReasonQuota:
		ex.Lines = append(ex.Lines, "its queue's quota holds it back: "+pe.Reason)
	case ReasonNeverFits:
		ex.Lines = append(ex.Lines, "its queue's quota could never hold it: "+strings.TrimPrefix(pe.Reason, "can never fit: "))
	case ReasonPreempting:
		ex.Lines = append(ex.Lines, "no room now; it would fit after preemption: "+pe.Reason)
	case ReasonNoFit:
		ex.Lines = append(ex.Lines, "no room now for the whole gang")
	default:
		ex.Lines = append(ex.Lines, "not now: "+pe.Reason)
	}
	ex.Lines = append(ex.Lines, podSetRoom(c, cfg, w)...)
	return ex
}

// podSetRoom says, per pod set, how many replicas have room on c now, each
// pod set on its own with its topology constraint applied.
func podSetRoom(c *Cluster, cfg Config, w *Workload) []string {
	if cfg.Scorer == nil {
		cfg.Scorer = gpufit.BestFit() // the count does not depend on the ranking
	}
	cfg.NodeCandidates = max(cfg.NodeCandidates, 1)
	pl := placer{cfg: &cfg}
	cs := newClusterState(c, nil)
	var lines []string
	allRoom := true
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		t := &txn{cs: cs}
		cs.placing = w.ID
		n := pl.placePodSet(t, ps)
		t.rollbackTo(0)
		if n < ps.MinSize() {
			allRoom = false
		}
		lines = append(lines, podSetLine(ps, n))
	}
	if allRoom && len(w.PodSets) > 1 {
		lines = append(lines, "each pod set has room on its own, but not all of them together")
	}
	return lines
}

// podSetLine is "pod set worker: room for only 3 of the 4 replicas it needs
// in one NVLink domain" and its variants.
func podSetLine(ps *PodSet, placed int32) string {
	where := ""
	if ps.Topology != TopologyCluster {
		where = " in one " + ps.Topology.String()
	}
	need, want := ps.MinSize(), ps.Replicas
	switch {
	case placed >= want && want == 1:
		return fmt.Sprintf("pod set %s: room for its replica now", ps.Name)
	case placed >= want:
		return fmt.Sprintf("pod set %s: room for all %s now%s", ps.Name, replicaCount(want), where)
	case placed >= need:
		return fmt.Sprintf("pod set %s: room for %d of its %s now%s, and it needs at least %d", ps.Name, placed, replicaCount(want), where, need)
	case placed == 0 && need == 1:
		return fmt.Sprintf("pod set %s: no room now for its replica%s", ps.Name, where)
	case placed == 0:
		return fmt.Sprintf("pod set %s: no room now for any of the %s it needs%s", ps.Name, replicaCount(need), where)
	}
	return fmt.Sprintf("pod set %s: room for only %d of the %s it needs%s", ps.Name, placed, replicaCount(need), where)
}
