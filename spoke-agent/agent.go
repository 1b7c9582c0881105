package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/internal/ctxtime"
	"github.com/meridian-gpu/meridian/internal/fifomap"
	"github.com/meridian-gpu/meridian/internal/protofast"
	"github.com/meridian-gpu/meridian/internal/telemetry"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// Defaults for Config.
const (
	DefaultHeartbeatInterval = 2 * time.Second
	DefaultAdvertiseInterval = 10 * time.Second
	DefaultChangeDelay       = 100 * time.Millisecond
	DefaultRegisterTimeout   = 2 * time.Second
	DefaultAnswerTimeout     = 10 * time.Second
	// DefaultClockSkew is how far the agent's clock may be behind the
	// hub's for the stale-dispatch check after a long silence (see
	// Config.ClockSkew). Clocks kept by NTP agree to milliseconds.
	DefaultClockSkew = time.Second
	// DefaultLaunchParallelism is how many connector Launch and Cancel
	// calls run at once. Launches wait on the backend (sbatch, the
	// apiserver), so a few in flight keep the cluster busy without
	// hammering it.
	DefaultLaunchParallelism = 16
	// messagesPerLaunch is how many dispatch messages are handled per
	// launch slot. A handled dispatch still waits for its ACCEPTED event
	// to be stored before its message is acknowledged; that wait must not
	// hold a launch slot, or the launch rate falls to the slots divided by
	// the event store's round trip (at 200 dispatches/s per agent, bursts
	// queued for a quarter second behind 16 slots).
	messagesPerLaunch = 4
	// MaxLaunchParallelism bounds Config.LaunchParallelism.
	MaxLaunchParallelism = natsbus.MaxHandlers
	// MaxRemembered bounds how many finished or refused dispatch ids the
	// agent remembers to answer redeliveries without relaunching.
	MaxRemembered = 100000
)

// registerRoot is the core NATS request subject prefix for Register (the
// hub's leader answers on meridian.register.*).
const registerRoot = "meridian.register."

// RegisterSubject is the core NATS request subject for Register.
func RegisterSubject(cluster string) string { return registerRoot + cluster }

// EventID is the id (and Nats-Msg-Id) of the event of type t for a
// dispatch: "<dispatch id>:<type>", for example "d-42:running". It is the
// same across redeliveries and agent restarts, so each state of a dispatch
// is stored once.
func EventID(dispatchID string, t agentv1.DispatchEventType) string {
	return dispatchID + ":" + eventName(t)
}

func eventName(t agentv1.DispatchEventType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "DISPATCH_EVENT_TYPE_"))
}

// Config configures an Agent.
type Config struct {
	// ClusterID identifies the cluster; required, a valid NATS token.
	ClusterID string
	// Bus is the NATS connection; required. The agent does not close it.
	Bus *natsbus.Bus
	// Connector drives the cluster; required.
	Connector Connector
	// Logger receives structured logs; nil drops them.
	Logger *slog.Logger
	// HeartbeatInterval between heartbeats; 0 means the default.
	HeartbeatInterval time.Duration
	// AdvertiseInterval between full advertisements; 0 means the default.
	AdvertiseInterval time.Duration
	// ChangeDelay gathers changes before a delta is sent; 0 means the default.
	ChangeDelay time.Duration
	// RegisterTimeout bounds the wait for the hub's RegisterAck.
	RegisterTimeout time.Duration
	// AnswerTimeout bounds how long a dispatch waits for its ACCEPTED or
	// REJECTED event to be stored before it is left for redelivery.
	AnswerTimeout time.Duration
	// ClockSkew is how far this agent's clock may be behind the hub's.
	// After a silence longer than the hub's cluster timeout the agent
	// refuses dispatches the hub created before the silence ended, and the
	// hub stamps them with its own clock: a dispatch created up to
	// ClockSkew after the end (by this clock) is refused too, so that a
	// clock running behind cannot let a requeued dispatch launch twice.
	// Refusing is always safe (the hub requeues). 0 means the default.
	ClockSkew time.Duration
	// Version is reported in Register.
	Version string
	// Now returns the time stamped on messages; nil means time.Now.
	Now func() time.Time
	// Metrics receives the agent's metrics; nil means a private registry
	// (see Agent.Metrics).
	Metrics *Metrics
	// FullAdvertOnChange sends a full advertisement after each change
	// instead of a delta.
	FullAdvertOnChange bool
	// LaunchParallelism is how many connector Launch and Cancel calls run
	// at the same time (never two for one dispatch id); 0 means
	// DefaultLaunchParallelism, 1 handles dispatch messages one at a time.
	// Up to four times as many messages are in hand at once, waiting for
	// a slot or for their events to be stored.
	LaunchParallelism int
}

