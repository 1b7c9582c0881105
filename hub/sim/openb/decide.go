package openb

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// The decide pipeline sends every arriving pod through the hub's own
// decision path, scheduler.Decide, with the hub's default configuration:
// its candidate selection (best-fit buckets, NodeCandidates), its exact-fit
// shortcut, its cluster order and its tie-breaking (the lowest node index
// of the snapshot). Each pod is one scheduling cycle with one pending
// workload, on a snapshot of the replay's current node state.
//
// Node order. The reference simulator names node i "%04d-<name>" with a
// seeded rank, so a cluster listing its nodes by name lists them in rank
// order; the snapshot does the same, which makes the hub's "lowest index
// wins a tie" the reference's "smallest name wins".
//
// Classes. A hub pod set names one accelerator class or any. A pod whose
// gpu_spec allows one model asks for it; one that allows several sees a
// snapshot holding only the nodes of those models (the hub cannot express
// "any of these", so the replay narrows what the cluster shows instead).

// DefaultHistoryHalfLife is the decide replay's half-life of the shape
// history, in arrivals: chosen on seeds 42-51 (docs/benchmarks.md).
const DefaultHistoryHalfLife = 2000

// replayOrigin is the decide replay's clock at arrival 0; arrival k happens
// k seconds later.
var replayOrigin = time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)

type decideChooser struct {
	cfg        scheduler.Config
	fgdLearned bool
	hist       *scheduler.ShapeHistory
	whole      gpufit.TargetWorkload
	state      []gpufit.Node
	groups     [][]int // per cluster, node indexes in rank order
	names      []string
	byName     map[string]int
	snap       scheduler.Snapshot
	classes    map[string][]int // cached narrowed index lists by gpu_spec
}

func newDecideChooser(cfg Config, pods []Pod, sorted []NodeSpec, state []gpufit.Node, rank []int, clusterOf []int) (chooser, error) {
	target := cfg.Target
	if target == "" {
		target = TargetHistory
	}
	if target != TargetHistory && target != TargetWhole && target != TargetPending {
		return nil, fmt.Errorf("openb: target: unknown %q (want %s, %s or %s)", cfg.Target, TargetHistory, TargetWhole, TargetPending)
	}
	d := &decideChooser{state: state, byName: map[string]int{}, classes: map[string][]int{}}
	d.cfg = scheduler.DefaultConfig()
	if cfg.Decide != nil {
		cfg.Decide(&d.cfg)
	}
	switch cfg.Policy {
	case PolicyBestFit:
		d.cfg.Policy = scheduler.PolicyBestFit
	case PolicyFGD:
		// FGD as the reference defines it: the typical shapes of the
		// whole pod list (look-ahead included), unless FGDLearned asks
		// for the target a live hub could have (the same history as the
		// meridian policy's).
		d.cfg.Scorer = gpufit.FGD(Target(pods, cfg.Popularity))
		if cfg.FGDLearned {
			d.fgdLearned = true
			d.hist = scheduler.NewShapeHistory(time.Duration(halfLife(cfg))*time.Second, 0)
		}
	case PolicyMeridian:
		d.cfg.Policy = scheduler.PolicyMeridian
		switch target {
		case TargetWhole:
			d.whole = Target(pods, cfg.Popularity)
			d.cfg.Target = &d.whole
		case TargetHistory:
			d.hist = scheduler.NewShapeHistory(time.Duration(halfLife(cfg))*time.Second, 0)
		}
	default:
		return nil, fmt.Errorf("openb: pipeline decide: policy %q is not available (want %s, %s or %s)", cfg.Policy, PolicyBestFit, PolicyFGD, PolicyMeridian)
	}

	// One queue with room for everything: quota never decides here.
	var capMilli int64
	models := map[string]bool{}
	for i := range state {
		capMilli += int64(len(state[i].GPUs)) * gpufit.MilliPerGPU
		models[state[i].Class] = true
	}
	limits := map[string]quota.Limits{}
	for m := range models {
		limits[m] = quota.Limits{Nominal: 4 * capMilli, BorrowLimit: -1, LendLimit: -1}
	}
	tree, err := quota.NewTree([]quota.QueueSpec{{Path: "openb", Weight: 1}, {Path: "openb/pods", Weight: 1, Limits: limits}})
	if err != nil {
		return nil, err
	}

	nc := 0
	for _, c := range clusterOf {
		nc = max(nc, c+1)
	}
	d.groups = make([][]int, nc)
	for i := range sorted {
		d.groups[clusterOf[i]] = append(d.groups[clusterOf[i]], i)
		d.names = append(d.names, sorted[i].Name)
		d.byName[sorted[i].Name] = i
	}
	for _, g := range d.groups {
		sort.Slice(g, func(a, b int) bool { return rank[g[a]] < rank[g[b]] })
	}
	d.snap = scheduler.Snapshot{Queues: tree, Clusters: make([]scheduler.Cluster, nc)}
	for c := range d.snap.Clusters {
		d.snap.Clusters[c] = scheduler.Cluster{ID: fmt.Sprintf("openb-%d", c), Modes: scheduler.FracModes(scheduler.FracMPS | scheduler.FracTimeSlice)}
	}
	return d.choose, nil
}

