package simcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meridian-gpu/meridian/internal/fifomap"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	agent "github.com/meridian-gpu/meridian/spoke-agent"
)

// Workload labels and runtime environment variables the simulator reads.
const (
	// LabelDuration is how long the workload runs, as a Go duration.
	LabelDuration = "meridian.io/sim-duration"
	// LabelExitCode makes the workload fail with this exit code at its end
	// (0 means success).
	LabelExitCode = "meridian.io/sim-exit-code"
	// LabelReject makes the cluster reject the workload with the label's
	// value as the reason (for demos and tests across processes).
	LabelReject = "meridian.io/sim-reject"
	// EnvDuration is read from the runtime template's environment when the
	// label is absent.
	EnvDuration = "SIM_DURATION"
	// EnvExitCode is read from the runtime template's environment when the
	// label is absent.
	EnvExitCode = "SIM_EXIT_CODE"
)

// Kind is the connector kind.
const Kind = "simcluster"

// Options tune a Cluster.
type Options struct {
	// Clock drives simulated time; nil means the wall clock (scale 1).
	Clock Clock
	// Logger receives debug logs; nil drops them.
	Logger *slog.Logger
	// DefaultDuration overrides the config's default duration when > 0.
	DefaultDuration time.Duration
	// Journal, when set, receives a JSON line (JournalEntry) for every
	// launch, idempotent repeat and end, written while the cluster's lock
	// is held, so lines are in the order things happened. Nil: none.
	Journal io.Writer
}

// Cluster is an in-memory cluster that implements agent.Connector.
type Cluster struct {
	clock    Clock
	log      *slog.Logger
	labels   map[string]string
	modes    []meridianv1.FractionalMode
	strategy agentv1.MigStrategy
	duration time.Duration

	mu      sync.Mutex
	nodes   []*node // sorted by name
	byName  map[string]*node
	running map[string]*work
	// finished holds finished work, encoded (finishedRecord), oldest
	// first; beyond MaxFinishedKept the oldest is forgotten, as a real
	// cluster's job history ages out, so a long-running demo does not
	// grow forever. Encoded in a fifomap it is no pointers for the
	// collector (ten benchmark clusters keep 200,000).
	finished  *fifomap.Map
	launches  int
	rejectAll string
	rejectIDs map[string]string
	vanished  bool
	closed    bool

	events  *agent.EventQueue
	journal *journal
}

var (
	_ agent.Connector = (*Cluster)(nil)
	_ agent.Vanisher  = (*Cluster)(nil)
)

type node struct {
	cordoned bool
	name     string
	class    string
	rack     string
	nvlink   string
	labels   map[string]string
	cpuFree  int64
	cpuTot   int64
	memFree  int64
	memTot   int64
	gpus     []gpu
	// inv is the node as Inventory last reported it, kept until the node
	// changes (nil then): an agent advertises at every change, and most
	// of a large cluster's nodes did not change since the last time.
	// Never written to once handed out (see Inventory).
	inv *agentv1.Node
}

type gpu struct {
	freeMilli int32
	freeMem   int64
	totalMem  int64
	// mig lists a MIG GPU's instances, one entry per profile; nil for a
	// plain GPU. A MIG GPU serves only MIG requests.
	mig []migInst
}

// migInst counts the instances of one profile on a MIG GPU.
type migInst struct {
	p           migProfile
	free, total int32
}

// charge is what one replica takes from one node.
type charge struct {
	n    *node
	cpu  int64
	mem  int64
	gpus []gpuCharge
}

type gpuCharge struct {
	idx   int
	milli int32
	mem   int64
	mig   int // index in the GPU's mig list, or -1
}

type work struct {
	id, workloadID string
	state          agent.WorkState
	charges        []charge
	nodes          []string
	milli          int64
	started        time.Time
	finished       time.Time
	duration       time.Duration
	exitCode       int32
	finalExit      *int32
	reason         string
	timer          Timer
}

