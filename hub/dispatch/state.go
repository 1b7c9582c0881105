package dispatch

import (
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/convert"
	"github.com/meridian-gpu/meridian/hub/fleet"
	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/records"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
	"github.com/meridian-gpu/meridian/hub/store"
	"github.com/meridian-gpu/meridian/internal/protofast"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func tsOf(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// wl is a workload with the revision the cycle read it at.
type wl struct {
	key    string
	modRev int64
	// createRev tells a key written again from one deleted and made anew.
	createRev int64
	// pb is the workload, decoded; doc gives it. A queued workload deep in
	// a long backlog is kept compact instead: pb is nil and raw holds its
	// stored bytes (shared with the watch cache) until something reads it,
	// which for most of a backlog is when it reaches its queue's window.
	// A decoded workload is ten times its encoding and full of pointers
	// for the collector to mark: at hundreds of thousands queued, keeping
	// them all decoded was most of the hub's heap.
	pb  *meridianv1.Workload
	raw []byte
	// sw is the workload converted for the core, shared across cycles:
	// copy it before changing it. swErr says why it does not convert. A
	// compact workload always has sw.
	sw    *scheduler.Workload
	swErr error
	// vrec is the record of the current dispatch when the workload keeps
	// it (folded): the mirror files it like a stored record with no key.
	vrec *rec
}

// doc is the decoded workload, decoding a compact one (once: it stays
// decoded). Only under the mirror's lock, as everything in a state.
func (e *wl) doc() *meridianv1.Workload {
	if e.pb == nil && e.raw != nil {
		w, err := decodeWorkload(e.raw)
		if err != nil {
			// It decoded when it was filed; keep what sw knows.
			w = &meridianv1.Workload{Id: e.sw.ID, Queue: e.sw.Queue, Status: &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED}}
		}
		e.pb, e.raw = w, nil
	}
	return e.pb
}

// id is the workload's id, without decoding a compact one.
func (e *wl) id() string {
	if e.pb == nil && e.sw != nil {
		return e.sw.ID
	}
	return e.pb.GetId()
}

// phase is the workload's phase, without decoding a compact one (which
// is queued).
func (e *wl) phase() meridianv1.WorkloadPhase {
	if e.pb == nil && e.raw != nil {
		return meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED
	}
	return e.pb.GetStatus().GetPhase()
}

// pendingCode is the stored pending reason code, without decoding a
// compact workload (a scan of its bytes).
func (e *wl) pendingCode() string {
	if e.pb == nil && e.raw != nil {
		sum, err := records.SummarizeWorkloadShared(e.raw)
		if err != nil {
			return ""
		}
		return sum.PendingCode
	}
	return e.pb.GetStatus().GetPendingReasonCode()
}

// rec is a dispatch record with its revision. key is empty for a record
// folded into its workload (modRev is then the workload's).
type rec struct {
	key    string
	modRev int64
	r      *Record
}

// state is one consistent read of the cache, decoded. Its maps are the
// mirror's own: a state is valid only while the mirror stays locked (see
// lockState), and nobody writes to it.
type state struct {
	rev        int64
	workloads  map[string]*wl  // by id
	dispatches map[string]*rec // by dispatch id
	queues     []*meridianv1.Queue
	drain      map[string]clusterSettings

	// Derived from the above by the mirror as keys change, so that a cycle
	// does not walk every workload and record to find these.
	current   map[string]curRef         // dispatch id -> current record and its workload
	orphans   map[string]*rec           // dispatch id -> record whose workload moved on
	queued    map[string]*wl            // QUEUED workloads by id
	backlog   *backlog                  // the same, in queue order
	cancelReq map[string]*wl            // workloads with CancelRequested or a cancel request, by id
	requests  map[string]*cancelRequest // stored cancel requests, by workload id
	unacked   map[string]curRef         // current dispatches the agent has not acknowledged
	fresh     map[string]curRef         // see mirror.fresh; buildSnapshot prunes it
	stopped   map[string]stopped        // see mirror.stopped; buildSnapshot prunes it
	runs      []scheduler.Running
	runIdx    map[string]int
	charge    *scheduler.RunningCharge // runs' usage summed (mirror.charge)
}

// curRef is a current dispatch: its record and the workload pointing at it.
type curRef struct {
	r *rec
	w *wl
	// run is the core's view of it, made once when the record or the
	// workload changes rather than on every cycle. Shared: copy it.
	run *scheduler.Running
}

// stopped is work that stopped on its cluster (preempted, cancelled or
// finished) and whose room that cluster's advertisement may still show
// taken.
type stopped struct {
	at time.Time // hub clock: when the mirror saw it leave the current set
	// run is the core's view of it, marked Terminating and holding no
	// quota (its record is gone, so its quota already is).
	run scheduler.Running
}

// stoppedTTL bounds how long work that stopped is kept as "about to be
// free" when its cluster sends no advertisement at all (an agent sends a
// full one every AgentAdvertiseInterval).
const stoppedTTL = 3 * AgentAdvertiseInterval

var (
	prefWorkloads  = store.Prefix(store.KindWorkloads)
	prefDispatches = store.Prefix(store.KindDispatches)
	prefQueues     = store.Prefix(store.KindQueues)
	prefClusters   = store.Prefix(store.KindClusters)
	prefRequests   = store.Prefix(store.KindCancelRequests)
)

// cancelRequest is a user's stored request to cancel a workload (the API
// writes it; the loop folds it into the workload and deletes it).
type cancelRequest struct {
	key    string
	modRev int64
	cond   *meridianv1.Condition
}

// mirror is the loop's decoded copy of the cache. Each advance applies
// only the keys that changed since the last one (the cache's Delta), so a
// cycle's cost follows the rate of change, not the number of workloads
// stored. Decoded values are shared by every state handed out: treat them
// as read-only.
type mirror struct {
	mu         sync.Mutex
	pos        uint64
	workloads  map[string]*wl  // by etcd key
	byID       map[string]*wl  // by workload id
	dispatches map[string]*rec // by etcd key
	byDispatch map[string]*rec // by dispatch id
	queues     map[string]*meridianv1.Queue
	drain      map[string]clusterSettings // by cluster id

	// While put replaces a key, the dispatches to file again wait here,
	// so that each is filed once, from the key's new value, rather than
	// once as the old value goes and once as the new one comes.
	putting bool
	toFile  []string

	// Derived sets (see state), and the index that keeps them right: a
	// record's standing depends only on the workload it names.
	current   map[string]curRef
	orphans   map[string]*rec
	queued    map[string]*wl
	backlog   *backlog
	cancelReq map[string]*wl
	requests  map[string]*cancelRequest
	unacked   map[string]curRef
	recsOf    map[string][]string // workload id -> dispatch ids of its records (nearly always one: a slice, not a map per workload)

	// runs holds the core's view of every current dispatch, densely: the
	// cycle hands it to the core as it is, and the API's readers copy one
	// slice, instead of walking a map (runIDs[i] is the dispatch of
	// runs[i]; runIdx inverts it).
	runs   []scheduler.Running
	runIDs []string
	runIdx map[string]int
	// charge is runs' quota usage summed, kept as entries come and go,
	// so that a cycle hands the core the sums instead of having it walk
	// every running workload (scheduler.Snapshot.Charged).
	charge scheduler.RunningCharge
	// fresh are current dispatches whose usage the agent's advertisement
	// may not show yet (unacknowledged, or acknowledged after their
	// cluster's last advertisement): the only ones buildSnapshot must
	// charge to the advertised capacity. It drops the others as adverts
	// arrive.
	fresh map[string]curRef
	// stopped is the other side of fresh: acknowledged dispatches that
	// left the current set (their work was preempted, cancelled or
	// finished) since their cluster last advertised. The advertisement
	// may still show their room taken, and the cluster has nothing left
	// in the running set to wait for, so the core gets them as
	// Terminating work: a preempting workload then waits for the room its
	// victims are freeing instead of preempting on another cluster.
	// buildSnapshot drops them as their clusters advertise. leaving
	// gathers, during one advance, the dispatches that left the current
	// set (some only for a moment, while their workload is replaced).
	stopped map[string]stopped
	leaving map[string]curRef
	log     *slog.Logger
	// shapes is the decayed history of the shapes submitted since the
	// last full read, each workload counted once, when its key first
	// appears: the target the core's fragmentation scoring measures
	// against (scheduler.Config.Target). A full read starts it afresh
	// from the unfinished workloads, at their submit times.
	shapes        *scheduler.ShapeHistory
	shapeHalfLife time.Duration
	// compactBeyond is how deep in its queue's backlog a queued workload
	// must land to be kept compact (see wl): twice the window, so that the
	// workloads the next cycles hand the core are decoded already. 0
	// keeps every workload decoded.
	compactBeyond int
	// names holds one copy of each queue, accelerator class and cluster
	// name that running work carries. Every cycle the core sums the
	// running work by (queue, class): with one shared copy per name, its
	// comparisons are a pointer check instead of a walk to bytes that
	// each decoded workload keeps somewhere else in the heap (they were
	// a tenth of a cycle at 10,000 running).
	names map[string]string
}

// intern returns the mirror's copy of name, keeping name as the copy the
// first time. Only for names of bounded variety (queues, classes,
// clusters), never for ids.
func (m *mirror) intern(name string) string {
	if c, ok := m.names[name]; ok {
		return c
	}
	if m.names == nil {
		m.names = map[string]string{}
	}
	m.names[name] = name
	return name
}

// internRecord shares the names of r's cluster, queue and classes.
func (m *mirror) internRecord(r *Record) {
	r.Cluster, r.Queue = m.intern(r.Cluster), m.intern(r.Queue)
	for i := range r.Usage {
		r.Usage[i].Class = m.intern(r.Usage[i].Class)
	}
}

func (m *mirror) reset() {
	m.workloads, m.byID = map[string]*wl{}, map[string]*wl{}
	m.dispatches, m.byDispatch = map[string]*rec{}, map[string]*rec{}
	m.queues, m.drain = map[string]*meridianv1.Queue{}, map[string]clusterSettings{}
	m.current, m.orphans = map[string]curRef{}, map[string]*rec{}
	m.queued, m.cancelReq = map[string]*wl{}, map[string]*wl{}
	m.requests = map[string]*cancelRequest{}
	m.backlog = newBacklog()
	m.unacked, m.fresh = map[string]curRef{}, map[string]curRef{}
	m.runs, m.runIDs, m.runIdx = nil, nil, map[string]int{}
	m.charge = scheduler.RunningCharge{}
	m.recsOf = map[string][]string{}
	// What stopped is history no key holds: a full re-read keeps it.
	if m.stopped == nil {
		m.stopped = map[string]stopped{}
	}
	m.leaving = map[string]curRef{}
	m.shapes = scheduler.NewShapeHistory(m.shapeHalfLife, 0)
}

// classify files dispatch d as current or orphan, or forgets it when it
// has no record.
func (m *mirror) classify(d string) {
	if m.putting {
		if !slices.Contains(m.toFile, d) {
			m.toFile = append(m.toFile, d)
		}
		return
	}
	if c, ok := m.current[d]; ok && acked(c.r.r, c.w.doc()) {
		if _, seen := m.leaving[d]; !seen {
			m.leaving[d] = c
		}
	}
	delete(m.current, d)
	delete(m.orphans, d)
	delete(m.unacked, d)
	delete(m.fresh, d)
	m.dropRun(d)
	r := m.byDispatch[d]
	if r == nil {
		return
	}
	if w := m.byID[r.r.WorkloadID]; w != nil && active(w.phase()) && w.doc().GetStatus().GetDispatchId() == d {
		c := curRef{r: r, w: w, run: m.running(r, w)}
		m.current[d], m.fresh[d] = c, c
		delete(m.stopped, d)
		m.runIdx[d] = len(m.runs)
		m.runs, m.runIDs = append(m.runs, *c.run), append(m.runIDs, d)
		m.charge.Add(c.run)
		if !acked(r.r, w.doc()) {
			m.unacked[d] = c
		}
		return
	}
	m.orphans[d] = r
}

// dropRun removes d from the dense running list, moving the last entry
// into its place.
func (m *mirror) dropRun(d string) {
	i, ok := m.runIdx[d]
	if !ok {
		return
	}
	m.charge.Remove(&m.runs[i])
	last := len(m.runs) - 1
	m.runs[i], m.runIDs[i] = m.runs[last], m.runIDs[last]
	m.runIdx[m.runIDs[i]] = i
	m.runs[last], m.runIDs[last] = scheduler.Running{}, ""
	m.runs, m.runIDs = m.runs[:last], m.runIDs[:last]
	delete(m.runIdx, d)
}

// running makes the core's view of a current dispatch.
func (m *mirror) running(r *rec, w *wl) *scheduler.Running {
	sw := w.sw
	if w.swErr != nil {
		if m.log != nil {
			m.log.Error("running workload does not convert; its usage is still charged", "workload", w.doc().GetId(), "err", w.swErr)
		}
		sw = &scheduler.Workload{ID: w.doc().GetId(), Queue: w.doc().GetQueue()}
	}
	started := r.r.CreatedAt
	if st := w.doc().GetStatus().GetStartTime(); st != nil {
		started = st.AsTime()
	}
	return &scheduler.Running{Workload: sw, Cluster: r.r.Cluster, StartedAt: started, Usage: r.r.Usage, Placement: r.r.Placement}
}

// settle files the dispatches that left the current set during this
// advance and stayed out as stopped at now. Only acknowledged ones: a
// dispatch never acknowledged was refused or never launched, and took no
// room the advertisement could show.
func (m *mirror) settle(now time.Time) {
	for d, c := range m.leaving {
		delete(m.leaving, d)
		if _, cur := m.current[d]; cur {
			continue
		}
		run := *c.run
		w := *run.Workload
		// Its own id, so that it never stands for the workload if that
		// runs again elsewhere (the core keys its victims by id).
		w.ID = w.ID + "/stopped:" + d
		run.Workload, run.Usage, run.Terminating = &w, nil, true
		m.stopped[d] = stopped{at: now, run: run}
	}
}

// workloadChanged refreshes the sets after workload id changed (or went).
func (m *mirror) workloadChanged(id string) {
	if old := m.queued[id]; old != nil {
		m.backlog.drop(old)
		delete(m.queued, id)
	}
	delete(m.cancelReq, id)
	if w := m.byID[id]; w != nil {
		// Filed under the workload's own copy of its id: id may share
		// the bytes of a value it was read from (a shared summary).
		own := w.id()
		if w.phase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
			m.queued[own] = w
			m.backlog.add(w)
		}
		if m.requests[id] != nil || hasCondition(w.doc(), ConditionCancelRequested) {
			m.cancelReq[own] = w
		}
	}
	for _, d := range m.recsOf[id] {
		m.classify(d)
	}
}

