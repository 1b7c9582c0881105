package scheduler

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// A clusterFilter rules a cluster in or out for a workload. When it rules the
// cluster out it returns a short participle phrase about that cluster, such
// as "draining" or "with no nvidia-h100 GPUs", that reads after a count ("2
// draining") and, through notEligible, after "not eligible: ".
type clusterFilter struct {
	name string
	fn   func(p *planner, cs *clusterState, w *Workload) (ok bool, why string)
}

// filters run in order; the first that fails names the reason for that cluster.
var filters = []clusterFilter{
	{"state", filterState},
	{"fresh", filterFresh},
	{"avoid", filterAvoid},
	{"selector", filterSelector},
	{"class", filterClass},
	{"fractional", filterFractional},
	{"mig", filterMIG},
	{"node size", filterNodeSize},
}

func filterState(_ *planner, cs *clusterState, _ *Workload) (bool, string) {
	switch cs.src.State {
	case ClusterLost:
		return false, "lost"
	case ClusterDraining:
		return false, "draining"
	}
	return true, ""
}

func filterFresh(p *planner, cs *clusterState, _ *Workload) (bool, string) {
	if p.cfg.StaleAfter > 0 && p.snap.Now.Sub(cs.src.LastSeen) > p.cfg.StaleAfter {
		return false, "stale (no advertisement within " + p.cfg.StaleAfter.String() + ")"
	}
	return true, ""
}

func filterAvoid(_ *planner, cs *clusterState, w *Workload) (bool, string) {
	if slices.Contains(w.AvoidClusters, cs.src.ID) {
		return false, "backing off after it rejected this workload"
	}
	return true, ""
}

func filterSelector(_ *planner, cs *clusterState, w *Workload) (bool, string) {
	for _, k := range sortedKeys(w.ClusterSelector) {
		if cs.src.Labels[k] != w.ClusterSelector[k] {
			return false, fmt.Sprintf("not matching selector %s=%s", k, w.ClusterSelector[k])
		}
	}
	return true, ""
}

func filterClass(_ *planner, cs *clusterState, w *Workload) (bool, string) {
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.Req.GPUs == 0 || ps.Class == "" {
			continue
		}
		if cs.classFor(ps.Class) == nil {
			return false, "with no " + ps.Class + " GPUs"
		}
	}
	return true, ""
}

// filterFractional rules out a cluster that cannot share a GPU the way a
// fractional pod set asks. Only a share of one GPU is fractional: whole GPUs
// with gpu_memory_mib set ask for GPUs with at least that much memory each
// (gpufit.Fits checks it), which needs no sharing mode.
func filterFractional(_ *planner, cs *clusterState, w *Workload) (bool, string) {
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if !ps.Req.Shared() {
			continue
		}
		if !cs.src.Modes.Has(ps.Mode) {
			if ps.Mode == FracAny {
				return false, "not sharing GPUs (no fractional mode)"
			}
			return false, "not serving fractional mode " + ps.Mode.String()
		}
	}
	return true, ""
}

// filterNodeSize rules out a cluster none of whose nodes has as many GPUs
// (of an allowed class) as one replica asks for: it could never host it,
// however empty.
func filterNodeSize(_ *planner, cs *clusterState, w *Workload) (bool, string) {
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.Req.GPUs == 0 {
			continue
		}
		ok := false
		for _, ci := range classesFor(cs, ps) {
			if ci.maxGPUs >= ps.Req.GPUs {
				ok = true
				break
			}
		}
		if !ok {
			return false, fmt.Sprintf("with no node of %d GPUs", ps.Req.GPUs)
		}
	}
	return true, ""
}

