package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/hub/fleet"
	"github.com/meridian-gpu/meridian/hub/leader"
	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/records"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/ctxtime"
	"github.com/meridian-gpu/meridian/internal/fifomap"
	"github.com/meridian-gpu/meridian/internal/protofast"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// Config tunes the loop. Zero fields take the defaults shown.
type Config struct {
	// Scheduler configures the pure core; zero means scheduler.DefaultConfig().
	// Its MaxConsidered is also the window: how many workloads of each
	// queue a cycle hands the core (DefaultWindow when 0; negative: all).
	Scheduler scheduler.Config
	// MinPeriod is the shortest gap between two cycles (50ms).
	MinPeriod time.Duration
	// MaxIdle is the longest gap between two cycles without any trigger (1s).
	MaxIdle time.Duration
	// ClusterTimeout is the silence after which a cluster is LOST (15s); it
	// is used when the loop builds its own fleet registry.
	ClusterTimeout time.Duration
	// RepublishAfter is how long an unacknowledged dispatch waits before
	// it is published again (10s).
	RepublishAfter time.Duration
	// RejectBackoff and RejectBackoffMax bound the exponential exclusion of
	// a cluster that rejected a workload (10s, 10m).
	RejectBackoff, RejectBackoffMax time.Duration
	// PreemptBackoff and PreemptBackoffMax bound how long a preempted
	// workload is held before it is scheduled again, doubling with each
	// preemption (5s, 2m): without it, borrowed work that is reclaimed
	// comes straight back and is reclaimed again.
	PreemptBackoff, PreemptBackoffMax time.Duration
	// ShapeHalfLife is the half-life of the history of submitted shapes
	// that the meridian policy scores fragmentation against
	// (scheduler.DefaultShapeHalfLife).
	ShapeHalfLife time.Duration
	// LedgerHalfLife is the fairshare decay half-life for a new ledger (7 days).
	LedgerHalfLife time.Duration
	// ClassWeights weights the ledger's accrual by accelerator class (a
	// GPU-second of a class counts its weight; unlisted classes count 1).
	// It is the hub config's scheduling.classWeights and replaces the
	// weights a stored ledger carries when the leader loads it.
	ClassWeights map[string]float64
	// LedgerPersistEvery is how often the leader writes the ledger (10s).
	LedgerPersistEvery time.Duration
	// AccrueEvery is how often running usage is added to the ledger (1s).
	// Usage can only be charged up to the last heartbeat that showed the
	// work running, and heartbeats come every few seconds, so accruing on
	// every cycle would walk every running workload for nothing.
	AccrueEvery time.Duration
	// EventBatch is how many agent events one fetch applies together (256).
	EventBatch int
	// EventAckWait is how long an event handed to a leader that died stays
	// invisible before it is redelivered (30s).
	EventAckWait time.Duration
	// AfterRestore: etcd was restored from a snapshot, so the clusters
	// may run work it does not know. Each term waits for every cluster's
	// heartbeat before it dispatches, and adopts the reported dispatches
	// of workloads queued here instead of dispatching them again (adopt.go).
	AfterRestore bool
	// WorkloadGuards keeps etcd's revision check on every workload write
	// (writeGate): only for a rolling upgrade from a release whose API
	// wrote cancels into the workload itself.
	WorkloadGuards bool
	// QueueSubmits has the API store every submit QUEUED itself. Off (the
	// default), the leader's loop takes the submits the API hands it and
	// stores them with its next cycle's decision: already DISPATCHED when
	// it can place them (intake.go).
	QueueSubmits bool
}

func (c *Config) defaults() {
	if c.Scheduler.Scorer == nil && c.Scheduler.NodeCandidates == 0 {
		window := c.Scheduler.MaxConsidered
		c.Scheduler = scheduler.DefaultConfig()
		c.Scheduler.MaxConsidered = window
	}
	// The window: negative hands the core every queued workload.
	if c.Scheduler.MaxConsidered == 0 {
		c.Scheduler.MaxConsidered = DefaultWindow
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.MinPeriod, 50*time.Millisecond)
	def(&c.MaxIdle, time.Second)
	def(&c.ClusterTimeout, fleet.DefaultTimeout)
	def(&c.RepublishAfter, 10*time.Second)
	def(&c.RejectBackoff, 10*time.Second)
	def(&c.RejectBackoffMax, 10*time.Minute)
	def(&c.PreemptBackoff, 5*time.Second)
	def(&c.PreemptBackoffMax, 2*time.Minute)
	def(&c.LedgerHalfLife, 7*24*time.Hour)
	def(&c.ShapeHalfLife, scheduler.DefaultShapeHalfLife)
	def(&c.LedgerPersistEvery, 10*time.Second)
	def(&c.AccrueEvery, time.Second)
	if c.EventBatch <= 0 {
		c.EventBatch = 256
	}
	def(&c.EventAckWait, 30*time.Second)
}