// Agent connects one cluster to the hub. Create it with New and start it
// with Run.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	conn    Connector
	bus     *natsbus.Bus
	session string
	m       *Metrics

	hbInterval  atomic.Int64
	advInterval atomic.Int64
	refused     atomic.Bool
	// eventBatches: the hub that last accepted this agent reads EventBatch
	// (RegisterAck.capabilities).
	eventBatches atomic.Bool
	// unanswered: the last register got no answer (no hub listening, or
	// none in time). reconnectLoop tries again with a growing pause, so
	// an agent that started before its hub, or outlived a hub restart
	// with NATS up all along, registers once a hub is back.
	unanswered atomic.Bool
	// lostTimeout is the hub's cluster timeout (RegisterAck.lost_timeout);
	// lastBeat when a heartbeat was last published (unix nanoseconds,
	// cfg.Now). suspectBefore ends the last silence longer than
	// lostTimeout (a paused process, a partition): the hub may have
	// declared the cluster LOST and given every dispatch it had not seen
	// accepted to another cluster, so one created before then is refused
	// rather than launched next to its replacement (see staleAfterSilence).
	lostTimeout, lastBeat, suspectBefore atomic.Int64

	eventSeq atomic.Uint64 // guarded by mu for ordering, atomic for reads
	hbSeq    atomic.Uint64
	advSeq   atomic.Uint64

	mu      sync.Mutex
	held    map[string]*entry
	done    *fifomap.Map // final answers, encoded, by dispatch id (up to MaxRemembered)
	out     []*outItem
	sending int // the first sending items of out are being published now
	outWake chan struct{}

	// perID serializes the handling of messages for one dispatch id, so
	// a cancel never overtakes the launch it cancels.
	perID keyedMutex
	slots chan struct{} // LaunchParallelism connector calls at once
	// launchq feeds the launch workers the dispatches of batches
	// (batch.go); stopped closes when Run stops them.
	launchq chan *launchJob
	stopped chan struct{}

	advMu     sync.Mutex
	lastNodes map[string]*agentv1.Node // the last nodes sent, for deltas
	seenNodes map[string]bool          // sendDelta's scratch set, kept between deltas
	sentSeq   atomic.Uint64            // seq of the last advertisement or delta sent
	changed   chan struct{}
	askedFull chan struct{} // a hub asked for a full advertisement
	rejoin    chan struct{} // a vanished connector is back

	running atomic.Bool
}

type entry struct {
	id, workloadID string
	launching      bool
	pending        []WorkEvent
	published      agentv1.DispatchEventType // last stored non-terminal state
	terminal       bool
	// trace is the span context of the dispatch's delivery here: its
	// events continue it (tracing.go). Invalid when not traced.
	trace trace.SpanContext
}

type outItem struct {
	ev     *agentv1.DispatchEvent
	stored chan struct{}
	trace  trace.SpanContext // the dispatch's, for the event's publish
}

// New checks cfg and returns an Agent.
func New(cfg Config) (*Agent, error) {
	if err := natsbus.ValidateClusterID(cfg.ClusterID); err != nil {
		return nil, fmt.Errorf("agent: ClusterID: %w", err)
	}
	if cfg.Bus == nil {
		return nil, errors.New("agent: Bus is required")
	}
	if cfg.Connector == nil {
		return nil, errors.New("agent: Connector is required")
	}
	for name, d := range map[string]time.Duration{
		"HeartbeatInterval": cfg.HeartbeatInterval, "AdvertiseInterval": cfg.AdvertiseInterval,
		"ChangeDelay": cfg.ChangeDelay, "RegisterTimeout": cfg.RegisterTimeout, "AnswerTimeout": cfg.AnswerTimeout,
		"ClockSkew": cfg.ClockSkew,
	} {
		if d < 0 {
			return nil, fmt.Errorf("agent: %s must not be negative, got %s", name, d)
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.HeartbeatInterval, DefaultHeartbeatInterval)
	def(&cfg.AdvertiseInterval, DefaultAdvertiseInterval)
	def(&cfg.ChangeDelay, DefaultChangeDelay)
	def(&cfg.RegisterTimeout, DefaultRegisterTimeout)
	def(&cfg.AnswerTimeout, DefaultAnswerTimeout)
	def(&cfg.ClockSkew, DefaultClockSkew)
	switch p := cfg.LaunchParallelism; {
	case p == 0:
		cfg.LaunchParallelism = DefaultLaunchParallelism
	case p < 0 || p > MaxLaunchParallelism:
		return nil, fmt.Errorf("agent: LaunchParallelism must be between 1 and %d, got %d", MaxLaunchParallelism, p)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := cfg.Metrics
	if m == nil {
		m = NewMetrics(nil)
	}
	var sid [8]byte
	if _, err := rand.Read(sid[:]); err != nil {
		return nil, fmt.Errorf("agent: session id: %w", err)
	}
	a := &Agent{
		cfg: cfg, conn: cfg.Connector, bus: cfg.Bus, session: hex.EncodeToString(sid[:]), m: m,
		held: map[string]*entry{}, done: fifomap.New(MaxRemembered),
		outWake: make(chan struct{}, 1), changed: make(chan struct{}, 1), askedFull: make(chan struct{}, 1), rejoin: make(chan struct{}, 1),
		slots:   make(chan struct{}, cfg.LaunchParallelism),
		launchq: make(chan *launchJob), stopped: make(chan struct{}),
	}
	a.log = log.With("cluster", cfg.ClusterID, "session", a.session)
	a.hbInterval.Store(int64(cfg.HeartbeatInterval))
	a.advInterval.Store(int64(cfg.AdvertiseInterval))
	return a, nil
}

// SessionID is this agent process's random session id.
func (a *Agent) SessionID() string { return a.session }

// Metrics returns the agent's metrics (serve Metrics().Handler() on /metrics).
func (a *Agent) Metrics() *Metrics { return a.m }

// HeldDispatch is one dispatch the agent holds (launched, not yet reported
// finished to the hub).
type HeldDispatch struct {
	DispatchID string
	WorkloadID string
	State      agentv1.DispatchEventType
}

// Held lists the dispatches the agent holds, sorted by id: what its next
// heartbeat will carry.
func (a *Agent) Held() []HeldDispatch {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]HeldDispatch, 0, len(a.held))
	for _, e := range a.held {
		st := e.published
		if st == agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_UNSPECIFIED {
			st = agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED
		}
		out = append(out, HeldDispatch{DispatchID: e.id, WorkloadID: e.workloadID, State: st})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].DispatchID < out[j].DispatchID })
	return out
}

