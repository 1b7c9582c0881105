package agentv1

import "fmt"

// PodSetSize is how many replicas of pod set i of d's workload a connector
// launches: the count the hub admitted and charged (PodSetPlacement.replicas;
// len(nodes) from a hub that predates that field), or, with no placement for
// the pod set, its full replica count. The placement is found by pod set
// name, or by position when it names none. An admitted count outside
// min_replicas..replicas is an error naming the field.
func (d *Dispatch) PodSetSize(i int) (int32, error) {
	sets := d.GetWorkload().GetPodSets()
	if i < 0 || i >= len(sets) {
		return 0, fmt.Errorf("workload.pod_sets[%d]: no such pod set", i)
	}
	ps := sets[i]
	var pl *PodSetPlacement
	for _, p := range d.GetPlacement() {
		if p.GetPodSet() == ps.GetName() && p.GetPodSet() != "" {
			pl = p
			break
		}
	}
	if pl == nil && i < len(d.GetPlacement()) && d.GetPlacement()[i].GetPodSet() == "" {
		pl = d.GetPlacement()[i]
	}
	max := ps.GetReplicas()
	min := ps.GetMinReplicas()
	if min <= 0 || min > max {
		min = max
	}
	n := max
	switch {
	case pl == nil:
	case pl.GetReplicas() > 0:
		n = pl.GetReplicas()
	case len(pl.GetNodes()) > 0:
		n = int32(len(pl.GetNodes()))
	}
	if n < min || n > max {
		return 0, fmt.Errorf("placement[%s].replicas: the hub admitted %d replicas, outside min_replicas..replicas (%d..%d)", ps.GetName(), n, min, max)
	}
	return n, nil
}
