package openb

import (
	"fmt"
	"math/rand"
	"sort"
	"time"

	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// Time-based replay: pods arrive at their creation_time and leave after
// their real duration (deletion_time - creation_time), a few large gangs
// arrive among them, and every arrival or departure runs one cycle of the
// real core (scheduler.Decide) on one cluster. It measures what backfill
// with run-time limits buys: GPU utilisation and how long the gangs wait.

// Estimate says what max_runtime the replayed pods declare.
type Estimate string

const (
	// EstimateNone: no max_runtime, so nothing backfills (the baseline).
	EstimateNone Estimate = "none"
	// EstimateExact: max_runtime is the pod's real duration.
	EstimateExact Estimate = "exact"
	// EstimateNoisy: the real duration times a factor drawn uniformly from
	// [1, 3), as users over-estimate.
	EstimateNoisy Estimate = "noisy"
)

// TimedConfig is one time-based replay.
type TimedConfig struct {
	// Nodes is how many nodes of Model the cluster has (the trace's
	// first ones by name); pods that cannot use Model are left out.
	Nodes int
	Model string
	// Gangs large gangs of GangReplicas x 8 GPUs (one node each) arrive
	// evenly spread over the trace and run for GangDuration, with
	// max_runtime = GangDuration.
	Gangs        int
	GangReplicas int32
	GangDuration time.Duration
	Estimate     Estimate
	Seed         int64
}

// TimedResult is the outcome of a time-based replay.
type TimedResult struct {
	Pods, Gangs int
	// UtilPct is allocated GPU time / (capacity x span) from the first
	// arrival to the last departure, in percent.
	UtilPct float64
	// GangWaits are the gangs' waits (start - arrival), in arrival order;
	// a gang that never started counts until the end of the replay.
	GangWaits   []time.Duration
	GangWaitAvg time.Duration
	PodWaitAvg  time.Duration
	Backfilled  int // dispatches the core marked RuleBackfill
	Cycles      int
	Span        time.Duration
}

type timedWork struct {
	w       *scheduler.Workload
	arrive  time.Time
	runFor  time.Duration
	gang    bool
	started time.Time
}

// ReplayTimed runs the time-based replay. It is pure and deterministic for
// a config.
func ReplayTimed(nodes []NodeSpec, pods []Pod, cfg TimedConfig) (*TimedResult, error) {
	var specs []NodeSpec
	for _, n := range nodes {
		if n.Model == cfg.Model && n.GPUs == 8 {
			specs = append(specs, n)
		}
	}
	sort.Slice(specs, func(a, b int) bool { return specs[a].Name < specs[b].Name })
	if len(specs) < cfg.Nodes || cfg.Nodes <= 0 {
		return nil, fmt.Errorf("openb: timed replay: want %d nodes of %s with 8 GPUs, the list has %d", cfg.Nodes, cfg.Model, len(specs))
	}
	specs = specs[:cfg.Nodes]
	cluster := scheduler.Cluster{ID: "openb"}
	for _, n := range specs {
		node := scheduler.Node{Name: n.Name, Res: gpufit.Node{Class: n.Model, CPUMilliFree: n.CPUMilli, MemMiBFree: n.MemMiB}}
		for g := 0; g < n.GPUs; g++ {
			node.Res.GPUs = append(node.Res.GPUs, gpufit.GPU{FreeMilli: gpufit.MilliPerGPU})
		}
		cluster.Nodes = append(cluster.Nodes, node)
	}
	capMilli := int64(cfg.Nodes) * 8 * gpufit.MilliPerGPU
	origin := time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewSource(cfg.Seed))

	var work []*timedWork
	var first, last int64 = -1, 0
	for _, p := range pods {
		if p.Req.GPUs == 0 || p.Deleted <= p.Created || !classAllowed(p.Classes, cfg.Model, &p.Req) {
			continue
		}
		if first < 0 || p.Created < first {
			first = p.Created
		}
		last = max(last, p.Created)
		dur := time.Duration(p.Deleted-p.Created) * time.Second
		w := &scheduler.Workload{ID: p.Name, Queue: "t/pods", Preemptible: true, CreatedAt: origin.Add(time.Duration(p.Created) * time.Second),
			PodSets: []scheduler.PodSet{{Name: "main", Replicas: 1, Class: cfg.Model, Req: p.Req}}}
		switch cfg.Estimate {
		case EstimateExact:
			w.MaxRuntime = dur
		case EstimateNoisy:
			w.MaxRuntime = time.Duration(float64(dur) * (1 + 2*rng.Float64()))
		}
		work = append(work, &timedWork{w: w, arrive: w.CreatedAt, runFor: dur})
	}
	nPods := len(work)
	for g := 0; g < cfg.Gangs; g++ {
		at := first + (last-first)*int64(g+1)/int64(cfg.Gangs+1)
		w := &scheduler.Workload{ID: fmt.Sprintf("gang-%02d", g), Queue: "t/gangs", CreatedAt: origin.Add(time.Duration(at) * time.Second),
			MaxRuntime: cfg.GangDuration,
			PodSets: []scheduler.PodSet{{Name: "main", Replicas: cfg.GangReplicas, Class: cfg.Model,
				Req: gpufit.Request{CPUMilli: 8000, MemMiB: 32768, GPUs: 8, Milli: gpufit.MilliPerGPU}}}}
		work = append(work, &timedWork{w: w, arrive: w.CreatedAt, runFor: cfg.GangDuration, gang: true})
	}
	sort.SliceStable(work, func(a, b int) bool { return work[a].arrive.Before(work[b].arrive) })

	tree, err := quota.NewTree([]quota.QueueSpec{
		{Path: "t", Weight: 1},
		{Path: "t/pods", Weight: 1, Limits: map[string]quota.Limits{cfg.Model: {Nominal: capMilli, BorrowLimit: -1, LendLimit: -1}}},
		{Path: "t/gangs", Weight: 1, Limits: map[string]quota.Limits{cfg.Model: {Nominal: capMilli, BorrowLimit: -1, LendLimit: -1}}},
	})
	if err != nil {
		return nil, err
	}
	sc := scheduler.DefaultConfig()
	sc.Policy = scheduler.PolicyBestFit

	byID := map[string]*timedWork{}
	for _, tw := range work {
		byID[tw.w.ID] = tw
	}
	type live struct {
		tw  *timedWork
		run scheduler.Running
		end time.Time
	}
	var (
		running []*live
		pending []*scheduler.Workload
		next    int
		res     = &TimedResult{Pods: nPods, Gangs: cfg.Gangs}
		now     = work[0].arrive
		start   = now
		used    int64
		area    float64 // GPU milli x seconds
	)
	nodeIdx := map[string]int{}
	for i := range cluster.Nodes {
		nodeIdx[cluster.Nodes[i].Name] = i
	}
	for next < len(work) || len(running) > 0 {
		// The next event: an arrival or a departure.
		t := time.Time{}
		if next < len(work) {
			t = work[next].arrive
		}
		for _, l := range running {
			if t.IsZero() || l.end.Before(t) {
				t = l.end
			}
		}
		if t.IsZero() {
			break // nothing runs and nothing arrives: the rest can never start
		}
		area += float64(used) * t.Sub(now).Seconds()
		now = t
		for next < len(work) && !work[next].arrive.After(now) {
			pending = append(pending, work[next].w)
			next++
		}
		kept := running[:0]
		for _, l := range running {
			if l.end.After(now) {
				kept = append(kept, l)
				continue
			}
			for _, pp := range l.run.Placement {
				for _, rp := range pp.Replicas {
					cluster.Nodes[nodeIdx[rp.Node]].Res.Undo(&l.tw.w.PodSets[0].Req, rp.GPUs)
				}
			}
			for _, u := range l.run.Usage {
				used -= u.Milli
			}
		}
		running = kept
		if len(pending) == 0 {
			continue
		}
		cluster.LastSeen = now
		snap := &scheduler.Snapshot{Now: now, Queues: tree, Clusters: []scheduler.Cluster{cluster}, Pending: pending}
		for _, l := range running {
			snap.Running = append(snap.Running, l.run)
		}
		plan := scheduler.Decide(snap, sc)
		res.Cycles++
		done := map[string]bool{}
		for _, d := range plan.Dispatches {
			tw := byID[d.WorkloadID]
			tw.started = now
			done[d.WorkloadID] = true
			if d.Decision.Rule == scheduler.RuleBackfill {
				res.Backfilled++
			}
			for _, pp := range d.Placement {
				for _, rp := range pp.Replicas {
					cluster.Nodes[nodeIdx[rp.Node]].Res.Apply(&tw.w.PodSets[0].Req, rp.GPUs)
				}
			}
			for _, u := range d.Usage {
				used += u.Milli
			}
			running = append(running, &live{tw: tw, end: now.Add(tw.runFor),
				run: scheduler.Running{Workload: tw.w, Cluster: d.Cluster, StartedAt: now, Usage: d.Usage, Placement: d.Placement}})
		}
		if len(done) > 0 {
			kept := pending[:0]
			for _, w := range pending {
				if !done[w.ID] {
					kept = append(kept, w)
				}
			}
			pending = kept
		}
	}
	res.Span = now.Sub(start)
	if res.Span > 0 {
		res.UtilPct = 100 * area / (float64(capMilli) * res.Span.Seconds())
	}
	var podWait, gangWait float64 // seconds: a sum of durations overflows
	for _, tw := range work {
		wait := now.Sub(tw.arrive)
		if !tw.started.IsZero() {
			wait = tw.started.Sub(tw.arrive)
		}
		if tw.gang {
			res.GangWaits = append(res.GangWaits, wait)
			gangWait += wait.Seconds()
		} else {
			podWait += wait.Seconds()
		}
	}
	if cfg.Gangs > 0 {
		res.GangWaitAvg = time.Duration(gangWait / float64(cfg.Gangs) * float64(time.Second))
	}
	if nPods > 0 {
		res.PodWaitAvg = time.Duration(podWait / float64(nPods) * float64(time.Second))
	}
	return res, nil
}
