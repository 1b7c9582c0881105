package scheduler

import (
	"fmt"
	"sort"
	"strings"

	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// Never fits: a workload that no registered cluster could hold even if it
// were empty, or that needs more than its queue could ever hold, waits with
// ReasonNeverFits instead of a reason that suggests waiting helps ("no idle
// quota to lend", "no cluster has room now").
//
// What "registered" means: every cluster in the snapshot that is not LOST
// (draining and stale clusters count: they may take work again). With no
// such cluster at all the core judges nothing: a hub that has just started
// has not heard its agents yet.
//
// The check is a set of necessary conditions on what a cluster could hold
// when empty (node sizes, GPU memory, fractional modes, topology domains,
// total GPUs per class) and on the queue's ceiling (quota.Tree.Ceiling). It
// never claims "never" for a workload that could fit; it may miss some that
// cannot (CPU and host memory, which clusters advertise only as free, are
// not checked). It runs only on the paths where a workload already failed,
// and what it computes is built once per Plan call and memoised by shape.

// clusterCaps is what one cluster could hold if it were empty.
type clusterCaps struct {
	src     *Cluster
	classes []classCaps // sorted by class
	// domBuilt says whether maxDom (racks [0], NVLink domains [1]) is built.
	domBuilt [2]bool
	// anyDom is the GPUs of the largest rack / NVLink domain, all classes.
	anyDom [2]int64
	gpus   int64 // GPUs in all, every class
}

type classCaps struct {
	class   string
	maxGPUs int32    // GPUs of the largest node
	gpus    int64    // GPUs in the cluster
	maxMem  int32    // the most memory of one GPU, MiB
	maxDom  [2]int64 // GPUs of the largest rack / NVLink domain, once built
}

func newClusterCaps(c *Cluster) *clusterCaps {
	cc := &clusterCaps{src: c}
	at := map[string]int{}
	for i := range c.Nodes {
		n := &c.Nodes[i].Res
		if len(n.GPUs) == 0 {
			continue
		}
		k, ok := at[n.Class]
		if !ok {
			k = len(cc.classes)
			at[n.Class] = k
			cc.classes = append(cc.classes, classCaps{class: n.Class})
		}
		ci := &cc.classes[k]
		g := int32(len(n.GPUs))
		ci.maxGPUs = max(ci.maxGPUs, g)
		ci.gpus += int64(g)
		cc.gpus += int64(g)
		for j := range n.GPUs {
			ci.maxMem = max(ci.maxMem, n.GPUs[j].TotalMemMiB, n.GPUs[j].FreeMemMiB)
		}
	}
	sort.Slice(cc.classes, func(a, b int) bool { return cc.classes[a].class < cc.classes[b].class })
	return cc
}

func (cc *clusterCaps) class(name string) *classCaps {
	i := sort.Search(len(cc.classes), func(i int) bool { return cc.classes[i].class >= name })
	if i < len(cc.classes) && cc.classes[i].class == name {
		return &cc.classes[i]
	}
	return nil
}

// domainGPUs is the GPUs of the largest rack or NVLink domain, of class (""
// for all classes together). Built on first use.
func (cc *clusterCaps) domainGPUs(topo Topology, class string) int64 {
	k := 0
	if topo == TopologyNVLink {
		k = 1
	}
	if !cc.domBuilt[k] {
		cc.domBuilt[k] = true
		type dc struct{ dom, class string }
		sum := map[dc]int64{}
		all := map[string]int64{}
		for i := range cc.src.Nodes {
			n := &cc.src.Nodes[i]
			key := n.Rack
			if k == 1 {
				key = n.NVLink
			}
			if key == "" {
				key = "node:" + n.Name
			}
			g := int64(len(n.Res.GPUs))
			sum[dc{key, n.Res.Class}] += g
			all[key] += g
		}
		for d, g := range sum { // max: the order does not matter
			if ci := cc.class(d.class); ci != nil {
				ci.maxDom[k] = max(ci.maxDom[k], g)
			}
		}
		for _, g := range all {
			cc.anyDom[k] = max(cc.anyDom[k], g)
		}
	}
	if class == "" {
		return cc.anyDom[k]
	}
	if ci := cc.class(class); ci != nil {
		return ci.maxDom[k]
	}
	return 0
}

// neverOn says why w could never run on this cluster, even empty: per is
// the phrase for this cluster alone, all the phrase when every cluster
// says the same. Both are "" when it could. absent is set when the reason
// is that the cluster has no GPUs of that class.
func (cc *clusterCaps) neverOn(w *Workload) (per, all, absent string) {
	need := map[string]int64{}
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.Req.GPUs == 0 {
			continue
		}
		if per, all := cc.neverPodSet(w, ps); per != "" {
			if ps.Class != "" && cc.class(ps.Class) == nil {
				absent = ps.Class
			}
			return per, all, absent
		}
		need[ps.Class] += int64(ps.MinSize()) * ps.Req.TotalMilli()
	}
	for _, class := range sortedKeys(need) {
		have := cc.gpus
		noun := "GPU"
		if class != "" {
			have = cc.class(class).gpus
			noun = class + " GPU"
		}
		if need[class] > have*gpufit.MilliPerGPU {
			what := "the workload needs " + gpuAmount(need[class])
			return fmt.Sprintf("%s in all, %s", countOf(have, noun), what),
				fmt.Sprintf("a cluster has at most %s, %s in one cluster", countOf(have, noun), what), ""
		}
	}
	return "", "", ""
}