// New builds a cluster from a validated config. Close it when done.
func New(cfg *Config, opts Options) (*Cluster, error) {
	if cfg == nil {
		return nil, errors.New("simcluster: config is nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Cluster{
		clock:     opts.Clock,
		log:       opts.Logger,
		labels:    maps.Clone(cfg.Labels),
		modes:     cfg.Modes(),
		strategy:  cfg.Strategy(),
		duration:  cfg.DefaultDuration.Duration,
		byName:    map[string]*node{},
		running:   map[string]*work{},
		finished:  fifomap.New(MaxFinishedKept),
		rejectIDs: map[string]string{},
		events:    agent.NewEventQueue(),
	}
	if opts.Journal != nil {
		c.journal = &journal{w: opts.Journal}
	}
	if c.clock == nil {
		c.clock, _ = NewScaledClock(1)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if opts.DefaultDuration > 0 {
		c.duration = opts.DefaultDuration
	}
	if c.duration <= 0 {
		c.duration = DefaultDuration
	}
	for _, spec := range cfg.Nodes {
		for _, name := range expandNames(spec) {
			n := &node{
				name: name, class: spec.AcceleratorClass, rack: spec.Rack, nvlink: spec.NVLinkDomain,
				labels:  maps.Clone(spec.Labels),
				cpuFree: spec.CPUMilli, cpuTot: spec.CPUMilli, memFree: spec.MemoryMiB, memTot: spec.MemoryMiB,
			}
			for g := range spec.GPUs {
				gg := gpu{freeMilli: 1000, freeMem: spec.GPUMemoryMiB, totalMem: spec.GPUMemoryMiB}
				if m := spec.MIG; m != nil && (m.GPUs == 0 || g >= spec.GPUs-m.GPUs) {
					gg.mig = migInstances(m.Instances)
					gg.freeMilli, gg.freeMem = migFree(gg.mig, gg.totalMem)
				}
				n.gpus = append(n.gpus, gg)
			}
			c.nodes = append(c.nodes, n)
			c.byName[name] = n
		}
	}
	sort.Slice(c.nodes, func(i, j int) bool { return c.nodes[i].name < c.nodes[j].name })
	return c, nil
}

// Close stops pending timers and the event pump. Events not yet read are
// dropped. It is idempotent.
func (c *Cluster) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	for _, w := range c.running {
		if w.timer != nil {
			w.timer.Stop()
		}
	}
	c.mu.Unlock()
	c.events.Close()
}

// Kind returns "simcluster".
func (c *Cluster) Kind() string { return Kind }

// Events delivers state changes in order; see agent.Connector.
func (c *Cluster) Events() <-chan agent.WorkEvent { return c.events.Events() }

// emit queues an event; c.mu must be held.
func (c *Cluster) emit(w *work) {
	ev := agent.WorkEvent{
		DispatchID: w.id, WorkloadID: w.workloadID, State: w.state, Reason: w.reason,
		ExitCode: w.finalExit, GPUMilliSeconds: w.usage(c.clock.Now()),
	}
	if w.state == agent.StateRunning {
		ev.Time = c.wall(w.started)
	} else {
		ev.Time = c.wall(w.finished)
		ev.WallTime = w.finished.Sub(w.started)
	}
	c.events.Push(ev)
}

// statusOf is what List reports of w at simulated time now (c.mu held).
func (c *Cluster) statusOf(w *work, now time.Time) agent.WorkStatus {
	return agent.WorkStatus{
		DispatchID: w.id, WorkloadID: w.workloadID, State: w.state, Nodes: append([]string(nil), w.nodes...),
		StartedAt: c.wall(w.started), FinishedAt: c.wall(w.finished), ExitCode: w.finalExit, Reason: w.reason,
		GPUMilliSeconds: w.usage(now),
	}
}

// wall turns a simulated time into a wall-clock one when the clock can.
func (c *Cluster) wall(t time.Time) time.Time {
	if wc, ok := c.clock.(WallClock); ok && !t.IsZero() {
		return wc.Wall(t)
	}
	return t
}

func (w *work) usage(now time.Time) int64 {
	end := now
	if !w.finished.IsZero() {
		end = w.finished
	}
	d := end.Sub(w.started)
	if d < 0 {
		d = 0
	}
	return w.milli * d.Milliseconds() / 1000
}

// ---- test hooks --------------------------------------------------------

// SetRejectAll makes every new dispatch be rejected with reason; "" turns it off.
func (c *Cluster) SetRejectAll(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rejectAll = reason
}

// RejectDispatch makes the dispatch with this id be rejected with reason when
// it is launched.
func (c *Cluster) RejectDispatch(dispatchID, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rejectIDs[dispatchID] = reason
}

// SetVanished makes the cluster stop (true) or resume (false) talking to
// the hub; running work keeps running either way.
func (c *Cluster) SetVanished(v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.vanished = v
}

// Vanished implements agent.Vanisher.
func (c *Cluster) Vanished() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.vanished
}

