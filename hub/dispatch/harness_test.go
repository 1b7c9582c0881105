package dispatch

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/convert"
	"github.com/meridian-gpu/meridian/hub/leader"
	"github.com/meridian-gpu/meridian/hub/store"
	embedetcd "github.com/meridian-gpu/meridian/internal/embedded/etcd"
	embednats "github.com/meridian-gpu/meridian/internal/embedded/nats"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

var etcdSrv *embedetcd.Server

func TestMain(m *testing.M) {
	var stop func()
	var err error
	if etcdSrv, stop, err = embedetcd.StartTemp("dispatch-etcd-"); err != nil {
		fmt.Fprintln(os.Stderr, "start embedded etcd:", err)
		os.Exit(1)
	}
	// Every loop's recentWrites is guarded: a kept workload changed after
	// it was put (through a copy that shares its fields) fails the run.
	guard := newWriteGuard()
	testWriteGuard = guard
	// Every write a loop sends without its revision guard is checked
	// against etcd's history (gate_test.go).
	blindCli, err := etcdSrv.Client(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd client:", err)
		os.Exit(1)
	}
	blind := &blindChecker{cli: blindCli}
	testBlind, testBlindWrites = blind, blind.check
	code := m.Run()
	_ = blindCli.Close()
	stop()
	if n, f := blind.report(); len(f) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d of %d unguarded workload writes overwrote the wrong revision; the first: %s\n", len(f), n, f[0])
		code = 1
	}
	if f := guard.Failures(); len(f) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d kept workloads changed after they were put; the first: %s\n", len(f), f[0])
		code = 1
	}
	os.Exit(code)
}

const electionPrefix = "/meridian/leader"

// env is one test's world: a clean etcd key space, a fresh NATS server, and
// helpers to start hubs and agents.
type env struct {
	t    testing.TB
	ctx  context.Context
	url  string
	cli  *clientv3.Client // the test's own client (submits, reads)
	st   *store.Store
	ns   *embednats.Server
	cfg  Config
	hubs []*hub
	// batching makes the agents advertise that they read several
	// dispatches in one message, as real agents do (on by default;
	// off plays an older agent).
	batching bool
	// finished, when set, is the hubs' Deps.Finished.
	finished FinishedSink
}

func newEnv(t testing.TB, cfg Config) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	cli, err := etcdSrv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	if _, err := cli.Delete(ctx, store.Root+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	ns, err := embednats.Start(embednats.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	st, err := store.New(cli, store.Options{MaxTxnOps: etcdSrv.MaxTxnOps()})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, url: ns.ClientURL(), cli: cli, st: st, ns: ns, cfg: cfg, batching: true}
	t.Cleanup(func() {
		for _, h := range e.hubs {
			h.kill()
		}
	})
	return e
}

// hub is one running hub replica: its own etcd client, cache, bus and loop.
type hub struct {
	id     string
	cli    *clientv3.Client
	bus    *natsbus.Bus
	el     *leader.Elector
	loop   *Loop
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (e *env) startHub(id string) *hub {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	cli, err := etcdSrv.Client(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := store.New(cli, store.Options{MaxTxnOps: etcdSrv.MaxTxnOps()})
	if err != nil {
		e.t.Fatal(err)
	}
	cache, err := store.NewCache(cli, store.Root+"/")
	if err != nil {
		e.t.Fatal(err)
	}
	go func() { _ = cache.Run(ctx) }()
	bus, err := natsbus.Connect(ctx, e.url, natsbus.WithName(id), natsbus.WithAckWait(2*time.Second), natsbus.WithNakBackoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	el, err := leader.New(cli, electionPrefix, id, time.Second)
	if err != nil {
		e.t.Fatal(err)
	}
	loop, err := New(Deps{Store: st, Cache: cache, Bus: bus, Elector: el, Config: e.cfg, Finished: e.finished})
	if err != nil {
		e.t.Fatal(err)
	}
	h := &hub{id: id, cli: cli, bus: bus, el: el, loop: loop, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		if err := loop.Run(ctx); err != nil {
			e.t.Logf("hub %s: Run: %v", id, err)
		}
	}()
	e.hubs = append(e.hubs, h)
	return h
}

// kill stops a hub the way a crash does: no resignation; its lease expires.
func (h *hub) kill() {
	h.once.Do(func() {
		_ = h.cli.Close()
		h.cancel()
		h.bus.Close()
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
		}
	})
}

func (h *hub) leading() bool { _, ok := h.loop.Leading(); return ok }

func (e *env) waitFor(what string, timeout time.Duration, cond func() bool) time.Duration {
	e.t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			e.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// putQueue stores a queue with an h100 quota.
func (e *env) putQueue(path string, nominalGPUs int64) {
	e.t.Helper()
	q := &meridianv1.Queue{Path: path, Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "h100", NominalMilliGpus: nominalGPUs * 1000}}}
	b, _ := proto.Marshal(q)
	k, err := store.Key(store.KindQueues, path)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.st.Commit(e.ctx, nil, store.Put(k, b)); err != nil {
		e.t.Fatal(err)
	}
}

// submit stores QUEUED workloads the way the API does.
func (e *env) submit(ws ...*meridianv1.Workload) {
	e.t.Helper()
	var ops []store.Op
	for _, w := range ws {
		if w.CreateTime == nil {
			w.CreateTime = timestamppb.Now()
		}
		w.Status = &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED, PendingReason: PendingWaitingForScheduler}
		b, _ := encodeWorkload(w)
		k, _ := WorkloadKey(w.Id)
		ops = append(ops, store.PutIfModRev(k, b, 0))
		if len(ops) == 100 {
			if _, err := e.st.Commit(e.ctx, nil, ops...); err != nil {
				e.t.Fatal(err)
			}
			ops = nil
		}
	}
	if len(ops) > 0 {
		if _, err := e.st.Commit(e.ctx, nil, ops...); err != nil {
			e.t.Fatal(err)
		}
	}
}