// eligible returns the clusters that pass every filter and have enough free
// capacity in total, tightest first; or, when none does, why.
//
// tooFull lists the clusters that passed every filter but lack the total
// capacity, fullest last: they are tried only to explain the wait.
func (p *planner) eligible(w *Workload) (out, tooFull []*clusterState, why string) {
	// The filters read only what a cycle never changes (state, freshness,
	// labels, classes, modes), so their verdict is cached per filter key;
	// only the capacity check runs per workload.
	fk := filterKey(w)
	fe, ok := p.filtered[fk]
	if !ok {
		fe = p.runFilters(w)
		p.filtered[fk] = fe
	}
	if len(fe.pass) == 0 {
		return nil, nil, fe.why
	}
	need := minNeed(w)
	sc := p.scoredBuf[:0]
	for _, cs := range fe.pass {
		slack, fits := capacitySlack(cs, w, need)
		if !fits {
			tooFull = append(tooFull, cs)
			continue
		}
		sc = append(sc, scoredCluster{cs, slack})
	}
	p.scoredBuf = sc
	if len(sc) == 0 {
		sort.SliceStable(tooFull, func(a, b int) bool { return totalFree(tooFull[a]) > totalFree(tooFull[b]) })
		return nil, tooFull, ""
	}
	// Fit quality: the cluster that the gang fills most tightly goes first,
	// which keeps large free blocks elsewhere for large gangs. Ties by id.
	sort.SliceStable(sc, func(a, b int) bool { return sc[a].slack < sc[b].slack })
	out = make([]*clusterState, len(sc))
	for i, s := range sc {
		out[i] = s.cs
	}
	return out, nil, ""
}

type scoredCluster struct {
	cs    *clusterState
	slack int64
}

// filterResult is the cached verdict of the filters for one filter key.
type filterResult struct {
	pass []*clusterState
	why  string // set when pass is empty
}

func (p *planner) runFilters(w *Workload) filterResult {
	var fe filterResult
	whys := map[string]int{}
	for _, cs := range p.clusters {
		ok, why := true, ""
		for _, f := range filters {
			if ok, why = f.fn(p, cs, w); !ok {
				break
			}
		}
		if !ok {
			whys[why]++
			continue
		}
		fe.pass = append(fe.pass, cs)
	}
	if len(fe.pass) == 0 {
		fe.why = noClusterReason(len(p.clusters), whys)
	}
	return fe
}

// filterKey identifies what the filters look at: classes, fractional modes,
// selector and avoided clusters.
func filterKey(w *Workload) string {
	var b strings.Builder
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.Req.GPUs > 0 {
			b.WriteString(ps.Class)
			b.WriteByte('#')
			b.WriteString(strconv.Itoa(int(ps.Req.GPUs)))
			if ps.Req.Shared() {
				b.WriteByte('~')
				b.WriteByte(byte('0' + ps.Mode))
			}
			if !ps.Req.MIG.IsZero() {
				b.WriteByte('@')
				b.WriteString(ps.Req.MIG.String())
			} else if isMIGAuto(ps) {
				b.WriteString("@" + strconv.Itoa(int(ps.Req.Milli)) + "/" + strconv.Itoa(int(ps.Req.GPUMemMiB)))
			}
		}
		b.WriteByte(';')
	}
	writePlacementScope(&b, w)
	return b.String()
}

// writePlacementScope appends what limits a workload's clusters besides its
// shape (selector and avoided clusters); both memo keys end with it.
func writePlacementScope(b *strings.Builder, w *Workload) {
	for _, k := range sortedKeys(w.ClusterSelector) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(w.ClusterSelector[k])
		b.WriteByte(';')
	}
	for _, c := range w.AvoidClusters {
		b.WriteByte('!')
		b.WriteString(c)
	}
}

// minNeed is the GPU milli per class (""= any) a workload needs at its minimum size.
func minNeed(w *Workload) map[string]int64 {
	need := map[string]int64{}
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		n := ps.MinSize()
		if m := int64(n) * ps.Req.TotalMilli(); m > 0 {
			need[ps.Class] += m
		}
	}
	return need
}