// Fail ends running work now as Failed with exitCode. It reports whether
// the dispatch was running.
func (c *Cluster) Fail(dispatchID string, exitCode int32, reason string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.running[dispatchID]
	if w == nil {
		return false
	}
	if reason == "" {
		reason = "failed by test hook"
	}
	c.finishLocked(w, agent.StateFailed, &exitCode, fmt.Sprintf("%s (exit code %d)", reason, exitCode))
	return true
}

// SetSchedulable opens (true) or closes (false) a node to new work, like a
// cordon; running work stays. It reports whether the node exists.
func (c *Cluster) SetSchedulable(nodeName string, schedulable bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.byName[nodeName]
	if n == nil {
		return false
	}
	n.cordoned = !schedulable
	n.inv = nil
	return true
}

// Launches counts dispatches actually started (idempotent repeats and
// rejections are not counted).
func (c *Cluster) Launches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.launches
}

// Running counts dispatches running now.
func (c *Cluster) Running() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.running)
}

// ---- Connector ---------------------------------------------------------

// Inventory reports every node's free and total capacity. A node that has
// not changed since the last call is the same *Node as then (the
// Connector contract lets the agent skip comparing it); a changed one is
// a new message, so what an earlier caller holds never changes.
func (c *Cluster) Inventory(ctx context.Context) (*agent.Inventory, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	inv := &agent.Inventory{Labels: maps.Clone(c.labels), FractionalModes: append([]meridianv1.FractionalMode(nil), c.modes...), MIGStrategy: c.strategy,
		Nodes: make([]*agentv1.Node, 0, len(c.nodes))}
	for _, n := range c.nodes {
		if n.inv == nil {
			n.inv = n.report()
		}
		inv.Nodes = append(inv.Nodes, n.inv)
	}
	return inv, nil
}

// report is the node as the agent advertises it.
func (n *node) report() *agentv1.Node {
	an := &agentv1.Node{
		Name: n.name, Labels: maps.Clone(n.labels), AcceleratorClass: n.class, Rack: n.rack, NvlinkDomain: n.nvlink,
		Schedulable: !n.cordoned, CpuMilliFree: n.cpuFree, CpuMilliTotal: n.cpuTot, MemoryMibFree: n.memFree, MemoryMibTotal: n.memTot,
		Gpus: make([]*agentv1.Gpu, 0, len(n.gpus)),
	}
	for i, g := range n.gpus {
		ag := &agentv1.Gpu{Index: int32(i), FreeMilli: g.freeMilli, FreeMemoryMib: g.freeMem, TotalMemoryMib: g.totalMem, Healthy: true}
		for _, m := range g.mig {
			ag.MigProfiles = append(ag.MigProfiles, &agentv1.MigSlice{Profile: m.p.name, Free: m.free, Total: m.total})
		}
		an.Gpus = append(an.Gpus, ag)
	}
	return an
}