func gpuWorkload(id, queue string, gpus int32) *meridianv1.Workload {
	return &meridianv1.Workload{Id: id, Name: id, Queue: queue, PodSets: []*meridianv1.PodSet{{
		Name: "main", Replicas: 1, Resources: &meridianv1.Resources{GpuMilli: gpus * 1000, AcceleratorClass: "h100"},
	}}}
}

// workloads reads every workload from etcd.
func (e *env) workloads() map[string]*meridianv1.Workload {
	e.t.Helper()
	items, _, err := e.st.List(e.ctx, store.Prefix(store.KindWorkloads), 0)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]*meridianv1.Workload{}
	for _, it := range items {
		w, err := decodeWorkload(it.Value)
		if err != nil {
			e.t.Fatal(err)
		}
		out[w.Id] = w
	}
	return out
}

func (e *env) workload(id string) (*meridianv1.Workload, int64) {
	e.t.Helper()
	k, _ := WorkloadKey(id)
	b, rev, err := e.st.Get(e.ctx, k)
	if err != nil {
		e.t.Fatal(err)
	}
	w, err := decodeWorkload(b)
	if err != nil {
		e.t.Fatal(err)
	}
	return w, rev
}

func (e *env) countPhase(p meridianv1.WorkloadPhase) int {
	n := 0
	for _, w := range e.workloads() {
		if w.GetStatus().GetPhase() == p {
			n++
		}
	}
	return n
}