// capacitySlack checks total free capacity per class (a cheap necessary
// condition) and returns how much would be left over: smaller is tighter.
func capacitySlack(cs *clusterState, w *Workload, need map[string]int64) (int64, bool) {
	var slack, anyNeed int64
	for class, m := range need {
		if class == "" {
			anyNeed += m
			continue
		}
		ci := cs.classFor(class)
		if ci == nil || ci.freeMilli < m {
			return 0, false
		}
		slack += ci.freeMilli - m
	}
	if anyNeed > 0 {
		var free int64
		for _, ci := range cs.classes {
			free += ci.freeMilli
		}
		if free < anyNeed {
			return 0, false
		}
		slack += free - anyNeed
	}
	return slack, true
}

func noClusterReason(total int, whys map[string]int) string {
	if total == 0 {
		return "no clusters are registered"
	}
	if total == 1 {
		for why := range whys { // the one entry
			return "its only cluster is not eligible: " + notEligible(why)
		}
	}
	parts := make([]string, 0, len(whys))
	for _, why := range sortedKeys(whys) {
		parts = append(parts, fmt.Sprintf("%d %s", whys[why], why))
	}
	return fmt.Sprintf("no eligible cluster among %d: %s", total, strings.Join(parts, ", "))
}

// notEligible turns a filter's phrase into one about a single cluster:
// "with no nvidia-h100 GPUs" becomes "no nvidia-h100 GPUs".
func notEligible(why string) string { return strings.TrimPrefix(why, "with ") }

// noFitReason describes the pod set that did not fit and the closest cluster.
func noFitReason(w *Workload, best fitAttempt, eligible, tried int) string {
	ps := &w.PodSets[best.res.podSet]
	class := ps.Class
	if class == "" {
		class = "any-class"
	}
	var what string
	switch {
	case ps.Req.GPUs == 0:
		what = fmt.Sprintf("room for %s of %s CPU and %d MiB each", replicaCount(best.res.need), milliCPU(ps.Req.CPUMilli), ps.Req.MemMiB)
	case ps.Req.Shared():
		what = fmt.Sprintf("room for %s of %.3g of a %s GPU each", replicaCount(best.res.need), float64(ps.Req.Milli)/1000, class)
	default:
		what = fmt.Sprintf("%d nodes with %d free %s", best.res.need, ps.Req.GPUs, gpuNoun(ps.Req.GPUs, class))
		if best.res.need == 1 {
			what = fmt.Sprintf("a node with %d free %s", ps.Req.GPUs, gpuNoun(ps.Req.GPUs, class))
		}
	}
	where := ""
	if ps.Topology != TopologyCluster {
		where = " in one " + ps.Topology.String()
	}
	if ps.Topology == TopologySameNode {
		what = fmt.Sprintf("a node with room for %s of %d %s", replicaCount(best.res.need), ps.Req.GPUs, gpuNoun(ps.Req.GPUs, class))
		if ps.Req.Shared() {
			what = fmt.Sprintf("a node with room for %s of %.3g of a %s GPU", replicaCount(best.res.need), float64(ps.Req.Milli)/1000, class)
		}
		where = ""
	}
	s := fmt.Sprintf("no cluster has %s%s", what, where)
	if len(w.PodSets) > 1 {
		s += fmt.Sprintf(" (pod set %s)", ps.Name)
	}
	s += fmt.Sprintf("; closest: %s (%d of %d)", best.cluster, best.res.placed, best.res.need)
	if eligible > tried {
		s += fmt.Sprintf("; tried the %d best of %d eligible clusters", tried, eligible)
	}
	return s
}

func replicaCount(n int32) string { return countOf(int64(n), "replica") }

// gpuNoun is "nvidia-h100 GPU" or "nvidia-h100 GPUs", as n asks.
func gpuNoun(n int32, class string) string {
	if n == 1 {
		return class + " GPU"
	}
	return class + " GPUs"
}

func milliCPU(m int64) string {
	if m%1000 == 0 {
		return fmt.Sprintf("%d", m/1000)
	}
	return fmt.Sprintf("%.3g", float64(m)/1000)
}

func totalFree(cs *clusterState) int64 {
	var f int64
	for _, ci := range cs.classes {
		f += ci.freeMilli
	}
	return f
}