// Launch places and starts d's workload; see agent.Connector.
func (c *Cluster) Launch(ctx context.Context, d *agentv1.Dispatch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d == nil || d.GetDispatchId() == "" {
		return errors.New("simcluster: dispatch_id is empty")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("simcluster: cluster is closed")
	}
	if _, known := c.running[d.DispatchId]; known || c.finished.Has(d.DispatchId) {
		c.journal.write(JournalEntry{Time: time.Now(), Event: JournalRepeat, DispatchID: d.DispatchId, WorkloadID: d.GetWorkloadId()})
		return nil
	}
	if r, ok := c.rejectIDs[d.DispatchId]; ok {
		return agent.Reject("%s", r)
	}
	if c.rejectAll != "" {
		return agent.Reject("%s", c.rejectAll)
	}
	wl := d.GetWorkload()
	if wl == nil {
		return agent.Reject("workload: missing from the dispatch")
	}
	if len(wl.GetPodSets()) == 0 {
		return agent.Reject("workload.pod_sets: empty")
	}
	if r, ok := wl.GetLabels()[LabelReject]; ok {
		if r == "" {
			r = "rejected by the " + LabelReject + " label"
		}
		return agent.Reject("%s", r)
	}
	dur, exit, err := c.runSpec(wl)
	if err != nil {
		return agent.Reject("%v", err)
	}
	charges, nodes, err := c.place(wl, d.GetPlacement())
	if err != nil {
		return agent.Reject("%v", err)
	}
	now := c.clock.Now()
	w := &work{id: d.DispatchId, workloadID: d.GetWorkloadId(), state: agent.StateRunning, charges: charges, nodes: nodes,
		started: now, duration: dur, exitCode: exit}
	if w.workloadID == "" {
		w.workloadID = wl.GetId()
	}
	for _, ch := range charges {
		for _, g := range ch.gpus {
			w.milli += int64(g.milli)
		}
	}
	c.running[w.id] = w
	c.launches++
	id := w.id
	w.timer = c.clock.AfterFunc(dur, func() { c.complete(id) })
	c.log.Debug("simcluster launched", "dispatch_id", id, "nodes", nodes, "duration", dur)
	c.journal.write(JournalEntry{Time: time.Now(), Event: JournalLaunch, DispatchID: id, WorkloadID: w.workloadID,
		Replicas: len(charges), Wanted: wantedReplicas(wl), Nodes: nodes})
	c.emit(w)
	return nil
}

// complete ends work whose duration has passed.
func (c *Cluster) complete(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.running[id]
	if w == nil || c.closed {
		return
	}
	exit := w.exitCode
	if exit != 0 {
		c.finishLocked(w, agent.StateFailed, &exit, fmt.Sprintf("exited with code %d", exit))
		return
	}
	c.finishLocked(w, agent.StateSucceeded, &exit, "")
}

func (c *Cluster) finishLocked(w *work, st agent.WorkState, exit *int32, reason string) {
	if w.timer != nil {
		w.timer.Stop()
	}
	w.state, w.finalExit, w.reason = st, exit, reason
	w.finished = c.clock.Now()
	for _, ch := range w.charges {
		ch.release()
	}
	c.journal.write(JournalEntry{Time: time.Now(), Event: JournalEnd, DispatchID: w.id, WorkloadID: w.workloadID,
		State: journalState(st), Reason: reason})
	c.emit(w)
	delete(c.running, w.id)
	c.finished.Put(w.id, encodeFinished(c.statusOf(w, w.finished)))
}

// MaxFinishedKept is how many finished workloads a simulated cluster
// remembers (and List reports) before it forgets the oldest.
const MaxFinishedKept = 20000

// Cancel stops running work; unknown or finished work is a no-op.
func (c *Cluster) Cancel(ctx context.Context, dispatchID string, preempt bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.running[dispatchID]
	if w == nil {
		return nil
	}
	if preempt {
		c.finishLocked(w, agent.StatePreempted, nil, "preempted by the hub")
	} else {
		c.finishLocked(w, agent.StateCancelled, nil, "cancelled by the hub")
	}
	return nil
}