// silent reports whether the agent must not talk to the hub now.
func (a *Agent) silent() bool {
	if a.refused.Load() {
		return true
	}
	if v, ok := a.conn.(Vanisher); ok && v.Vanished() {
		return true
	}
	return false
}

// Run serves the cluster until ctx ends. It returns an error only if it
// cannot start (its dispatch consumer does not exist and cannot be made);
// once started, NATS outages are ridden out and never stop local work.
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("agent: Run called twice")
	}
	// A cluster registered on the hub (meridianctl clusters register) has
	// its consumer, and so the streams, made by the hub; its credential
	// may not make them. Without one (a development setup with broad
	// rights) the agent makes them itself, as before.
	if ok, err := a.bus.DispatchConsumerExists(ctx, a.cfg.ClusterID); err != nil {
		return fmt.Errorf("agent: %w", err)
	} else if !ok {
		if err := a.bus.EnsureStreams(ctx); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	}
	if err := a.relist(ctx); err != nil {
		return fmt.Errorf("agent: list local work: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	start := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	start(a.publishLoop)
	start(a.eventLoop)
	for range a.cfg.LaunchParallelism {
		start(a.launchWorker)
	}
	a.register(ctx)
	sub, err := a.bus.ConsumeDispatches(ctx, a.cfg.ClusterID, a.handleDelivery, natsbus.WithHandlers(messageHandlers(a.cfg.LaunchParallelism)))
	if err != nil {
		cancel()
		wg.Wait()
		return fmt.Errorf("agent: %w", err)
	}
	// A hub without a base for our deltas asks for a full advertisement
	// (every hub restarted). Agent credentials issued before this subject
	// existed do not allow it: the server refuses the subscription later
	// (logged as a NATS error), and the periodic one still comes.
	if stopAsk, err := a.bus.SubscribeAdvertRequests(a.cfg.ClusterID, func() { poke(a.askedFull) }); err != nil {
		a.log.Warn("not listening for advertisement requests; hubs that restart wait for the periodic full advertisement", "err", err)
	} else {
		defer stopAsk()
	}
	start(a.heartbeatLoop)
	start(a.advertLoop)
	start(a.reconnectLoop)
	a.log.Info("agent running", "connector", a.conn.Kind(), "heartbeat", a.cfg.HeartbeatInterval, "advertise", a.cfg.AdvertiseInterval, "launch_parallelism", a.cfg.LaunchParallelism)
	<-ctx.Done()
	close(a.stopped)
	sub.Stop()
	wg.Wait()
	a.log.Info("agent stopped; local work keeps running")
	return nil
}

// ---- dispatches ---------------------------------------------------------

var errSilent = errors.New("agent is not talking to the hub (vanished or refused); leaving the message for redelivery")

func (a *Agent) handleDelivery(ctx context.Context, d natsbus.Delivery) error {
	if a.silent() {
		return errSilent
	}
	hm, err := DecodeHubMessage(d.MsgID, d.Payload)
	if err != nil {
		a.m.received.WithLabelValues("undecodable").Inc()
		return natsbus.Permanent(fmt.Errorf("message %s on %s: %w", d.MsgID, d.Subject, err))
	}
	switch k := hm.GetKind().(type) {
	case *agentv1.HubMessage_Dispatch:
		a.m.received.WithLabelValues("dispatch").Inc()
		defer a.perID.lock(k.Dispatch.GetDispatchId())()
		return a.handleDispatch(ctx, k.Dispatch)
	case *agentv1.HubMessage_Cancel:
		a.m.received.WithLabelValues("cancel").Inc()
		defer a.perID.lock(k.Cancel.GetDispatchId())()
		return a.handleCancel(ctx, k.Cancel)
	case *agentv1.HubMessage_Batch:
		return a.handleBatch(ctx, d.Subject, k.Batch)
	default:
		a.m.received.WithLabelValues("unknown").Inc()
		a.log.Warn("ignoring hub message of an unknown kind", "msg_id", d.MsgID)
		return nil
	}
}

func (a *Agent) handleDispatch(ctx context.Context, d *agentv1.Dispatch) error {
	item, err := a.startDispatch(ctx, d)
	if err != nil || item == nil {
		return err
	}
	return a.waitStored(ctx, item)
}

// startDispatch launches d unless it was launched or answered before, and
// returns the answer to wait for before the message is acknowledged: nil
// with a nil error when there is none (a dispatch for another cluster).
// The caller holds d's per-id lock.
func (a *Agent) startDispatch(ctx context.Context, d *agentv1.Dispatch) (*outItem, error) {
	if d.GetDispatchId() == "" {
		return nil, natsbus.Permanent(errors.New("dispatch: dispatch_id is empty"))
	}
	if c := d.GetClusterId(); c != "" && c != a.cfg.ClusterID {
		a.log.Warn("dropping a dispatch for another cluster", "dispatch_id", d.DispatchId, "target", c)
		return nil, nil
	}
	id := d.DispatchId
	log := a.log.With("dispatch_id", id, "workload_id", d.GetWorkloadId())
	a.mu.Lock()
	if ev, ok := a.finishedLocked(id); ok {
		// Finished or refused before: answer the same way again.
		item := a.enqueueLocked(ev)
		a.mu.Unlock()
		a.m.launches.WithLabelValues("duplicate").Inc()
		log.Debug("redelivered dispatch already finished; answering again", "event", ev.GetType())
		return item, nil
	}
	if e, ok := a.held[id]; ok && !e.launching {
		// Answer with what was stored: RUNNING may have been sent in
		// place of ACCEPTED, and the same event id is deduplicated.
		answer := agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED
		if e.published == agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING {
			answer = e.published
		}
		item := a.enqueueLocked(a.newEvent(id, e.workloadID, answer))
		a.mu.Unlock()
		a.m.launches.WithLabelValues("duplicate").Inc()
		log.Debug("redelivered dispatch already launched; not launching again")
		return item, nil
	}
	e := &entry{id: id, workloadID: d.GetWorkloadId(), launching: true, trace: trace.SpanContextFromContext(ctx)}
	a.held[id] = e
	a.mu.Unlock()
	ctx, endLaunch := startLaunch(ctx, d, a.conn.Kind())

	err := a.withSlot(ctx, func() error { return a.launchFresh(ctx, d, log) })
	endLaunch(err)

	a.mu.Lock()
	var item *outItem
	switch {
	case err == nil:
		e.launching = false
		item = a.enqueueLocked(a.newEvent(id, e.workloadID, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED))
		pending := e.pending
		e.pending = nil
		for _, ev := range pending {
			a.applyLocked(ev)
		}
		a.m.launches.WithLabelValues("accepted").Inc()
		log.Info("dispatch accepted")
	case IsRejected(err):
		delete(a.held, id)
		ev := a.newEvent(id, e.workloadID, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_REJECTED)
		ev.Reason = RejectReason(err)
		item = a.enqueueLocked(ev)
		item.trace = e.trace
		a.rememberLocked(ev)
		a.m.launches.WithLabelValues("rejected").Inc()
		log.Info("dispatch rejected", "reason", ev.Reason)
	default:
		delete(a.held, id)
		a.mu.Unlock()
		a.m.launches.WithLabelValues("error").Inc()
		log.Warn("launch failed; the dispatch will be redelivered", "err", err)
		return nil, fmt.Errorf("launch %s: %w", id, err)
	}
	a.mu.Unlock()
	a.notifyChange()
	return item, nil
}

// messageHandlers is how many dispatch messages are handled at once for
// p launch slots: one at a time when p is 1 (strict order), else
// messagesPerLaunch per slot.
func messageHandlers(p int) int {
	if p <= 1 {
		return 1
	}
	return min(natsbus.MaxHandlers, p*messagesPerLaunch)
}

// withSlot runs a connector call in one of the LaunchParallelism slots.
func (a *Agent) withSlot(ctx context.Context, call func() error) error {
	select {
	case a.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-a.slots }()
	return call()
}

func (a *Agent) handleCancel(ctx context.Context, c *agentv1.DispatchCancel) error {
	id := c.GetDispatchId()
	if id == "" {
		return natsbus.Permanent(errors.New("cancel: dispatch_id is empty"))
	}
	if cl := c.GetClusterId(); cl != "" && cl != a.cfg.ClusterID {
		a.log.Warn("dropping a cancel for another cluster", "dispatch_id", id, "target", cl)
		return nil
	}
	log := a.log.With("dispatch_id", id, "preempt", c.GetPreempt())
	a.mu.Lock()
	if ev, ok := a.finishedLocked(id); ok {
		item := a.enqueueLocked(ev)
		a.mu.Unlock()
		return a.waitStored(ctx, item)
	}
	_, held := a.held[id]
	a.mu.Unlock()
	if err := a.withSlot(ctx, func() error { return a.m.connectorError("cancel", a.conn.Cancel(ctx, id, c.GetPreempt())) }); err != nil {
		log.Warn("cancel failed; will retry", "err", err)
		return fmt.Errorf("cancel %s: %w", id, err)
	}
	if held {
		log.Info("dispatch cancel requested", "reason", c.GetReason())
		return nil // the connector reports the final state
	}
	// Unknown here: answer, and remember it so a late dispatch is not launched.
	t := agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_CANCELLED
	if c.GetPreempt() {
		t = agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_PREEMPTED
	}
	a.mu.Lock()
	ev := a.newEvent(id, c.GetWorkloadId(), t)
	ev.Reason = "not running on this cluster"
	if r := c.GetReason(); r != "" {
		ev.Reason += "; hub said: " + r
	}
	item := a.enqueueLocked(ev)
	a.rememberLocked(ev)
	a.mu.Unlock()
	log.Info("cancel for a dispatch this cluster does not run; answered")
	return a.waitStored(ctx, item)
}

// noteSilence records the end of a silence longer than the hub's cluster
// timeout, if the time since the last heartbeat is one; now is cfg.Now.
func (a *Agent) noteSilence(now time.Time) {
	lt, last := a.lostTimeout.Load(), a.lastBeat.Load()
	if lt <= 0 || last == 0 || now.UnixNano()-last <= lt {
		return
	}
	for {
		cur := a.suspectBefore.Load()
		if cur >= now.UnixNano() || a.suspectBefore.CompareAndSwap(cur, now.UnixNano()) {
			return
		}
	}
}

// staleAfterSilence refuses a dispatch created before the end of this
// agent's last silence longer than the hub's cluster timeout: the hub may
// have declared the cluster LOST meanwhile and requeued the dispatch
// elsewhere, and its cancel is still behind the dispatch in the stream.
// Refusing is safe: a hub that still counted on it requeues it. The
// creation time is the hub's clock and the end of the silence this
// agent's, so the end is moved ClockSkew later.
func (a *Agent) staleAfterSilence(d *agentv1.Dispatch) error {
	created := d.GetCreatedAt()
	if created == nil {
		return nil
	}
	a.noteSilence(a.cfg.Now())
	if sb := a.suspectBefore.Load(); sb > 0 && created.AsTime().UnixNano() < sb+int64(a.cfg.ClockSkew) {
		return Reject("stale dispatch: created %s, before this cluster's silence of more than the hub's cluster timeout (%s) ended; the hub may have requeued it elsewhere",
			created.AsTime().UTC().Format(time.RFC3339Nano), time.Duration(a.lostTimeout.Load()))
	}
	return nil
}

// launchFresh launches d unless it is stale (staleAfterSilence), checked
// in the launch slot right before the launch: a dispatch can wait for a
// slot a long time, and the process can be paused meanwhile. A pause
// during the launch itself (a frozen VM, a stopped process) is caught by
// checking again afterwards: the run just started is cancelled and the
// dispatch refused, so it does not run for long beside the copy the hub
// gave another cluster. Found by the chaos soak: an agent stopped with a
// batch of dispatches waiting for slots launched them on waking.
func (a *Agent) launchFresh(ctx context.Context, d *agentv1.Dispatch, log *slog.Logger) error {
	if err := a.staleAfterSilence(d); err != nil {
		return err
	}
	if err := a.m.connectorError("launch", a.conn.Launch(ctx, d)); err != nil {
		return err
	}
	// Fresh before the launch, so stale now only if a silence ended
	// during it.
	stale := a.staleAfterSilence(d)
	if stale == nil {
		return nil
	}
	if err := a.m.connectorError("cancel", a.conn.Cancel(ctx, d.GetDispatchId(), false)); err != nil {
		// Leave it accepted: the hub cancels a dispatch it gave to
		// another cluster once it hears of this one.
		log.Warn("a silence ended while the dispatch launched, and cancelling it failed; reporting it accepted", "err", err)
		return nil
	}
	log.Warn("a silence longer than the hub's cluster timeout ended while the dispatch launched; cancelled it")
	return stale
}

// waitStored waits until item's event is stored, so that a dispatch is
// acknowledged only after its answer is safe.
func (a *Agent) waitStored(ctx context.Context, item *outItem) error {
	expired, stop := a.answerDeadline()
	defer stop()
	return a.waitStoredBy(ctx, item, expired)
}

// answerDeadline returns a channel that closes AnswerTimeout from now,
// and the function that stops it.
func (a *Agent) answerDeadline() (expired <-chan struct{}, stop func() bool) {
	c := make(chan struct{})
	t := time.AfterFunc(a.cfg.AnswerTimeout, func() { close(c) })
	return c, t.Stop
}

// waitStoredBy waits until item's event is stored, ctx ends or expired
// closes.
func (a *Agent) waitStoredBy(ctx context.Context, item *outItem, expired <-chan struct{}) error {
	select {
	case <-item.stored:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-expired:
		return fmt.Errorf("event %s not stored within %s; leaving the dispatch for redelivery", item.ev.GetEventId(), a.cfg.AnswerTimeout)
	}
}

// ---- connector events ---------------------------------------------------

func (a *Agent) eventLoop(ctx context.Context) {
	ch := a.conn.Events()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-ch:
			if !ok {
				a.log.Warn("connector closed its event channel")
				return
			}
			a.mu.Lock()
			a.applyLocked(ev)
			a.mu.Unlock()
			a.notifyChange()
		}
	}
}