// addRec files a record (stored or folded) under its dispatch id and its
// workload.
func (m *mirror) addRec(e *rec) {
	r := e.r
	m.byDispatch[r.DispatchID] = e
	if ds := m.recsOf[r.WorkloadID]; !slices.Contains(ds, r.DispatchID) {
		m.recsOf[r.WorkloadID] = append(ds, r.DispatchID)
	}
}

// dropRec forgets a record if it is still the one filed under its
// dispatch id, and refiles the dispatch.
func (m *mirror) dropRec(e *rec) {
	d := e.r.DispatchID
	if m.byDispatch[d] != e {
		return
	}
	delete(m.byDispatch, d)
	if ds := m.recsOf[e.r.WorkloadID]; ds != nil {
		if ds = slices.DeleteFunc(ds, func(x string) bool { return x == d }); len(ds) == 0 {
			delete(m.recsOf, e.r.WorkloadID)
		} else {
			m.recsOf[e.r.WorkloadID] = ds
		}
	}
	m.classify(d)
}

// dropKey forgets a deleted key in the mirror and any workload the loop
// wrote there.
func (l *Loop) dropKey(k string) {
	l.own.take(k, 0)
	l.recent.drop(k)
	l.mirror.remove(k)
	if l.fin != nil && strings.HasPrefix(k, prefWorkloads) {
		l.fin.Forget(k)
	}
}