// List returns every dispatch the cluster launched, sorted by id.
func (c *Cluster) List(ctx context.Context) ([]agent.WorkStatus, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	out := make([]agent.WorkStatus, 0, len(c.running)+c.finished.Len())
	for _, w := range c.running {
		out = append(out, c.statusOf(w, now))
	}
	c.finished.Range(func(id string, b []byte) bool {
		st, err := decodeFinished(id, b)
		if err != nil { // bytes this process wrote: never, short of a bug
			c.log.Error("simcluster: a finished record does not decode; it is left out", "dispatch_id", id, "err", err)
			return true
		}
		out = append(out, st)
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].DispatchID < out[j].DispatchID })
	return out, nil
}

// runSpec reads the duration and exit code from labels or runtime env.
func (c *Cluster) runSpec(wl *meridianv1.Workload) (time.Duration, int32, error) {
	var env map[string]string
	if rt := wl.GetRuntime(); rt != nil {
		if ct := rt.GetContainer(); ct != nil {
			env = ct.GetEnv()
		} else if st := rt.GetSlurm(); st != nil {
			env = st.GetEnv()
		}
	}
	// pick finds a setting, label first. The name of where it came from
	// is only made for an error: every launch reads these.
	pick := func(label, envKey string) (v string, ok bool, fromLabel bool) {
		if v, ok := wl.GetLabels()[label]; ok {
			return v, true, true
		}
		v, ok = env[envKey]
		return v, ok, false
	}
	field := func(label, envKey string, fromLabel bool) string {
		if fromLabel {
			return "workload.labels[" + label + "]"
		}
		return "workload.runtime env " + envKey
	}
	dur := c.duration
	if v, ok, fromLabel := pick(LabelDuration, EnvDuration); ok {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d < 0 {
			return 0, 0, fmt.Errorf("%s: %q is not a non-negative duration such as 30s", field(LabelDuration, EnvDuration, fromLabel), v)
		}
		dur = d
	}
	var exit int32
	if v, ok, fromLabel := pick(LabelExitCode, EnvExitCode); ok {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		if err != nil || n < 0 || n > 255 {
			return 0, 0, fmt.Errorf("%s: %q is not an exit code in 0..255", field(LabelExitCode, EnvExitCode, fromLabel), v)
		}
		exit = int32(n)
	}
	return dur, exit, nil
}

func (ch *charge) release() {
	ch.n.inv = nil
	ch.n.cpuFree += ch.cpu
	ch.n.memFree += ch.mem
	for _, g := range ch.gpus {
		ch.n.gpus[g.idx].freeMilli += g.milli
		ch.n.gpus[g.idx].freeMem += g.mem
		if g.mig >= 0 {
			ch.n.gpus[g.idx].mig[g.mig].free++
		}
	}
}

func (ch *charge) apply() {
	ch.n.inv = nil
	ch.n.cpuFree -= ch.cpu
	ch.n.memFree -= ch.mem
	for _, g := range ch.gpus {
		ch.n.gpus[g.idx].freeMilli -= g.milli
		ch.n.gpus[g.idx].freeMem -= g.mem
		if g.mig >= 0 {
			ch.n.gpus[g.idx].mig[g.mig].free--
		}
	}
}

// migInstances counts a MIG GPU's instances per profile, in first-seen order.
func migInstances(names []string) []migInst {
	var out []migInst
next:
	for _, name := range names {
		p, _ := parseMIG(name)
		for i := range out {
			if out[i].p.name == name {
				out[i].free++
				out[i].total++
				continue next
			}
		}
		out = append(out, migInst{p: p, free: 1, total: 1})
	}
	return out
}

// migFree is a fresh MIG GPU's free share (its instances' slices of 7) and
// memory (its instances' memory, at most the GPU's).
func migFree(ms []migInst, total int64) (int32, int64) {
	slices, mem := 0, int64(0)
	for _, m := range ms {
		slices += m.p.slices * int(m.total)
		mem += int64(m.p.memGB) * 1024 * int64(m.total)
	}
	return int32(min(1000, slices*1000/7)), min(mem, total)
}
