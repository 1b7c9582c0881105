package scheduler

import (
	"fmt"
	"sort"
)

// Reservations keep large gangs from starving behind small work.
//
// Capacity frees up a few GPUs at a time, and without a reservation small
// jobs take every hole before a large gang ever fits. So when a gang that its
// queue is owed (it stays within the queue's nominal quota) does not fit, the
// core reserves the nodes it would need in the cluster where it came
// closest: nothing else is placed on them for the rest of the cycle. The
// first gang that fails in fair order (the most deserving queue's) reserves
// too, whether or not it is owed quota, so fairshare reaches large jobs. They
// drain as their work ends, and the gang fits on them. The core keeps no
// state between cycles; the same gang, still first in fair order, makes the
// same reservation again next cycle until it fits.

// maxReservedShare bounds how much of one cluster reservations may hold.
const maxReservedShare = 4 // at most 1/4 of a cluster's nodes

// reserveFor reserves nodes for w in its closest cluster when it is owed its
// quota (or is the first gang of the cycle that failed), and returns the
// pending reason, extended to say so.
func (p *planner) reserveFor(w *Workload, best fitAttempt, reason string) string {
	cs := best.cs
	if cs == nil {
		return reason
	}
	if p.reservedQueues == nil {
		p.reservedQueues = map[string]bool{}
	}
	// A gang the queue is owed reserves; so does the first gang that fails in
	// fair order (the most deserving queue's), owed or not.
	if len(p.reservedQueues) > 0 && !p.withinNominal(cs, w) {
		return reason
	}
	if p.reservedQueues[w.Queue] {
		return reason // one reservation per queue and cycle: its most deserving gang
	}
	var chosen []int32
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.Req.GPUs == 0 {
			continue
		}
		chosen = append(chosen, p.reservationNodes(cs, ps)...)
	}
	if len(chosen) == 0 || cs.reservedCount+len(chosen) > len(cs.nodes)/maxReservedShare+1 {
		return reason
	}
	if cs.reservedBy == nil {
		cs.reservedBy = make([]string, len(cs.nodes))
	}
	for _, i := range chosen {
		cs.reservedBy[i] = w.ID
	}
	cs.reservedCount += len(chosen)
	p.reservedQueues[w.Queue] = true
	return fmt.Sprintf("%s; holding %s on %s for it while they drain", reason, countOf(int64(len(chosen)), "node"), cs.src.ID)
}

// reservationNodes picks the nodes a pod set would need: inside the domain
// with the most free room when it has a topology constraint, the nodes with
// the most free GPU room first, until their GPUs could hold every replica.
func (p *planner) reservationNodes(cs *clusterState, ps *PodSet) []int32 {
	var pool []int32
	switch ps.Topology {
	case TopologyRack, TopologyNVLink:
		var bestFree int64 = -1
		for _, d := range cs.domains(ps.Topology) {
			var free int64
			var nodes []int32
			for _, i := range d.nodes {
				if hostable(cs, i, ps) {
					free += freeMilli(&cs.nodes[i])
					nodes = append(nodes, i)
				}
			}
			if free > bestFree {
				bestFree, pool = free, nodes
			}
		}
	default:
		for i := range cs.nodes {
			if hostable(cs, int32(i), ps) {
				pool = append(pool, int32(i))
			}
		}
	}
	sort.SliceStable(pool, func(a, b int) bool { return freeMilli(&cs.nodes[pool[a]]) > freeMilli(&cs.nodes[pool[b]]) })
	need := int64(ps.Replicas) * ps.Req.TotalMilli()
	if ps.Topology == TopologySameNode && len(pool) > 0 {
		return pool[:1]
	}
	var out []int32
	var room int64
	for _, i := range pool {
		if room >= need {
			break
		}
		out = append(out, i)
		// Whole replicas per node, when empty.
		per := int64(len(cs.nodes[i].GPUs)) / int64(ps.Req.GPUs)
		if ps.Req.Shared() {
			per = int64(len(cs.nodes[i].GPUs)) * int64(1000/ps.Req.Milli)
		}
		room += per * ps.Req.TotalMilli()
	}
	if room < need {
		return nil // the cluster could never hold it: nothing to wait for
	}
	return out
}

// hostable reports whether node i could hold one replica of ps when empty,
// and is not held for someone else.
func hostable(cs *clusterState, i int32, ps *PodSet) bool {
	return classOK(cs, i, ps) && !cs.isReserved(i) && int32(len(cs.nodes[i].GPUs)) >= ps.Req.GPUs
}

// isReserved reports whether node i is held for a gang other than the one
// being placed now.
func (cs *clusterState) isReserved(i int32) bool {
	return cs.reservedBy != nil && cs.reservedBy[i] != "" && cs.reservedBy[i] != cs.placing
}
