package sim

import (
	"container/heap"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// Epoch is simulated time zero.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func pow(a, b float64) float64 { return math.Pow(a, b) }

type eventKind uint8

const (
	evArrival eventKind = iota
	evComplete
	evTick
)

// event is one entry of the (time, seq) heap: equal times pop in the order
// they were pushed, so a run is reproducible event by event.
type event struct {
	at      time.Duration
	seq     uint64
	kind    eventKind
	job     int    // evArrival
	id      string // evComplete
	attempt int
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(a, b int) bool {
	if h[a].at != h[b].at {
		return h[a].at < h[b].at
	}
	return h[a].seq < h[b].seq
}
func (h eventHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type jobState struct {
	spec       JobSpec
	w          *scheduler.Workload
	arrived    time.Duration
	dispatched time.Duration
	firstWait  time.Duration
	waited     bool
	attempt    int
	run        *scheduler.Running
	done       bool
}

// Engine is the discrete-event simulator. It owns the fake clock and the
// cluster state, and calls the same pure core as the hub every cycle.
type Engine struct {
	sc       *Scenario
	cfg      scheduler.Config
	clusters []scheduler.Cluster
	nodes    map[string]map[string]int // cluster -> node name -> index
	tree     *quota.Tree
	ledger   *quota.Ledger
	jobs     []*jobState
	byID     map[string]*jobState
	pending  []*jobState
	running  map[string]*jobState
	events   eventHeap
	seq      uint64
	now      time.Duration
	lastTick time.Duration

	// measurements
	usedGPUSec   map[string]float64 // queue -> GPU-seconds after warmup
	nominated    map[string]bool    // workloads that preempted in the last cycle
	preemptions  int
	cycles       int
	dispatches   int
	completions  int
	capacityMill int64
}

// New prepares a run of the scenario with the given core configuration.
func New(sc *Scenario, cfg scheduler.Config) (*Engine, error) {
	tree, err := sc.buildTree()
	if err != nil {
		return nil, fmt.Errorf("scenario queues: %w", err)
	}
	e := &Engine{
		sc: sc, cfg: cfg, tree: tree,
		clusters:   sc.buildClusters(),
		nodes:      map[string]map[string]int{},
		ledger:     quota.NewLedger(time.Duration(sc.HalfLife), nil),
		byID:       map[string]*jobState{},
		running:    map[string]*jobState{},
		usedGPUSec: map[string]float64{},
	}
	for _, c := range e.clusters {
		idx := map[string]int{}
		for i, n := range c.Nodes {
			idx[n.Name] = i
			e.capacityMill += int64(len(n.Res.GPUs)) * gpufit.MilliPerGPU
		}
		e.nodes[c.ID] = idx
	}
	for i, j := range sc.jobs() {
		if j.ID == "" {
			j.ID = fmt.Sprintf("job-%05d", i)
		}
		if _, dup := e.byID[j.ID]; dup {
			return nil, fmt.Errorf("jobs[%d].id: duplicate id %q", i, j.ID)
		}
		if !tree.Leaf(j.Queue) {
			return nil, fmt.Errorf("jobs[%d].queue: %q is not a leaf queue of the scenario", i, j.Queue)
		}
		js := &jobState{spec: j, w: toWorkload(j)}
		e.jobs = append(e.jobs, js)
		e.byID[j.ID] = js
		e.push(event{at: time.Duration(j.Arrival), kind: evArrival, job: len(e.jobs) - 1})
	}
	e.push(event{at: 0, kind: evTick})
	return e, nil
}

func toWorkload(j JobSpec) *scheduler.Workload {
	topo, _ := parseTopology(j.Topology)
	req := gpufit.Request{CPUMilli: 1000, MemMiB: 4096}
	switch {
	case j.GPUMilli >= gpufit.MilliPerGPU:
		req.GPUs, req.Milli = j.GPUMilli/gpufit.MilliPerGPU, gpufit.MilliPerGPU
	case j.GPUMilli > 0:
		req.GPUs, req.Milli = 1, j.GPUMilli
	}
	preemptible := true
	if j.Preemptible != nil {
		preemptible = *j.Preemptible
	}
	return &scheduler.Workload{
		ID: j.ID, Queue: j.Queue, Priority: j.Priority, Preemptible: preemptible,
		CreatedAt: Epoch.Add(time.Duration(j.Arrival)),
		PodSets: []scheduler.PodSet{{Name: "main", Replicas: j.Replicas, MinReplicas: j.MinReplicas,
			Class: j.Class, Req: req, Topology: topo}},
	}
}

func (e *Engine) push(ev event) {
	e.seq++
	ev.seq = e.seq
	heap.Push(&e.events, ev)
}

// Run plays the scenario to its end. progress, when set, is called now and
// then with the simulated time reached.
func (e *Engine) Run(progress func(now, end time.Duration)) *Result {
	end := time.Duration(e.sc.Duration)
	nextReport := end / 20
	for e.events.Len() > 0 {
		ev := heap.Pop(&e.events).(event)
		if ev.at > end {
			break
		}
		e.now = ev.at
		switch ev.kind {
		case evArrival:
			js := e.jobs[ev.job]
			js.arrived = e.now
			e.pending = append(e.pending, js)
		case evComplete:
			js := e.byID[ev.id]
			if js.run != nil && js.attempt == ev.attempt {
				e.accrue(js)
				e.release(js)
				js.done = true
				e.completions++
			}
		case evTick:
			e.tick()
			e.push(event{at: e.now + time.Duration(e.sc.SchedulePeriod), kind: evTick})
		}
		if progress != nil && e.now >= nextReport {
			progress(e.now, end)
			nextReport += end / 20
		}
	}
	e.now = end
	for _, id := range sortedRunning(e.running) {
		e.accrue(e.running[id])
	}
	return e.result()
}

// tick accrues usage, then runs one scheduling cycle and applies its plan.
func (e *Engine) tick() {
	for _, id := range sortedRunning(e.running) {
		e.accrue(e.running[id])
	}
	e.lastTick = e.now
	if len(e.pending) == 0 {
		return
	}
	e.cycles++
	snap := &scheduler.Snapshot{
		Now:      Epoch.Add(e.now),
		Queues:   e.tree,
		Ledger:   e.ledger,
		Clusters: e.clusters,
	}
	for _, js := range e.pending {
		w := js.w
		if e.nominated[w.ID] {
			cp := *w
			cp.Nominated = true
			w = &cp
		}
		snap.Pending = append(snap.Pending, w)
	}
	for _, id := range sortedRunning(e.running) {
		snap.Running = append(snap.Running, *e.running[id].run)
	}
	for i := range snap.Clusters {
		snap.Clusters[i].LastSeen = snap.Now
	}
	plan := scheduler.Decide(snap, e.cfg)
	// As the hub does: a workload that preempted is nominated next cycle.
	e.nominated = map[string]bool{}
	for _, pe := range plan.Pending {
		if pe.Code == scheduler.ReasonPreempting {
			e.nominated[pe.WorkloadID] = true
		}
	}
	dispatched := map[string]bool{}
	for _, d := range plan.Dispatches {
		js := e.byID[d.WorkloadID]
		e.occupy(js, d)
		dispatched[d.WorkloadID] = true
	}
	keep := e.pending[:0]
	for _, js := range e.pending {
		if !dispatched[js.w.ID] {
			keep = append(keep, js)
		}
	}
	e.pending = keep
	for _, p := range plan.Preemptions {
		js := e.byID[p.WorkloadID]
		if js.run == nil {
			continue
		}
		e.release(js)
		e.preemptions++
		e.pending = append(e.pending, js) // requeued with its original age
	}
}

// occupy applies a dispatch: charge the nodes and schedule the completion.
func (e *Engine) occupy(js *jobState, d scheduler.Dispatch) {
	c := e.cluster(d.Cluster)
	for _, pp := range d.Placement {
		ps := &js.w.PodSets[0]
		for _, rp := range pp.Replicas {
			n := &c.Nodes[e.nodes[d.Cluster][rp.Node]]
			n.Res.Apply(&ps.Req, rp.GPUs)
		}
	}
	js.attempt++
	js.dispatched = e.now
	if !js.waited {
		js.waited = true
		js.firstWait = e.now - js.arrived
	}
	js.run = &scheduler.Running{Workload: js.w, Cluster: d.Cluster, StartedAt: Epoch.Add(e.now), Usage: d.Usage, Placement: d.Placement}
	e.running[js.w.ID] = js
	e.dispatches++
	e.push(event{at: e.now + time.Duration(js.spec.Runtime), kind: evComplete, id: js.w.ID, attempt: js.attempt})
}

// release gives a running job's resources back to its nodes.
func (e *Engine) release(js *jobState) {
	r := js.run
	c := e.cluster(r.Cluster)
	for _, pp := range r.Placement {
		ps := &js.w.PodSets[0]
		for _, rp := range pp.Replicas {
			n := &c.Nodes[e.nodes[r.Cluster][rp.Node]]
			n.Res.Undo(&ps.Req, rp.GPUs)
		}
	}
	js.run = nil
	delete(e.running, js.w.ID)
}

// accrue charges the ledger and the share measurement for a running job
// from the later of its start and the last accrual until now.
func (e *Engine) accrue(js *jobState) {
	from := e.lastTick
	if js.dispatched > from {
		from = js.dispatched
	}
	if e.now <= from {
		return
	}
	for _, u := range js.run.Usage {
		e.ledger.Accrue(js.w.Queue, u.Class, u.Milli, Epoch.Add(from), Epoch.Add(e.now))
		warm := time.Duration(e.sc.Warmup)
		lo := from
		if lo < warm {
			lo = warm
		}
		if e.now > lo {
			e.usedGPUSec[js.w.Queue] += float64(u.Milli) / 1000 * (e.now - lo).Seconds()
		}
	}
}

func (e *Engine) cluster(id string) *scheduler.Cluster {
	for i := range e.clusters {
		if e.clusters[i].ID == id {
			return &e.clusters[i]
		}
	}
	panic("sim: dispatch to unknown cluster " + id) // the core only names snapshot clusters
}

func sortedRunning(m map[string]*jobState) []string {
	out := make([]string, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}