// remove forgets key, whatever it held.
func (m *mirror) remove(k string) {
	if w, ok := m.workloads[k]; ok {
		delete(m.workloads, k)
		if w.vrec != nil {
			m.dropRec(w.vrec)
		}
		if id := w.id(); m.byID[id] == w {
			delete(m.byID, id)
			m.workloadChanged(id)
		}
	}
	if r, ok := m.dispatches[k]; ok {
		delete(m.dispatches, k)
		m.dropRec(r)
	}
	delete(m.queues, k)
	if id, ok := strings.CutPrefix(k, prefRequests); ok {
		if m.requests[id] != nil {
			delete(m.requests, id)
			m.workloadChanged(id)
		}
	}
	if strings.HasPrefix(k, prefClusters) {
		delete(m.drain, strings.TrimPrefix(k, prefClusters))
	}
}

// fileAfterPut files the dispatches put touched. Filing depends only on
// the mirror's state and, for a dispatch that leaves the current set, on
// the entry it had before (which nothing but filing changes), so filing
// once at the end comes to what filing at each step did.
func (m *mirror) fileAfterPut() {
	m.putting = false
	for _, d := range m.toFile {
		m.classify(d)
	}
	m.toFile = m.toFile[:0]
}

// put decodes one changed item. An undecodable value is logged and left
// out, as if the key were absent.
func (m *mirror) put(l *Loop, k string, it store.Item) {
	var w *meridianv1.Workload
	if strings.HasPrefix(k, prefWorkloads) {
		// Taken first, whatever the value: an entry the mirror passes
		// by (a finished workload, told from its summary) must not wait
		// for the key's deletion.
		w = l.own.take(k, it.ModRev)
	}
	m.putDecoded(l, k, it, w)
}