// Deps are the loop's collaborators.
type Deps struct {
	// Store writes etcd. Required.
	Store *store.Store
	// Cache mirrors everything under store.Root + "/". Required. The caller
	// runs it (Cache.Run); the loop waits for it to be ready.
	Cache *store.Cache
	// Bus is the NATS connection; the loop calls EnsureStreams. Required.
	Bus *natsbus.Bus
	// Elector campaigns for this replica. Required.
	Elector *leader.Elector
	// Fleet is the cluster registry. Nil means the loop builds one and
	// feeds it from Bus when Run starts; a caller that passes its own feeds
	// it itself.
	Fleet *fleet.Registry
	// Logger; nil drops logs.
	Logger *slog.Logger
	// Clock; nil means time.Now.
	Clock func() time.Time
	// Registerer receives the loop's metrics; nil means a private registry.
	Registerer prometheus.Registerer
	// Config tunes the loop.
	Config Config
	// TracerProvider traces the cycles that dispatch traced workloads and
	// the processing of their events (tracing.go); nil leaves tracing off.
	TracerProvider trace.TracerProvider
	// Finished, when set, hears which stored workloads are finished as
	// the loop's mirror reads every change (it reads each workload's
	// summary anyway): pass the retention runner's *retention.Index, so
	// that retention need not list the store to find them. Nil: nobody.
	Finished FinishedSink
}

// FinishedSink hears, from the loop's mirror, which stored workloads are
// finished. Its calls come from the goroutine that advances the mirror,
// in this order: Reset when the mirror reads everything again (and on its
// first read); then, per change, Finished for a workload in a terminal
// phase and Forget for one that was deleted or may have left one; then
// Reflects with the revision every change up to which was told.
type FinishedSink interface {
	Reset()
	Finished(key string, modRev int64, s records.WorkloadSummary)
	Forget(key string)
	Reflects(rev int64)
}

// Loop is the scheduling loop. Build it with New and drive it with Run.
type Loop struct {
	// scratch is the core's reusable memory for the cycle's Decide.
	scratch scheduler.Scratch
	st      *store.Store
	cache   *store.Cache
	bus     *natsbus.Bus
	el      *leader.Elector
	fleet   *fleet.Registry
	ownFeed bool
	log     *slog.Logger
	clock   func() time.Time
	cfg     Config
	m       *metrics
	tp      trace.TracerProvider // nil: tracing off
	ownReg  *prometheus.Registry // the private registry when Deps.Registerer is nil

	mirror mirror        // decoded cache, updated by deltas
	fin    FinishedSink  // nil: nobody hears of finished workloads
	own    ownWrites     // workloads the loop wrote, handed to the mirror decoded
	recent recentWrites  // the same, kept for the events that rewrite them
	kick   chan struct{} // a send asks for the next cycle early

	// natsDownAt is when the loop last saw its NATS connection down; only
	// the loop goroutine uses it.
	natsDownAt time.Time
	// listeningSince is when Run started listening to the fleet.
	listeningSince time.Time

	// dropPublishes makes dispatch publishes vanish (tests: a hub that
	// crashes between commit and publish).
	dropPublishes atomic.Bool

	mu          sync.Mutex // guards the fields below
	leading     bool
	leaderSince time.Time
	last        *lastView // the latest accounting built for the API
	term        *term     // the current term while leading, for the API's ledger
	// intake holds the submits waiting for the next cycle (intake.go),
	// intakeLen their workloads.
	intake    []*intakeUnit
	intakeLen int

	mirrorPos atomic.Uint64 // the mirror's position, for the API's reuse of its accounting
}