func stateEvent(s WorkState) agentv1.DispatchEventType {
	switch s {
	case StatePending:
		return agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED
	case StateRunning:
		return agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING
	case StateSucceeded:
		return agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED
	case StateFailed:
		return agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_FAILED
	case StatePreempted:
		return agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_PREEMPTED
	case StateCancelled:
		return agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_CANCELLED
	}
	return agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_UNSPECIFIED
}

func terminal(t agentv1.DispatchEventType) bool {
	switch t {
	case agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_FAILED,
		agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_PREEMPTED, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_CANCELLED,
		agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_REJECTED:
		return true
	}
	return false
}

// applyLocked turns a connector event into a queued DispatchEvent.
func (a *Agent) applyLocked(ev WorkEvent) {
	t := stateEvent(ev.State)
	if t == agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_UNSPECIFIED || ev.DispatchID == "" {
		a.log.Warn("ignoring a connector event without a state or id", "dispatch_id", ev.DispatchID, "state", ev.State)
		return
	}
	if a.done.Has(ev.DispatchID) {
		return
	}
	e := a.held[ev.DispatchID]
	if e == nil {
		e = &entry{id: ev.DispatchID, workloadID: ev.WorkloadID}
		a.held[ev.DispatchID] = e
	}
	if e.launching {
		e.pending = append(e.pending, ev)
		return
	}
	if e.terminal {
		return
	}
	if e.workloadID == "" {
		e.workloadID = ev.WorkloadID
	}
	out := a.newEvent(ev.DispatchID, e.workloadID, t)
	out.Reason = ev.Reason
	if t == agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_FAILED && out.Reason == "" {
		out.Reason = "failed"
	}
	out.ExitCode = ev.ExitCode
	if !ev.Time.IsZero() {
		out.Time = timestamppb.New(ev.Time)
	}
	out.Usage = &agentv1.Usage{GpuMilliSeconds: ev.GPUMilliSeconds, WallTime: durationpb.New(ev.WallTime)}
	if terminal(t) {
		e.terminal = true
	}
	a.enqueueLocked(out)
}