// putDecoded is put with the workload at k already decoded (w; nil: not
// known). A workload put at revision 0 is one the cycle took from its
// intake, not stored yet.
func (m *mirror) putDecoded(l *Loop, k string, it store.Item, w *meridianv1.Workload) {
	m.putting = true
	defer m.fileAfterPut()
	prev, had := m.workloads[k]
	m.remove(k)
	var err error
	switch {
	case strings.HasPrefix(k, prefWorkloads):
		// A finished workload matters to the loop only in that its
		// records are orphans, which its absence says too. Most stored
		// workloads are finished: keeping them decoded was most of the
		// hub's heap, which every collection walks, and the summary
		// tells a finished one without decoding it. The loop's own
		// write of a running one says so itself: no summary needed.
		if w == nil || finished(w.GetStatus().GetPhase()) {
			// Shared with the cache's value, which never changes; the
			// retention index copies what it keeps.
			s, sErr := records.SummarizeWorkloadShared(it.Value)
			if sErr == nil && s.ID != "" && finished(s.Phase) {
				m.workloadChanged(s.ID)
				if l.fin != nil {
					l.fin.Finished(k, it.ModRev, s)
				}
				break
			}
		}
		if !had && l.fin != nil {
			// Not in the mirror, so maybe finished before (a workload
			// can be requeued): no longer. (A record the summary cannot
			// read is not finished for the sink either; the summary
			// reads what a decode does, FuzzSummarizeWorkload.)
			l.fin.Forget(k)
		}
		if w == nil {
			w, err = decodeWorkload(it.Value)
		}
		if err == nil && w.GetId() != "" {
			if finished(w.GetStatus().GetPhase()) {
				m.workloadChanged(w.GetId())
				break
			}
			// The same key since its creation (not deleted and made anew).
			// One the intake filed (revision 0) is the key the cycle
			// created: its ids are never reused.
			same := had && (it.CreateRev != 0 && prev.createRev == it.CreateRev || prev.modRev == 0)
			// A workload's spec never changes once stored (only its
			// status does), so the core's view of it is made once.
			var sw *scheduler.Workload
			var swErr error
			if same && prev.sw != nil {
				sw = prev.sw
			} else {
				if sw, swErr = convert.Workload(w, nil); swErr == nil {
					sw.Queue = m.intern(sw.Queue)
				}
			}
			e := &wl{key: k, modRev: it.ModRev, createRev: it.CreateRev, pb: w, sw: sw, swErr: swErr}
			m.workloads[k], m.byID[w.GetId()] = e, e
			if active(w.GetStatus().GetPhase()) && folded(w) {
				e.vrec = &rec{modRev: it.ModRev, r: recordOf(w)}
				m.internRecord(e.vrec.r)
				m.addRec(e.vrec)
			}
			m.workloadChanged(w.GetId())
			if !had && swErr == nil && m.shapes != nil {
				m.shapes.Observe(sw.CreatedAt, sw)
			}
			// The queue's length decides, not the workload's place in it,
			// so one that was read (a head, whose reason is rewritten) is
			// kept decoded across its rewrites.
			if m.compactBeyond > 0 && sw != nil && !(same && prev.pb != nil) && m.queued[w.GetId()] == e && m.cancelReq[w.GetId()] == nil && m.backlog.deeper(sw.Queue, m.compactBeyond) {
				e.pb, e.raw = nil, it.Value
			}
		}
	case strings.HasPrefix(k, prefDispatches):
		var r *Record
		if r, err = decodeRecord(it.Value); err == nil {
			m.internRecord(r)
			e := &rec{key: k, modRev: it.ModRev, r: r}
			m.dispatches[k] = e
			m.addRec(e)
			m.classify(r.DispatchID)
		}
	case strings.HasPrefix(k, prefRequests):
		c := &meridianv1.Condition{}
		if err = protofast.Unmarshal(it.Value, c); err == nil {
			id := strings.TrimPrefix(k, prefRequests)
			m.requests[id] = &cancelRequest{key: k, modRev: it.ModRev, cond: c}
			m.workloadChanged(id)
		}
	case strings.HasPrefix(k, prefQueues):
		q := &meridianv1.Queue{}
		if err = protofast.Unmarshal(it.Value, q); err == nil {
			m.queues[k] = q
		}
	case strings.HasPrefix(k, prefClusters):
		c := clusterSettings{}
		if err = json.Unmarshal(it.Value, &c); err == nil {
			m.drain[strings.TrimPrefix(k, prefClusters)] = c
		}
	}
	if err != nil {
		l.log.Error("undecodable record skipped", "key", k, "mod_rev", it.ModRev, "err", err)
	}
}