// nodesFor is the snapshot's node list of cluster c for a pod: every node,
// or only those of the pod's models when it allows several.
func (d *decideChooser) nodesFor(c int, p *Pod) []int {
	if len(p.Classes) < 2 || p.Req.GPUs == 0 {
		return d.groups[c]
	}
	key := fmt.Sprintf("%d/%v", c, p.Classes)
	if idx, ok := d.classes[key]; ok {
		return idx
	}
	var idx []int
	for _, i := range d.groups[c] {
		if slices.Contains(p.Classes, d.state[i].Class) {
			idx = append(idx, i)
		}
	}
	d.classes[key] = idx
	return idx
}

func (d *decideChooser) choose(k int, p *Pod) (int, []int) {
	now := replayOrigin.Add(time.Duration(k) * time.Second)
	w := &scheduler.Workload{ID: p.Name, Queue: "openb/pods", Preemptible: true, CreatedAt: now,
		PodSets: []scheduler.PodSet{{Name: "main", Replicas: 1, Req: p.Req}}}
	if len(p.Classes) == 1 && p.Req.GPUs > 0 {
		w.PodSets[0].Class = p.Classes[0]
	}
	if d.hist != nil {
		// Past arrivals and this one (it is submitted, so the hub has
		// seen it): never a pod that has not arrived yet. The shape
		// carries every model the pod allows, as the narrowed snapshot
		// does, so the target knows the constraint the workload cannot
		// state.
		sh := gpufit.Shape{CPUMilli: p.Req.CPUMilli, GPUs: p.Req.GPUs, MemMiB: p.Req.MemMiB}
		if p.Req.GPUs > 0 {
			sh.Milli, sh.Classes = p.Req.Milli, p.Classes
		}
		d.hist.ObserveShape(now, sh, 1)
		t := d.hist.Target()
		if d.fgdLearned {
			d.cfg.Scorer = gpufit.FGD(t)
		} else {
			d.cfg.Target = &t
		}
	}
	d.snap.Now = now
	for c := range d.snap.Clusters {
		idx := d.nodesFor(c, p)
		cl := &d.snap.Clusters[c]
		cl.LastSeen = now
		cl.Nodes = cl.Nodes[:0]
		for _, i := range idx {
			cl.Nodes = append(cl.Nodes, scheduler.Node{Name: d.names[i], Res: d.state[i]})
		}
	}
	d.snap.Pending = []*scheduler.Workload{w}
	plan := scheduler.Decide(&d.snap, d.cfg)
	if len(plan.Dispatches) != 1 {
		if debugDecide != nil {
			for c := range d.snap.Clusters {
				for _, n := range d.snap.Clusters[c].Nodes {
					if gpufit.Fits(&n.Res, &p.Req) && classAllowed(p.Classes, n.Res.Class, &p.Req) {
						debugDecide(k, p, n, plan)
						break
					}
				}
			}
		}
		return -1, nil
	}
	rep := plan.Dispatches[0].Placement[0].Replicas[0]
	i, ok := d.byName[rep.Node]
	if !ok {
		return -1, nil
	}
	return i, rep.GPUs
}

var debugDecide func(k int, p *Pod, n scheduler.Node, plan *scheduler.Plan)

// halfLife is the history's half-life in arrivals.
func halfLife(cfg Config) int {
	if cfg.HistoryHalfLife > 0 {
		return cfg.HistoryHalfLife
	}
	return DefaultHistoryHalfLife
}