// ---- outbox -------------------------------------------------------------

func (a *Agent) newEvent(id, workloadID string, t agentv1.DispatchEventType) *agentv1.DispatchEvent {
	return &agentv1.DispatchEvent{
		DispatchId: id, WorkloadId: workloadID, ClusterId: a.cfg.ClusterID, Type: t,
		Time: timestamppb.New(a.cfg.Now()), SessionId: a.session, EventId: EventID(id, t),
	}
}

// enqueueLocked appends ev to the ordered outbox; a.mu must be held.
//
// A RUNNING event whose dispatch still has its ACCEPTED waiting in the
// outbox (not yet being published) takes that event's place instead: the
// work started before anyone was told it was accepted (a connector whose
// launch starts the work at once), and the hub reads RUNNING as accepted
// too. One event instead of two means one stored message, and one write
// of the workload and one watch event fewer at the hub, for a transition
// nobody could have seen separately. Whoever waits for the ACCEPTED to be
// stored waits for the RUNNING, which is stored in its place.
func (a *Agent) enqueueLocked(ev *agentv1.DispatchEvent) *outItem {
	if ev.Type == agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING {
		if item := a.unsentAcceptedLocked(ev.DispatchId); item != nil {
			ev.Seq = item.ev.Seq // its place in the order
			ev.SessionId = a.session
			item.ev = ev
			return item
		}
	}
	ev.Seq = a.eventSeq.Add(1)
	ev.SessionId = a.session
	item := &outItem{ev: ev, stored: make(chan struct{})}
	if e := a.held[ev.DispatchId]; e != nil {
		item.trace = e.trace
	}
	a.out = append(a.out, item)
	a.m.outbox.Set(float64(len(a.out)))
	poke(a.outWake)
	return item
}