// lockState locks the mirror, brings it up to date with the cache and
// returns a state made of the mirror's own maps, valid until unlockState.
// The loop holds the lock for a whole cycle, so a cycle copies nothing;
// API readers (Explain, queue status, agent registration) hold it only
// while they build what they answer from, waiting at most one cycle.
func (l *Loop) lockState() *state {
	l.mirror.mu.Lock()
	return l.advance()
}

func (l *Loop) unlockState() { l.mirror.mu.Unlock() }

// advance applies the keys that changed since the last call. The mirror
// must be locked.
func (l *Loop) advance() *state {
	m := &l.mirror
	m.log = l.log
	m.compactBeyond = 2 * max(0, l.cfg.Scheduler.MaxConsidered)
	d := l.cache.Delta(m.pos)
	if d.Full || m.workloads == nil {
		m.reset()
		l.own.forget()
		l.recent.forget()
		if l.fin != nil {
			l.fin.Reset()
		}
	}
	for k, it := range d.Items {
		m.put(l, k, it)
	}
	for _, k := range d.Deleted {
		l.dropKey(k)
	}
	if l.fin != nil {
		l.fin.Reflects(d.Rev)
	}
	m.settle(l.clock())
	// The cycle appends the stopped work to the running list it hands the
	// core: keep room for it behind the mirror's own entries, so that
	// this never copies the whole list.
	m.runs = slices.Grow(m.runs, len(m.stopped))
	m.pos = d.Pos
	l.mirrorPos.Store(d.Pos)
	s := &state{rev: d.Rev, workloads: m.byID, dispatches: m.byDispatch, drain: m.drain,
		current: m.current, orphans: m.orphans, queued: m.queued, backlog: m.backlog, cancelReq: m.cancelReq, requests: m.requests, unacked: m.unacked,
		fresh: m.fresh, stopped: m.stopped, runs: m.runs, runIdx: m.runIdx, charge: &m.charge}
	s.queues = make([]*meridianv1.Queue, 0, len(m.queues))
	for _, q := range m.queues {
		s.queues = append(s.queues, q)
	}
	sort.Slice(s.queues, func(a, b int) bool { return s.queues[a].GetPath() < s.queues[b].GetPath() })
	return s
}