// New checks deps and returns a Loop.
func New(d Deps) (*Loop, error) {
	switch {
	case d.Store == nil:
		return nil, errors.New("dispatch: Deps.Store is required")
	case d.Cache == nil:
		return nil, errors.New("dispatch: Deps.Cache is required")
	case d.Bus == nil:
		return nil, errors.New("dispatch: Deps.Bus is required")
	case d.Elector == nil:
		return nil, errors.New("dispatch: Deps.Elector is required")
	}
	d.Config.defaults()
	l := &Loop{st: d.Store, cache: d.Cache, bus: d.Bus, el: d.Elector, fleet: d.Fleet, log: d.Logger, clock: d.Clock, cfg: d.Config, tp: d.TracerProvider, fin: d.Finished}
	l.recent.guard = testWriteGuard
	l.mirror.shapeHalfLife = l.cfg.ShapeHalfLife
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.log = l.log.With("component", "dispatch", "hub", d.Elector.ID())
	if l.clock == nil {
		l.clock = time.Now
	}
	if l.fleet == nil {
		l.fleet = fleet.New(fleet.Options{Clock: l.clock, Timeout: l.cfg.ClusterTimeout, Logger: l.log})
		l.ownFeed = true
	}
	reg := d.Registerer
	if reg == nil {
		own := prometheus.NewRegistry()
		reg, l.ownReg = own, own
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	if err := reg.Register(stateCollector{l}); err != nil {
		return nil, fmt.Errorf("dispatch: register metrics: %w", err)
	}
	l.m = m
	l.kick = make(chan struct{}, 1)
	return l, nil
}

// Fleet is the loop's cluster registry.
func (l *Loop) Fleet() *fleet.Registry { return l.fleet }

// Leading reports whether this replica runs cycles now, and since when.
func (l *Loop) Leading() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leaderSince, l.leading
}

// Run feeds the fleet, waits for the cache, then campaigns and runs cycles
// while leading, campaigning again after each lost term. It returns when
// ctx ends (nil) or on a setup failure.
func (l *Loop) Run(ctx context.Context) error {
	if err := l.bus.EnsureStreams(ctx); err != nil {
		return fmt.Errorf("dispatch: %w", err)
	}
	l.listeningSince = time.Now()
	if l.ownFeed {
		if err := l.fleet.Start(ctx, l.bus); err != nil {
			return fmt.Errorf("dispatch: %w", err)
		}
	}
	select {
	case <-ctx.Done():
		return nil
	case <-l.cache.Ready():
	}
	if !l.awaitFleet(ctx) {
		return nil
	}
	for ctx.Err() == nil {
		fence, err := l.el.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			l.log.Warn("campaign failed; retrying", "err", err)
			if !ctxtime.Sleep(ctx, 500*time.Millisecond) {
				return nil
			}
			continue
		}
		l.log.Info("leading", "fence", fence.String())
		l.runTerm(ctx, fence)
		l.log.Info("term ended", "fence", fence.String())
	}
	return nil
}

// awaitFleet waits until the fleet has read every cluster's latest
// advertisement, so that a term never starts believing in fewer clusters
// than there are: after a restore it would skip waiting for the missing
// ones' heartbeats and dispatch again work they run (adopt.go). A bus
// that cannot say within the cluster timeout does not hold leadership
// back longer. It reports false when ctx ended first.
func (l *Loop) awaitFleet(ctx context.Context) bool {
	wait := time.NewTimer(l.fleet.Timeout())
	defer wait.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-l.fleet.Replayed():
	case <-wait.C:
		l.log.Warn("fleet: the clusters' latest advertisements were not all read within the cluster timeout; campaigning anyway", "timeout", l.fleet.Timeout().String())
	}
	return true
}

// term is one leadership term's state. Only the term's goroutines use it.
type term struct {
	fence  leader.Fence
	gate   *writeGate
	ctx    context.Context
	cancel context.CancelFunc

	mu            sync.Mutex
	ledger        *quota.Ledger
	accruedTo     map[string]time.Time // workload id -> ledger accrued up to
	ledgerFloor   time.Time
	ledgerSavedAt time.Time
	accruedAt     time.Time // last accrue pass (hub clock)
	// heartbeatCharged is, per cluster, the heartbeat the last accrue
	// pass charged up to.
	heartbeatCharged map[string]time.Time
	published        map[string]time.Time // dispatch id -> last publish
	cancelled        map[string]time.Time // dispatch ids a cancel was sent for, and when
	finished         *fifomap.Map         // dispatch ids the agent reported stopped, and when (UnixNano), oldest first
	nominated        map[string]time.Time // workload ids that preempted work, and when
	started          time.Time            // when the term began (hub clock)
	lastCommitRev    int64                // highest revision the cycle committed
	prunedAt         time.Time            // last walk over cancelled and finished
	reportChecked    map[string]time.Time // cluster -> time of the heartbeat reconcileReports last checked
	// After a restore (adopt.go): the hub clock when the term began,
	// whether every cluster has reported since, and the heartbeats
	// adoption has looked at, by cluster.
	startedClock           time.Time
	reportsIn, awaitLogged bool
	adoptChecked           map[string]time.Time
	// heads are the workloads the last cycle handed the core, by id, with
	// their queues (the cycle's goroutine only): one missing from the next
	// cycle's heads fell behind its queue's window.
	heads, headsSpare map[string]string
	// behind are the workloads that fell out of their queue's window and
	// are still owed the window's reason, with their queues (see
	// fellBehind).
	behind map[string]string
}