// neverPodSet checks one pod set's replica shape and topology.
func (cc *clusterCaps) neverPodSet(w *Workload, ps *PodSet) (per, all string) {
	r := &ps.Req
	of := "" // " of <class>", for the sentences
	var classes []classCaps
	if ps.Class != "" {
		ci := cc.class(ps.Class)
		if ci == nil {
			return "no " + ps.Class + " GPUs", "no registered cluster has " + ps.Class + " GPUs"
		}
		classes = []classCaps{*ci}
		of = " of " + ps.Class
	} else {
		classes = cc.classes
		if len(classes) == 0 {
			return "no GPUs", "no registered cluster has GPUs"
		}
	}
	if r.Shared() && !cc.src.Modes.Has(ps.Mode) {
		if ps.Mode == FracAny {
			return "GPUs are not shared (no fractional mode)", "no registered cluster shares GPUs (fractional mode any)"
		}
		m := ps.Mode.String()
		return "fractional mode " + m + " is not served", "no registered cluster serves fractional mode " + m
	}
	var maxGPUs, maxMem int32
	for i := range classes {
		maxGPUs = max(maxGPUs, classes[i].maxGPUs)
		if classes[i].maxGPUs >= r.GPUs {
			maxMem = max(maxMem, classes[i].maxMem)
		}
	}
	if maxGPUs < r.GPUs {
		s := fmt.Sprintf("the largest node%s has %s, a replica of pod set %s needs %d", of, countOf(int64(maxGPUs), "GPU"), ps.Name, r.GPUs)
		return s, s
	}
	if r.GPUMemMiB > 0 && maxMem < r.GPUMemMiB {
		gpus := "GPUs"
		if ps.Class != "" {
			gpus = ps.Class + " GPUs"
		}
		s := fmt.Sprintf("the %s have at most %d MiB of memory each, pod set %s needs %d MiB per GPU", gpus, maxMem, ps.Name, r.GPUMemMiB)
		return s, s
	}
	want := int64(ps.MinSize()) * r.TotalMilli()
	switch ps.Topology {
	case TopologySameNode:
		if want > int64(maxGPUs)*gpufit.MilliPerGPU {
			s := fmt.Sprintf("the largest node%s has %s, pod set %s needs %s on one node", of, countOf(int64(maxGPUs), "GPU"), ps.Name, gpuAmount(want))
			return s, s
		}
	case TopologyRack, TopologyNVLink:
		if dom := cc.domainGPUs(ps.Topology, ps.Class); want > dom*gpufit.MilliPerGPU {
			t := ps.Topology.String()
			s := fmt.Sprintf("the largest %s%s has %s, pod set %s needs %s in one %s", t, of, countOf(dom, "GPU"), ps.Name, gpuAmount(want), t)
			return s, s
		}
	}
	return "", ""
}

// neverFitsClusters reports whether no registered cluster could ever hold
// w as written. caps lists every cluster of the snapshot.
func neverFitsClusters(caps []*clusterCaps, w *Workload) (string, bool) {
	type group struct {
		per, all, absent string
		ids              []string
	}
	var groups []group
	// Clusters that lack a class the workload names say little; they are
	// summed up after the clusters with a specific reason.
	absent := map[string]int{}
	registered, matching := 0, 0
	for _, cc := range caps {
		if cc.src.State == ClusterLost {
			continue
		}
		registered++
		if !selectorMatches(cc.src, w) {
			continue
		}
		matching++
		per, all, class := cc.neverOn(w)
		switch {
		case per == "":
			return "", false
		case class != "":
			absent[class]++
		}
		found := false
		for i := range groups {
			if groups[i].per == per {
				groups[i].ids = append(groups[i].ids, cc.src.ID)
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, group{per: per, all: all, absent: class, ids: []string{cc.src.ID}})
		}
	}
	switch {
	case registered == 0:
		return "", false
	case matching == 0:
		var sel []string
		for _, k := range sortedKeys(w.ClusterSelector) {
			sel = append(sel, k+"="+w.ClusterSelector[k])
		}
		return "can never fit: no registered cluster matches its cluster selector " + strings.Join(sel, ", "), true
	case len(groups) == 1:
		return "can never fit: " + groups[0].all, true
	}
	var parts []string
	for _, g := range groups {
		if g.absent == "" {
			parts = append(parts, "on "+strings.Join(g.ids, ", ")+", "+g.per)
		}
	}
	if len(absent) > 0 {
		other := "the other clusters have"
		if len(parts) == 0 {
			other = "the clusters have"
		}
		if cls := sortedKeys(absent); len(cls) == 1 {
			parts = append(parts, other+" no "+cls[0]+" GPUs")
		} else {
			parts = append(parts, other+" none of "+strings.Join(cls, ", "))
		}
	}
	return "can never fit: " + strings.Join(parts, "; "), true
}