// snapshotNow builds the core's input from the current state for a reader
// outside the cycle, with the backlog's counts and demand, and w's place
// in its queue when w is given. The result holds no reference to the
// mirror's maps.
func (l *Loop) snapshotNow(ledger *quota.Ledger, now time.Time, w *scheduler.Workload) *built {
	s := l.lockState()
	defer l.unlockState()
	b := l.buildSnapshot(s, ledger, now, nil, nil, false)
	b.byID, b.current = nil, nil
	b.queued = maps.Clone(s.backlog.count)
	b.demand = make(map[string]map[string]int64, len(s.backlog.demand))
	for c, m := range s.backlog.demand {
		b.demand[c] = maps.Clone(m)
	}
	if w != nil {
		b.position = s.backlog.position(w)
	}
	return b
}

// finished reports whether a phase is final.
func finished(p meridianv1.WorkloadPhase) bool {
	return p == meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED ||
		p == meridianv1.WorkloadPhase_WORKLOAD_PHASE_FAILED ||
		p == meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED
}

// active reports whether a phase holds a dispatch.
func active(p meridianv1.WorkloadPhase) bool {
	return p == meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED ||
		p == meridianv1.WorkloadPhase_WORKLOAD_PHASE_ACCEPTED ||
		p == meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING
}

