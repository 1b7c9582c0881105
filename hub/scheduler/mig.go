package scheduler

import (
	"fmt"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// MIG requests.
//
// A cluster's GPUs that advertise MIG profiles are MIG GPUs: they serve only
// MIG requests, one instance of one profile each (gpufit checks the free
// instance count and the GPU's free compute share). A pod set asks for MIG
// in one of two ways:
//
//   - Req.MIG names the profile ("3g.40gb"): only clusters that advertise
//     that profile are eligible, and a replica lands only on a GPU with a
//     free instance of it.
//   - Mode FracMIG without Req.MIG (requests written before profiles could be
//     named): on a cluster with MIG GPUs it is resolved to the smallest
//     profile the cluster advertises that covers Req.Milli and Req.GPUMemMiB
//     (slices of seven, then memory), which is the rule the connectors apply
//     too; a cluster that advertises the MIG mode but no MIG GPU at all
//     (an agent that predates MIG layouts) serves it as a milli share, as
//     before.

// isMIGAuto reports whether ps asks for MIG without naming a profile.
func isMIGAuto(ps *PodSet) bool {
	return ps.Mode == FracMIG && ps.Req.MIG.IsZero() && ps.Req.Shared()
}

// smallestMIG is the smallest profile of cs that covers r, if any.
func (cs *clusterState) smallestMIG(r *gpufit.Request) (gpufit.MIGProfile, bool) {
	for _, p := range cs.mig { // smallest first
		if p.Covers(r.Milli, r.GPUMemMiB) {
			return p, true
		}
	}
	return gpufit.MIGProfile{}, false
}

func (cs *clusterState) hasMIG(p gpufit.MIGProfile) bool {
	for _, q := range cs.mig {
		if q == p {
			return true
		}
	}
	return false
}

// filterMIG rules out a cluster that does not advertise a pod set's MIG
// profile, or, for a profile-less MIG request, has MIG GPUs but no profile
// that covers it. It reads only the advertised layout (not what is free), so
// its verdict holds for the whole cycle.
func filterMIG(_ *planner, cs *clusterState, w *Workload) (bool, string) {
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		switch {
		case !ps.Req.MIG.IsZero():
			if !cs.hasMIG(ps.Req.MIG) {
				return false, "with no MIG " + ps.Req.MIG.String() + " instances"
			}
		case isMIGAuto(ps) && len(cs.mig) > 0:
			if _, ok := cs.smallestMIG(&ps.Req); !ok {
				return false, fmt.Sprintf("with no MIG profile of %d milli and %d MiB", ps.Req.Milli, ps.Req.GPUMemMiB)
			}
		}
	}
	return true, ""
}

// resolveMIG returns w with every profile-less MIG pod set resolved for cs,
// or w itself when there is nothing to resolve. The copy is the core's own:
// the snapshot's workload is never changed.
func resolveMIG(cs *clusterState, w *Workload) *Workload {
	if len(cs.mig) == 0 {
		return w
	}
	var out *Workload
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if !isMIGAuto(ps) {
			continue
		}
		p, ok := cs.smallestMIG(&ps.Req)
		if !ok {
			continue // filterMIG keeps such clusters out; it will not fit
		}
		if out == nil {
			c := *w
			c.PodSets = append([]PodSet(nil), w.PodSets...)
			out = &c
		}
		r := &out.PodSets[i].Req
		r.MIG, r.Milli, r.GPUMemMiB = p, p.Milli(), 0
	}
	if out == nil {
		return w
	}
	return out
}