// unsentAcceptedLocked is the outbox item holding dispatch id's ACCEPTED
// when it is not being published now, else nil. It looks back from the
// newest item: the ACCEPTED was queued a moment ago, if at all.
func (a *Agent) unsentAcceptedLocked(id string) *outItem {
	for i := len(a.out) - 1; i >= a.sending; i-- {
		it := a.out[i]
		if it.ev.GetDispatchId() != id {
			continue
		}
		if it.ev.GetType() == agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED {
			return it
		}
		return nil // a later event of the dispatch is queued: keep the order
	}
	return nil
}

// doneEntry is a remembered final answer, encoded: up to MaxRemembered of
// them live as long as the agent. Decoded events were a dozen pointers
// each for the garbage collector to follow, and even encoded ones in a
// map two (the key and the slice); in a fifomap they are none (at 200
// dispatches/s an agent holding 100,000 decoded events spent more CPU
// marking them than on its dispatches).
type doneEntry []byte

// rememberedEvent encodes ev with its generated code, which never checks
// strings and so does not fail on what a connector wrote (its error can
// come only from nested messages' generated code, which has none to give).
func rememberedEvent(ev *agentv1.DispatchEvent) (doneEntry, error) {
	return ev.MarshalVT()
}

// event is a fresh copy of the remembered answer; an error (bytes this
// process encoded that do not decode) means it is as good as forgotten.
func (d doneEntry) event() (*agentv1.DispatchEvent, error) {
	ev := &agentv1.DispatchEvent{}
	return ev, ev.UnmarshalVT(d)
}

// finishedLocked is the remembered final answer for id, if there is one.
func (a *Agent) finishedLocked(id string) (*agentv1.DispatchEvent, bool) {
	d, ok := a.done.Get(id)
	if !ok {
		return nil, false
	}
	ev, err := doneEntry(d).event()
	if err != nil {
		a.log.Error("a remembered final answer does not decode; treating the dispatch as unknown", "dispatch_id", id, "err", err)
		return nil, false
	}
	return ev, true
}

// rememberLocked records a final answer for id, bounded by MaxRemembered.
func (a *Agent) rememberLocked(ev *agentv1.DispatchEvent) {
	d, err := rememberedEvent(ev)
	if err != nil {
		a.log.Error("a final answer does not encode; it is not remembered", "dispatch_id", ev.DispatchId, "err", err)
		return
	}
	a.done.Put(ev.DispatchId, d)
}