// built is a snapshot with the indexes the cycle needs to act on a plan.
type built struct {
	snap    *scheduler.Snapshot
	badQ    []string
	byID    map[string]*wl
	current map[string]curRef // dispatch id -> record whose workload still points at it (the state's own map)
	invalid map[string]string
	marked  []int // indexes of a shared Running list marked Terminating, cleared by release
	// live is how many entries of snap.Running are current dispatches;
	// the rest is work that stopped (state.stopped), for the core only.
	live int
	// behind counts the queued workloads left behind their queue's window.
	behind int
	// For readers (snapshotNow): the backlog's QUEUED workloads by leaf
	// and their demand by class and leaf, and the place in line of the
	// workload asked about.
	queued   map[string]int32
	demand   map[string]map[string]int64
	position int
}

// release clears the Terminating marks a shared snapshot put on the
// mirror's running list.
func (b *built) release() {
	for _, i := range b.marked {
		b.snap.Running[i].Terminating = false
	}
	b.marked = nil
	// The stopped work sits in the mirror's spare capacity: drop the
	// references.
	clear(b.snap.Running[b.live:])
	b.snap.Running = b.snap.Running[:b.live]
}

// buildSnapshot turns a state and the fleet into the core's input.
// Of the queued workloads it hands the core only the head of each queue
// (the window, scheduler.Config.MaxConsidered), the nominated ones among
// them marked, and every nominated one behind a window too.
// stopping lists dispatch ids already asked to stop: their work is marked
// Terminating for the core. With shared, the snapshot's Running is the
// mirror's own list (no copy of every running workload per cycle): the
// caller holds the mirror's lock for as long as it uses the snapshot and
// calls release before letting go.
func (l *Loop) buildSnapshot(s *state, ledger *quota.Ledger, now time.Time, stopping, nominated map[string]bool, shared bool) *built {
	b := &built{snap: &scheduler.Snapshot{Now: now, Ledger: ledger}, byID: s.workloads, current: s.current, invalid: map[string]string{}}
	tree, bad, err := convert.QueueTree(s.queues)
	if err != nil {
		l.log.Error("queue tree", "err", err)
		tree, _ = quota.NewTree(nil)
	}
	b.snap.Queues, b.badQ = tree, bad

	views := l.fleet.Views()
	viewOf := make(map[string]int, len(views))
	for i := range views {
		viewOf[views[i].Cluster.ID] = i
		if ds, ok := s.drain[views[i].Cluster.ID]; ok && ds.Draining && views[i].Cluster.State == scheduler.ClusterReady {
			views[i].Cluster.State = scheduler.ClusterDraining
		}
	}
	idx := make([]map[string]int, len(views)) // node indexes, built on first use
	// The core's result does not depend on the order of Running
	// (scheduler.TestDecideIgnoresRunningOrder), so the mirror's dense
	// list is copied as it is: no walk over a map, no sort.
	b.snap.Running = s.runs
	if shared {
		// The sums of the same list (work that stopped, appended below,
		// holds no quota); a copy outlives the lock, so the core sums it.
		b.snap.Charged = s.charge
	} else {
		b.snap.Running = slices.Grow(slices.Clone(s.runs), len(s.stopped))
	}
	b.live = len(b.snap.Running)
	for id := range stopping {
		if i, ok := s.runIdx[id]; ok {
			b.snap.Running[i].Terminating = true
			if shared {
				b.marked = append(b.marked, i)
			}
		}
	}
	// Work the agent has not yet reflected in its advertisement is
	// subtracted from the advertised free capacity here. Only fresh
	// dispatches can be such work; one acknowledged before its cluster's
	// last advertisement never is again, and leaves the set.
	for id, c := range s.fresh {
		r := c.r.r
		vi, ok := viewOf[r.Cluster]
		if !ok {
			continue
		}
		v := &views[vi]
		if at, ok := ackedAt(r, c.w.doc()); ok && at.Before(v.AdvertAt) {
			delete(s.fresh, id)
			continue
		}
		if idx[vi] == nil {
			v.OwnNodes() // the fleet's nodes are shared: copy before charging
			idx[vi] = nodeIndex(&v.Cluster)
		}
		charge(&v.Cluster, idx[vi], c.run.Workload, r.Placement)
	}
	// Work that stopped since its cluster last advertised is still in
	// that advertisement: the core sees it as Terminating, so a workload
	// that fits once it is gone waits for it instead of preempting more
	// (possibly on another cluster). It leaves once its cluster
	// advertises after it stopped. The mirror kept room for it, so a
	// shared list is not copied.
	for id, st := range s.stopped {
		vi, ok := viewOf[st.run.Cluster]
		if (ok && views[vi].AdvertAt.After(st.at)) || now.Sub(st.at) > stoppedTTL {
			delete(s.stopped, id)
			continue
		}
		b.snap.Running = append(b.snap.Running, st.run)
	}
	for _, v := range views {
		b.snap.Clusters = append(b.snap.Clusters, v.Cluster)
	}
	// The queued workloads, from the backlog's queues in order: no walk
	// over the backlog behind the windows, no sort.
	eligible := func(w *wl) bool {
		// A preempted one is held a while (its reason says until when);
		// a cancel request is finished by housekeeping.
		return s.cancelReq[w.id()] == nil && !held(w.doc(), now)
	}
	add := func(w *wl, nominated bool) {
		sw := w.sw
		if av := avoided(w.doc(), now); len(av) > 0 || nominated {
			cp := *sw
			cp.AvoidClusters, cp.Nominated = av, nominated
			sw = &cp
		}
		b.snap.Pending = append(b.snap.Pending, sw)
	}
	b.behind = s.backlog.heads(l.cfg.Scheduler.MaxConsidered, func(w *wl) bool {
		if nominated[w.id()] || !eligible(w) {
			return false // the nominated ones come below, wherever they stand
		}
		add(w, false)
		return true
	})
	for _, id := range sortedKeys(nominated) {
		if w := s.queued[id]; w != nil && w.sw != nil && eligible(w) {
			add(w, true)
		}
	}
	for _, id := range sortedKeys(s.backlog.bad) {
		w := s.backlog.bad[id]
		if eligible(w) {
			// The API validates on submit; a record that still does not
			// convert waits with a reason naming the field.
			b.invalid[id] = "cannot be scheduled as stored: " + w.swErr.Error()
		}
	}
	return b
}