// dispatchKeys lists the dispatch records stored under their own keys.
func (e *env) dispatchKeys() []string {
	items, _, err := e.st.List(e.ctx, prefDispatches, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	keys := make([]string, 0, len(items))
	for _, it := range items {
		keys = append(keys, it.Key)
	}
	return keys
}

// dispatchRecords counts the dispatches the hub still holds: records
// stored under their own key (older hubs) and workloads that keep a
// current dispatch in their status.
func (e *env) dispatchRecords() int {
	items, _, err := e.st.List(e.ctx, prefDispatches, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	n := len(items)
	for _, w := range e.workloads() {
		if active(w.GetStatus().GetPhase()) && folded(w) {
			n++
		}
	}
	return n
}

// ---- a simulated agent over real NATS ----

type running struct {
	workload string
	used     [][2]int // node index, gpu index
	milli    int32
}

// agent is a minimal spoke: it advertises nodes, launches each dispatch id
// at most once, reports events, honours cancels and heartbeats.
type agent struct {
	e       *env
	id      string
	bus     *natsbus.Bus
	runFor  time.Duration // 0 = run until cancelled
	session string

	mu         sync.Mutex
	nodes      []*agentv1.Node
	seen       map[string]bool
	run        map[string]*running
	launches   map[string]int             // dispatch id -> launches
	byWorkload map[string]map[string]bool // workload id -> dispatch ids launched
	seqs       map[string]map[uint64]bool // dispatch id -> stream sequences it arrived in
	cancels    map[string]int
	// ended are runs that finished without a word to the hub (the old hub
	// applied their events before a restore took etcd back): a cancel for
	// one is answered with how it ended, as the real agent answers from
	// its memory of finished dispatches.
	ended   map[string]agentv1.DispatchEventType
	batches int // DispatchBatch messages received
	seq     uint64
	sub     *natsbus.Subscription
	stopHB  context.CancelFunc
	reject  bool
	// frozen holds the advertisement back: the agent keeps running,
	// heartbeating and reporting events, but the hub goes on seeing the
	// last inventory it was sent (an agent whose advertisement lags its
	// stop events).
	frozen bool
}

func (e *env) startAgent(id string, nodes, gpusPerNode int, runFor time.Duration) *agent {
	e.t.Helper()
	bus, err := natsbus.Connect(e.ctx, e.url, natsbus.WithName("agent-"+id), natsbus.WithAckWait(2*time.Second))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(bus.Close)
	if err := bus.EnsureStreams(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	a := &agent{e: e, id: id, bus: bus, runFor: runFor, session: "s-" + id, seen: map[string]bool{}, run: map[string]*running{},
		launches: map[string]int{}, byWorkload: map[string]map[string]bool{}, seqs: map[string]map[uint64]bool{}, cancels: map[string]int{},
		ended: map[string]agentv1.DispatchEventType{}}
	a.nodes = clusterNodes(id, nodes, gpusPerNode)
	a.connect()
	return a
}

// clusterNodes is a cluster's inventory as its agent advertises it: nodes
// of gpusPerNode free, healthy H100s each.
func clusterNodes(id string, nodes, gpusPerNode int) []*agentv1.Node {
	out := make([]*agentv1.Node, 0, nodes)
	for n := 0; n < nodes; n++ {
		node := &agentv1.Node{Name: fmt.Sprintf("%s-n%d", id, n), AcceleratorClass: "h100", Schedulable: true,
			CpuMilliFree: 256000, CpuMilliTotal: 256000, MemoryMibFree: 1 << 20, MemoryMibTotal: 1 << 20}
		for g := 0; g < gpusPerNode; g++ {
			node.Gpus = append(node.Gpus, &agentv1.Gpu{Index: int32(g), FreeMilli: 1000, FreeMemoryMib: 81920, TotalMemoryMib: 81920, Healthy: true})
		}
		out = append(out, node)
	}
	return out
}

// connect (re)starts consuming dispatches, advertising and heartbeating.
func (a *agent) connect() {
	a.e.t.Helper()
	sub, err := a.bus.ConsumeDispatches(a.e.ctx, a.id, a.handle)
	if err != nil {
		a.e.t.Fatal(err)
	}
	hctx, stop := context.WithCancel(a.e.ctx)
	a.mu.Lock()
	a.sub, a.stopHB = sub, stop
	a.mu.Unlock()
	a.advertise()
	go func() {
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-tk.C:
				a.heartbeat()
				a.advertise()
			}
		}
	}()
}

// vanish stops all traffic, as a partitioned agent; local work keeps running.
func (a *agent) vanish() {
	a.mu.Lock()
	sub, stop := a.sub, a.stopHB
	a.mu.Unlock()
	stop()
	sub.Stop()
}

func (a *agent) advertise() {
	a.mu.Lock()
	if a.frozen {
		a.mu.Unlock()
		return
	}
	a.seq++
	ad := &agentv1.Advertisement{ClusterId: a.id, Seq: a.seq, SentAt: timestamppb.Now(), SessionId: a.session,
		Connector: meridianv1.ConnectorKind_CONNECTOR_KIND_SIMCLUSTER, Nodes: a.nodes}
	if a.e.batching {
		ad.Capabilities = []string{agentv1.CapabilityDispatchBatch}
	}
	b, err := proto.Marshal(ad)
	a.mu.Unlock()
	if err == nil {
		_ = a.bus.PublishAdvert(a.e.ctx, a.id, b)
	}
}

// freezeAdverts sends one last advertisement of the current inventory and
// then holds every later one back until thawAdverts. It returns that last
// advertisement's sequence number.
func (a *agent) freezeAdverts() uint64 {
	a.advertise()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.frozen = true
	return a.seq
}

// thawAdverts advertises again, at once and periodically.
func (a *agent) thawAdverts() {
	a.mu.Lock()
	a.frozen = false
	a.mu.Unlock()
	a.advertise()
}

func (a *agent) heartbeat() {
	a.mu.Lock()
	hb := &agentv1.Heartbeat{ClusterId: a.id, SentAt: timestamppb.Now(), SessionId: a.session}
	for _, id := range sortedKeys(a.run) {
		hb.Dispatches = append(hb.Dispatches, &agentv1.RunningDispatch{DispatchId: id, WorkloadId: a.run[id].workload, State: agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING})
	}
	b, err := proto.Marshal(hb)
	a.mu.Unlock()
	if err == nil {
		_ = a.bus.PublishHeartbeat(a.e.ctx, a.id, b)
	}
}

func (a *agent) event(dispatchID, workloadID string, typ agentv1.DispatchEventType, reason string) error {
	ev := a.newEvent(dispatchID, workloadID, typ, reason)
	b, _ := proto.Marshal(ev)
	_, err := a.bus.PublishEvent(a.e.ctx, a.id, ev.EventId, b)
	return err
}

func (a *agent) newEvent(dispatchID, workloadID string, typ agentv1.DispatchEventType, reason string) *agentv1.DispatchEvent {
	ev := &agentv1.DispatchEvent{DispatchId: dispatchID, WorkloadId: workloadID, ClusterId: a.id, Type: typ, Reason: reason, Time: timestamppb.Now(),
		SessionId: a.session, EventId: fmt.Sprintf("%s-%d", dispatchID, typ)}
	if typ == agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED {
		ev.ExitCode = proto.Int32(0)
	}
	return ev
}

// emit publishes an event, or gathers it into out.
func (a *agent) emit(out *[]*agentv1.DispatchEvent, dispatchID, workloadID string, typ agentv1.DispatchEventType, reason string) error {
	if out == nil {
		return a.event(dispatchID, workloadID, typ, reason)
	}
	*out = append(*out, a.newEvent(dispatchID, workloadID, typ, reason))
	return nil
}

// eventBatch publishes events as one EventBatch, as a real agent does to
// a hub that reads them.
func (a *agent) eventBatch(evs []*agentv1.DispatchEvent) error {
	switch len(evs) {
	case 0:
		return nil
	case 1:
		return a.event(evs[0].DispatchId, evs[0].WorkloadId, evs[0].Type, evs[0].Reason)
	}
	b, err := proto.Marshal(&agentv1.EventBatch{Events: evs})
	if err != nil {
		return err
	}
	_, err = a.bus.PublishEvent(a.e.ctx, a.id, fmt.Sprintf("%s%s:%d", agentv1.EventBatchMsgIDPrefix, evs[0].EventId, len(evs)), b)
	return err
}

func (a *agent) handle(ctx context.Context, d natsbus.Delivery) error {
	hm := &agentv1.HubMessage{}
	if err := proto.Unmarshal(d.Payload, hm); err != nil {
		return natsbus.Permanent(err)
	}
	if c := hm.GetCancel(); c != nil {
		id := c.GetDispatchId()
		if want, ok := convert.IsCancelMsgID(d.MsgID); !ok || want != id {
			a.e.t.Errorf("cancel for %s arrived with message id %q", id, d.MsgID)
		}
		a.mu.Lock()
		a.cancels[id]++
		if typ, ok := a.ended[id]; ok {
			a.mu.Unlock()
			return a.event(id, c.WorkloadId, typ, "finished")
		}
		r := a.run[id]
		if r != nil {
			a.releaseLocked(id)
		}
		a.seen[id] = true
		a.mu.Unlock()
		if r != nil {
			// The freed room is advertised before the stop is reported.
			// (The real agent reports first and sends its delta a
			// ChangeDelay later; freezeAdverts gives that order.)
			a.advertise()
		}
		typ := agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_CANCELLED
		if c.Preempt {
			typ = agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_PREEMPTED
		}
		wid := c.WorkloadId
		if r != nil {
			wid = r.workload
		}
		return a.event(id, wid, typ, c.Reason)
	}
	if b := hm.GetBatch(); b != nil {
		if !a.e.batching {
			a.e.t.Errorf("batch %s sent to an agent that does not advertise %s", d.MsgID, agentv1.CapabilityDispatchBatch)
		}
		if len(b.GetDispatches()) < 2 || !strings.HasPrefix(d.MsgID, "batch:") {
			a.e.t.Errorf("batch %s of %d dispatches", d.MsgID, len(b.GetDispatches()))
		}
		a.mu.Lock()
		a.batches++
		a.mu.Unlock()
		var evs []*agentv1.DispatchEvent
		for _, m := range b.GetDispatches() {
			if err := a.launch(d, m, &evs); err != nil {
				return err
			}
		}
		return a.eventBatch(evs)
	}
	m := hm.GetDispatch()
	if m == nil {
		return natsbus.Permanent(fmt.Errorf("hub message %s carries nothing", d.MsgID))
	}
	if d.MsgID != m.DispatchId {
		a.e.t.Errorf("dispatch %s arrived with message id %q", m.DispatchId, d.MsgID)
	}
	return a.launch(d, m, nil)
}

// launch starts one dispatch, once per dispatch id. With out, its events
// are gathered there for one EventBatch instead of published one by one.
func (a *agent) launch(d natsbus.Delivery, m *agentv1.Dispatch, out *[]*agentv1.DispatchEvent) error {
	a.mu.Lock()
	if a.seqs[m.DispatchId] == nil {
		a.seqs[m.DispatchId] = map[uint64]bool{}
	}
	a.seqs[m.DispatchId][d.StreamSeq] = true
	if a.seen[m.DispatchId] {
		a.mu.Unlock()
		return nil // launch is idempotent on the dispatch id
	}
	a.seen[m.DispatchId] = true
	if a.reject {
		a.mu.Unlock()
		return a.emit(out, m.DispatchId, m.WorkloadId, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_REJECTED, "told to reject")
	}
	r := &running{workload: m.WorkloadId}
	ok := a.placeLocked(m, r)
	if !ok {
		a.mu.Unlock()
		return a.emit(out, m.DispatchId, m.WorkloadId, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_REJECTED, "does not fit")
	}
	a.run[m.DispatchId] = r
	a.launches[m.DispatchId]++
	if a.byWorkload[m.WorkloadId] == nil {
		a.byWorkload[m.WorkloadId] = map[string]bool{}
	}
	a.byWorkload[m.WorkloadId][m.DispatchId] = true
	a.mu.Unlock()
	a.advertise()
	if err := a.emit(out, m.DispatchId, m.WorkloadId, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED, ""); err != nil {
		return err
	}
	if err := a.emit(out, m.DispatchId, m.WorkloadId, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING, ""); err != nil {
		return err
	}
	if a.runFor > 0 {
		id, wid := m.DispatchId, m.WorkloadId
		time.AfterFunc(a.runFor, func() {
			a.mu.Lock()
			_, still := a.run[id]
			if still {
				a.releaseLocked(id)
			}
			a.mu.Unlock()
			if still {
				a.advertise()
				for i := 0; i < 50 && a.e.ctx.Err() == nil; i++ {
					if a.event(id, wid, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED, "") == nil {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	return nil
}

// placeLocked takes GPUs on the hinted nodes, first fit per node.
func (a *agent) placeLocked(m *agentv1.Dispatch, r *running) bool {
	idx := map[string]int{}
	for i, n := range a.nodes {
		idx[n.Name] = i
	}
	for i, ps := range m.Placement {
		res := m.Workload.GetPodSets()[i].GetResources()
		req, _ := convert.Request(res)
		for _, node := range ps.Nodes {
			ni, ok := idx[node]
			if !ok {
				a.undoLocked(r)
				return false
			}
			need := req.GPUs
			for g, gpu := range a.nodes[ni].Gpus {
				if need == 0 {
					break
				}
				if gpu.FreeMilli >= req.Milli {
					gpu.FreeMilli -= req.Milli
					r.used = append(r.used, [2]int{ni, g})
					r.milli = req.Milli
					need--
				}
			}
			if need > 0 {
				a.undoLocked(r)
				return false
			}
		}
	}
	return true
}

func (a *agent) undoLocked(r *running) {
	for _, u := range r.used {
		a.nodes[u[0]].Gpus[u[1]].FreeMilli += r.milli
	}
	r.used = nil
}

func (a *agent) releaseLocked(id string) {
	if r := a.run[id]; r != nil {
		a.undoLocked(r)
		delete(a.run, id)
	}
}

func (a *agent) runningIDs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := sortedKeys(a.run)
	sort.Strings(ids)
	return ids
}

func (a *agent) totalLaunches() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.launches {
		n += c
	}
	return n
}

func (a *agent) cancelCount(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cancels[id]
}

// checkLaunchedOnce asserts every dispatch id was launched once and stored
// in the stream once, and reports the dispatch ids per workload.
func (a *agent) checkLaunchedOnce(t *testing.T) map[string]map[string]bool {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	var bad []string
	for id, n := range a.launches {
		if n != 1 {
			bad = append(bad, fmt.Sprintf("%s launched %d times", id, n))
		}
	}
	for id, s := range a.seqs {
		if len(s) != 1 {
			bad = append(bad, fmt.Sprintf("%s stored %d times in the stream", id, len(s)))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("agent %s: %s", a.id, strings.Join(bad, "; "))
	}
	out := map[string]map[string]bool{}
	for w, ds := range a.byWorkload {
		out[w] = ds
	}
	return out
}