func (l *Loop) runTerm(ctx context.Context, fence leader.Fence) {
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := l.el.Done()
	go func() {
		select {
		case <-done:
			cancel()
		case <-tctx.Done():
		}
	}()
	t := &term{fence: fence, ctx: tctx, cancel: cancel, accruedTo: map[string]time.Time{}, heartbeatCharged: map[string]time.Time{}, published: map[string]time.Time{},
		cancelled: map[string]time.Time{}, finished: newFinishedMemory(), started: time.Now(), startedClock: l.clock()}
	// Every write of an earlier term is at or below the revision read
	// now: the gate keeps the guards until the cache has caught up to it.
	from, err := l.st.Revision(tctx)
	if err != nil {
		l.log.Error("read the term's first revision", "err", err)
		ctxtime.Sleep(tctx, 200*time.Millisecond)
		return
	}
	t.gate = newWriteGate(l.cache, from, l.cfg.WorkloadGuards)
	t.gate.checked = testBlindWrites
	if err := l.loadLedger(tctx, t); err != nil {
		l.log.Error("load ledger", "err", err)
		ctxtime.Sleep(tctx, 200*time.Millisecond)
		return
	}
	l.mu.Lock()
	l.leading, l.leaderSince, l.term = true, l.clock(), t
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.leading, l.term = false, nil
		l.mu.Unlock()
		l.declineIntake()
	}()
	l.m.leader.Set(1)
	defer l.m.leader.Set(0)
	defer l.m.resetPending()

	// Cycles are triggered by etcd changes and fleet changes.
	changed, unsub := l.cache.Notify()
	defer unsub()

	if err := l.republishUnacked(t); err != nil {
		l.log.Warn("republish unacknowledged dispatches", "err", err)
	}
	if err := l.consumeEvents(t); err != nil {
		l.log.Error("consume agent events", "err", err)
		ctxtime.Sleep(tctx, 200*time.Millisecond)
		return
	}
	stopRegister, err := l.serveRegister(t)
	if err != nil {
		l.log.Error("serve agent registration", "err", err)
		ctxtime.Sleep(tctx, 200*time.Millisecond)
		return
	}
	defer stopRegister()

	idle := time.NewTimer(0)
	defer idle.Stop()
	var (
		lastCycle time.Time
		pace      pacer
	)
	for {
		select {
		case <-tctx.Done():
			return
		case <-idle.C:
		case _, ok := <-changed:
			if !ok {
				return
			}
		case <-l.fleet.Changed():
		case <-l.kick:
		}
		// At least MinPeriod from one cycle's start to the next, and at
		// least cycleDuty times as long as a typical recent cycle took, so
		// the loop takes at most half a core while the state is large and
		// changes constantly, and leaves the rest to the API, etcd and
		// the event consumer on a small machine.
		if wait := pace.gap(l.cfg.MinPeriod) - time.Since(lastCycle); wait > 0 {
			if !ctxtime.Sleep(tctx, wait) {
				return
			}
		}
		// The cycle reads every change since the last (advance); a
		// signal that came meanwhile is covered by it.
		select {
		case <-changed:
		default:
		}
		lastCycle = time.Now()
		err := l.cycle(t)
		pace.record(time.Since(lastCycle))
		if leader.IsNotLeader(err) {
			l.log.Warn("fence lost; stopping writes", "err", err)
			return
		}
		if err != nil && tctx.Err() == nil {
			l.log.Warn("cycle", "err", err)
		}
		if !idle.Stop() {
			select {
			case <-idle.C:
			default:
			}
		}
		idle.Reset(l.cfg.MaxIdle)
	}
}

// commit is a fenced store commit that keeps the term's context. Its
// workload writes pass the term's write gate, which checks in the hub
// what their revision guards would have had etcd check.
func (l *Loop) commit(t *term, ops ...store.Op) (int64, error) {
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	p, err := t.gate.open(ops)
	if err != nil {
		return 0, err
	}
	rev, err := l.st.Commit(ctx, &t.fence, p.ops...)
	t.gate.close(p, rev, err)
	return rev, err
}

// stamp sets update_time and returns the encoded workload.
func (l *Loop) stamp(w *meridianv1.Workload, now time.Time) ([]byte, error) {
	if w.Status == nil {
		w.Status = &meridianv1.WorkloadStatus{}
	}
	w.Status.UpdateTime = tsOf(now)
	return encodeWorkload(w)
}

func marshalDet(m proto.Message) ([]byte, error) {
	return protofast.MarshalDeterministic(m)
}

func cloneWorkload(w *meridianv1.Workload) *meridianv1.Workload {
	return protofast.Clone(w)
}