func selectorMatches(c *Cluster, w *Workload) bool {
	for k, v := range w.ClusterSelector {
		if c.Labels[k] != v {
			return false
		}
	}
	return true
}

// neverFitsQuota reports whether need (milli per class; "" is skipped:
// any-class pod sets are charged to the class they land on) is more than
// queue could ever hold (quota.Tree.Ceiling), whatever the others use.
func neverFitsQuota(tree *quota.Tree, queue string, need map[string]int64) (string, bool) {
	for _, class := range sortedKeys(need) {
		if class == "" {
			continue
		}
		ceil, blocker, ok := tree.Ceiling(queue, class)
		if !ok || need[class] <= ceil {
			continue
		}
		return quotaNeverReason(tree, queue, class, need[class], ceil, blocker), true
	}
	return "", false
}

func quotaNeverReason(tree *quota.Tree, leaf, class string, need, ceil int64, blocker string) string {
	head := fmt.Sprintf("can never fit: needs %s of %s", gpuAmount(need), class)
	lim, _ := tree.Limits(blocker, class)
	limit := func() string {
		if lim.BorrowLimit == quota.Unlimited {
			return "nominal " + quota.GPUs(lim.Nominal) + ", no borrowing limit"
		}
		return "nominal " + quota.GPUs(lim.Nominal) + " + borrowing limit " + quota.GPUs(lim.BorrowLimit)
	}
	less := ""
	if capOf := lim.Nominal + lim.BorrowLimit; blocker != leaf && lim.BorrowLimit != quota.Unlimited && ceil < capOf {
		less = ", less what other queues keep for themselves"
	}
	switch {
	case blocker == leaf && lim.Nominal == 0 && lim.BorrowLimit == 0:
		return fmt.Sprintf("%s but queue %s has no %s quota (nominal 0, borrowing limit 0)", head, leaf, class)
	case blocker == leaf:
		return fmt.Sprintf("%s but queue %s may hold at most %s (%s)", head, leaf, gpuAmount(ceil), limit())
	case blocker == "":
		return fmt.Sprintf("%s but queue %s may hold at most %s (the federation's whole %s quota, the sum of the tenants' nominals, is %s%s)",
			head, leaf, gpuAmount(ceil), class, gpuAmount(lim.Nominal), less)
	}
	return fmt.Sprintf("%s but queue %s may hold at most %s (the limit of %s %s: %s%s)",
		head, leaf, gpuAmount(ceil), levelOf(blocker), blocker, limit(), less)
}

// levelOf names a queue by its depth, as the quota package does.
func levelOf(path string) string {
	switch strings.Count(path, "/") {
	case 0:
		return "tenant"
	case 1:
		return "team"
	}
	return "queue"
}

// clusterCaps returns every cluster's capacity when empty, built on first use.
func (p *planner) clusterCaps() []*clusterCaps {
	if p.caps == nil {
		p.caps = make([]*clusterCaps, len(p.clusters))
		for i, cs := range p.clusters {
			p.caps[i] = newClusterCaps(cs.src)
		}
	}
	return p.caps
}

// neverFits reports whether w can never run as written: no registered
// cluster could hold it, or its queue could never hold what it needs. key
// is w's shapeKey ("" to compute it); the cluster verdict is memoised by it.
func (p *planner) neverFits(w *Workload, key string) (string, bool) {
	if key == "" {
		key = shapeKey(w)
	}
	v, ok := p.never[key]
	if !ok {
		v.reason, v.never = neverFitsClusters(p.clusterCaps(), w)
		if p.never == nil {
			p.never = map[string]neverVerdict{}
		}
		p.never[key] = v
	}
	if v.never {
		return v.reason, true
	}
	return neverFitsQuota(p.tree, w.Queue, minNeed(w))
}

type neverVerdict struct {
	reason string
	never  bool
}

// NeverFits reports whether w can never run as written in the federation
// of s: no registered (non-lost) cluster could hold it even if it were
// empty, or it needs more than its queue could ever hold under the limits
// of s.Queues. The reason says why in plain words. It reads only the
// clusters, their labels, states and node shapes, and the queue tree; it is
// pure, and it does not change s. A snapshot with no registered cluster
// judges nothing (false).
func NeverFits(s *Snapshot, w *Workload) (reason string, never bool) {
	caps := make([]*clusterCaps, len(s.Clusters))
	for i := range s.Clusters {
		caps[i] = newClusterCaps(&s.Clusters[i])
	}
	if r, ok := neverFitsClusters(caps, w); ok {
		return r, true
	}
	if s.Queues == nil {
		return "", false
	}
	return neverFitsQuota(s.Queues, w.Queue, minNeed(w))
}

// countOf is "1 GPU", "2 GPUs": a count with its noun, singular or plural.
func countOf(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// gpuAmount prints milli-GPUs as GPUs: "1 GPU", "24 GPUs", "0.5 GPUs".
func gpuAmount(milli int64) string {
	if milli == gpufit.MilliPerGPU {
		return "1 GPU"
	}
	return quota.GPUs(milli) + " GPUs"
}