// nodeIndex maps a cluster's node names to their index.
func nodeIndex(c *scheduler.Cluster) map[string]int {
	nodes := make(map[string]int, len(c.Nodes))
	for i := range c.Nodes {
		nodes[c.Nodes[i].Name] = i
	}
	return nodes
}

// charge subtracts a placement from a cluster's free capacity, clamping at
// zero; unknown nodes and GPU indices are skipped.
// nodes indexes c's nodes by name (build it once per cluster and snapshot
// with nodeIndex).
func charge(c *scheduler.Cluster, nodes map[string]int, w *scheduler.Workload, pl []scheduler.PodSetPlacement) {
	for _, p := range pl {
		var r gpufit.Request
		for k := range w.PodSets {
			if w.PodSets[k].Name == p.PodSet {
				r = w.PodSets[k].Req
				break
			}
		}
		for _, rp := range p.Replicas {
			i, ok := nodes[rp.Node]
			if !ok {
				continue
			}
			n := &c.Nodes[i].Res
			n.CPUMilliFree = max(0, n.CPUMilliFree-r.CPUMilli)
			n.MemMiBFree = max(0, n.MemMiBFree-r.MemMiB)
			for _, g := range rp.GPUs {
				if g < 0 || g >= len(n.GPUs) {
					continue
				}
				n.GPUs[g].FreeMilli = max(0, n.GPUs[g].FreeMilli-r.Milli)
				n.GPUs[g].FreeMemMiB = max(0, n.GPUs[g].FreeMemMiB-r.GPUMemMiB)
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// lostClusters lists clusters the fleet reports LOST, without converting
// every advertisement as Views does.
func lostClusters(f *fleet.Registry) map[string]bool {
	out := map[string]bool{}
	for _, id := range f.IDs() {
		if st, ok := f.State(id); ok && st == scheduler.ClusterLost {
			out[id] = true
		}
	}
	return out
}