// publishLoop stores outbox events in order, a batch per round trip,
// retrying each event until it is stored. Events queued while a batch is
// in flight go out in the next one, so a burst of launches costs a few
// round trips rather than one per event.
func (a *Agent) publishLoop(ctx context.Context) {
	backoff := 50 * time.Millisecond
	for {
		a.mu.Lock()
		batch := a.out[:min(len(a.out), natsbus.MaxPublishBatch)]
		batch = batch[:len(batch):len(batch)] // appends by enqueue never alias it
		quiet := a.silent()
		if !quiet {
			a.sending = len(batch) // enqueue must not change these events now
		}
		a.mu.Unlock()
		if len(batch) == 0 || quiet {
			wait := time.Duration(0)
			if len(batch) > 0 {
				wait = 50 * time.Millisecond
			}
			if !a.sleep(ctx, wait) {
				return
			}
			continue
		}
		errs := a.publishBatch(ctx, batch)
		if ctx.Err() != nil {
			return
		}
		// Drop what was stored; keep what failed, in order, ahead of
		// anything queued meanwhile.
		var failed []*outItem
		a.mu.Lock()
		for i, item := range batch {
			if errs[i] != nil {
				failed = append(failed, item)
				continue
			}
			a.storedLocked(item.ev)
		}
		a.out = append(failed, a.out[len(batch):]...)
		a.sending = 0
		a.m.outbox.Set(float64(len(a.out)))
		a.mu.Unlock()
		for i, item := range batch {
			if errs[i] == nil {
				a.m.events.WithLabelValues(eventName(item.ev.Type)).Inc()
				close(item.stored)
			}
		}
		if len(failed) == 0 {
			backoff = 50 * time.Millisecond
			continue
		}
		a.m.publishErrors.WithLabelValues("event").Add(float64(len(failed)))
		a.log.Debug("events not stored yet; retrying", "failed", len(failed), "first", failed[0].ev.EventId, "err", errs[slices.Index(batch, failed[0])], "backoff", backoff)
		if !a.sleep(ctx, backoff) {
			return
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// publishBatch publishes batch's events; errs[i] is nil once batch[i] is
// stored. To a hub that reads them, events go as EventBatch messages of
// up to maxEventsPerMessage; otherwise one message each.
func (a *Agent) publishBatch(ctx context.Context, batch []*outItem) []error {
	per := 1
	if a.eventBatches.Load() {
		per = maxEventsPerMessage
	}
	var (
		msgs  []natsbus.Event
		spans [][2]int // msgs[i] carries batch[spans[i][0]:spans[i][1]]
	)
	errs := make([]error, len(batch))
	for lo := 0; lo < len(batch); lo += per {
		hi := min(lo+per, len(batch))
		m, err := eventMessage(batch[lo:hi])
		if err != nil {
			for i := lo; i < hi; i++ {
				errs[i] = err
			}
			continue
		}
		msgs, spans = append(msgs, m), append(spans, [2]int{lo, hi})
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for i, err := range a.bus.PublishEvents(pctx, a.cfg.ClusterID, msgs) {
		for j := spans[i][0]; j < spans[i][1]; j++ {
			errs[j] = err
		}
	}
	return errs
}

// maxEventsPerMessage bounds an EventBatch (an event is a few hundred
// bytes; the message stays far below NATS's payload limit).
const maxEventsPerMessage = 128

// eventMessage encodes one event as it always was (its event id as the
// message id, its trace in the headers), or several as an EventBatch:
// each keeps its trace in trace_parent, and the message id, derived from
// every event id, deduplicates a retried publish of the same batch.
func eventMessage(items []*outItem) (natsbus.Event, error) {
	if len(items) == 1 {
		payload, err := protofast.MarshalDeterministic(items[0].ev)
		return natsbus.Event{MsgID: items[0].ev.EventId, Payload: payload, Trace: items[0].trace}, err
	}
	b := &agentv1.EventBatch{Events: make([]*agentv1.DispatchEvent, len(items))}
	for i, item := range items {
		ev := item.ev
		if item.trace.IsSampled() {
			ev = protofast.Clone(ev)
			ev.TraceParent = telemetry.TraceParent(item.trace)
		}
		b.Events[i] = ev
	}
	payload, err := protofast.MarshalDeterministic(b)
	id := agentv1.BatchMsgID(len(items), func(i int) string { return items[i].ev.GetEventId() })
	return natsbus.Event{MsgID: id, Payload: payload}, err
}

// sleep waits d, or for the outbox to be woken when d is 0; false when ctx ended.
func (a *Agent) sleep(ctx context.Context, d time.Duration) bool {
	if d == 0 {
		select {
		case <-ctx.Done():
			return false
		case <-a.outWake:
			return true
		}
	}
	return ctxtime.Sleep(ctx, d)
}

// storedLocked updates what the heartbeat reports once ev is stored.
func (a *Agent) storedLocked(ev *agentv1.DispatchEvent) {
	e := a.held[ev.DispatchId]
	if terminal(ev.Type) {
		if e != nil && !e.launching {
			delete(a.held, ev.DispatchId)
		}
		a.rememberLocked(ev)
	} else if e != nil {
		e.published = ev.Type
	}
	a.m.held.Set(float64(len(a.held)))
}

// ---- reconcile ----------------------------------------------------------

// relist rebuilds the held set from the connector: running work is held
// (and its state reported again, deduplicated by event id); work that
// finished while nobody listened is reported.
func (a *Agent) relist(ctx context.Context) error {
	list, err := a.conn.List(ctx)
	if a.m.connectorError("list", err) != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ws := range list {
		if a.done.Has(ws.DispatchID) {
			continue
		}
		if e, ok := a.held[ws.DispatchID]; ok && (e.launching || e.terminal || !ws.State.Terminal()) {
			continue // already tracked; the connector's events follow
		}
		ev := WorkEvent{DispatchID: ws.DispatchID, WorkloadID: ws.WorkloadID, State: ws.State, ExitCode: ws.ExitCode,
			Reason: ws.Reason, GPUMilliSeconds: ws.GPUMilliSeconds, Time: ws.FinishedAt}
		if !ws.State.Terminal() {
			ev.Time = ws.StartedAt
		} else if !ws.StartedAt.IsZero() {
			ev.WallTime = ws.FinishedAt.Sub(ws.StartedAt)
		}
		if _, ok := a.held[ws.DispatchID]; !ok {
			// Adopted from an earlier session: its ACCEPTED may never have
			// been stored. Queue it first (a stored copy is deduplicated by
			// its id) so the hub sees the usual order; work that started
			// gets RUNNING, which the earlier session may have sent in
			// ACCEPTED's place.
			// (Running work needs nothing first: its RUNNING follows.)
			a.held[ws.DispatchID] = &entry{id: ws.DispatchID, workloadID: ws.WorkloadID}
			switch {
			case ws.State == StateRunning:
			case !ws.StartedAt.IsZero():
				a.enqueueLocked(a.newEvent(ws.DispatchID, ws.WorkloadID, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING))
			default:
				a.enqueueLocked(a.newEvent(ws.DispatchID, ws.WorkloadID, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED))
			}
		}
		a.applyLocked(ev)
	}
	a.m.held.Set(float64(len(a.held)))
	a.log.Info("local work listed", "dispatches", len(list), "held", len(a.held))
	return nil
}

// register sends Register and applies the hub's RegisterAck. A hub that does
// not answer is not an error: heartbeats carry the same information.
func (a *Agent) register(ctx context.Context) {
	inv, err := a.conn.Inventory(ctx)
	if a.m.connectorError("inventory", err) != nil {
		a.log.Warn("inventory for register failed", "err", err)
		inv = &Inventory{}
	}
	known := a.Held()
	ids := make([]string, len(known))
	for i, h := range known {
		ids[i] = h.DispatchID
	}
	req := &agentv1.Register{
		ClusterId: a.cfg.ClusterID, ProtocolVersion: agentv1.ProtocolVersion_PROTOCOL_VERSION_1,
		Connector: connectorKind(a.conn.Kind()), AgentVersion: a.cfg.Version, SessionId: a.session,
		Labels: inv.Labels, FractionalModes: inv.FractionalModes, KnownDispatchIds: ids, SentAt: timestamppb.New(a.cfg.Now()),
	}
	payload, err := proto.Marshal(req)
	if err != nil {
		a.log.Error("marshal register", "err", err)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, a.cfg.RegisterTimeout)
	defer cancel()
	msg, err := a.bus.Conn().RequestWithContext(rctx, RegisterSubject(a.cfg.ClusterID), payload)
	if err != nil {
		if !a.unanswered.Load() { // say it once, not at every retry
			if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) {
				a.log.Info("no hub answered register; carrying on with heartbeats and trying again", "err", err)
			} else {
				a.log.Warn("register failed; carrying on with heartbeats and trying again", "err", err)
			}
		}
		a.refused.Store(false)
		a.unanswered.Store(true)
		return
	}
	if a.unanswered.Swap(false) {
		a.log.Info("a hub answered register")
	}
	var ack agentv1.RegisterAck
	if err := proto.Unmarshal(msg.Data, &ack); err != nil {
		a.log.Warn("undecodable RegisterAck; ignoring it", "err", err)
		return
	}
	if !ack.GetAccepted() {
		a.refused.Store(true)
		a.log.Error("hub refused this agent; staying silent until a later register is accepted", "reason", ack.GetReason())
		return
	}
	a.refused.Store(false)
	a.eventBatches.Store(slices.Contains(ack.GetCapabilities(), agentv1.CapabilityEventBatch))
	if d := ack.GetHeartbeatInterval().AsDuration(); d > 0 {
		a.hbInterval.Store(int64(d))
	}
	if d := ack.GetAdvertiseInterval().AsDuration(); d > 0 {
		a.advInterval.Store(int64(d))
	}
	if d := ack.GetLostTimeout().AsDuration(); d > 0 {
		a.lostTimeout.Store(int64(d))
	}
	current := map[string]bool{}
	for _, id := range ack.GetCurrentDispatchIds() {
		current[id] = true
	}
	for _, id := range ids { // only what the hub was told about
		if current[id] {
			continue
		}
		a.log.Info("hub says the dispatch is no longer current; cancelling it", "dispatch_id", id, "hub", ack.GetHubId())
		if err := a.withSlot(ctx, func() error { return a.m.connectorError("cancel", a.conn.Cancel(ctx, id, false)) }); err != nil {
			a.log.Warn("cancel of a stale dispatch failed", "dispatch_id", id, "err", err)
		}
	}
	a.log.Info("registered with the hub", "hub", ack.GetHubId(), "current", len(ack.GetCurrentDispatchIds()))
}

// registerRetryMin is the first pause before registering again when no
// hub answered.
const registerRetryMin = 500 * time.Millisecond

// nextRegisterPause doubles the pause between unanswered registers, from
// registerRetryMin up to limit.
func nextRegisterPause(prev, limit time.Duration) time.Duration {
	next := max(2*prev, registerRetryMin)
	if limit > 0 && next > limit {
		next = max(limit, registerRetryMin)
	}
	return next
}

func connectorKind(k string) meridianv1.ConnectorKind {
	switch k {
	case "kubernetes":
		return meridianv1.ConnectorKind_CONNECTOR_KIND_KUBERNETES
	case "slurm":
		return meridianv1.ConnectorKind_CONNECTOR_KIND_SLURM
	case "simcluster":
		return meridianv1.ConnectorKind_CONNECTOR_KIND_SIMCLUSTER
	}
	return meridianv1.ConnectorKind_CONNECTOR_KIND_UNSPECIFIED
}

// reconnectLoop re-lists local work, re-registers and re-advertises after
// every reconnect, retries a refused register, and retries an unanswered
// one with a pause that doubles from registerRetryMin up to the advertise
// interval.
func (a *Agent) reconnectLoop(ctx context.Context) {
	nc := a.bus.Conn()
	ch := nc.StatusChanged(nats.CONNECTED, nats.DISCONNECTED, nats.RECONNECTING)
	defer nc.RemoveStatusListener(ch)
	a.m.connected.Set(1)
	pause := time.Duration(0)
	for {
		var retry <-chan time.Time
		switch {
		case a.refused.Load():
			retry = time.After(time.Duration(a.advInterval.Load()))
		case a.unanswered.Load():
			pause = nextRegisterPause(pause, time.Duration(a.advInterval.Load()))
			retry = time.After(pause)
		default:
			pause = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-retry:
			a.register(ctx)
		case <-a.rejoin:
			a.log.Info("cluster reachable again; reconciling")
			if err := a.relist(ctx); err != nil {
				a.log.Warn("re-list after returning failed", "err", err)
			}
			a.register(ctx)
			a.sendFull(ctx)
		case st := <-ch:
			if st != nats.CONNECTED {
				a.m.connected.Set(0)
				continue
			}
			a.m.connected.Set(1)
			a.log.Info("reconnected to NATS; reconciling")
			if err := a.relist(ctx); err != nil {
				a.log.Warn("re-list after reconnect failed", "err", err)
			}
			a.register(ctx)
			a.sendFull(ctx)
		}
	}
}
