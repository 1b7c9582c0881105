package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/convert"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/internal/protofast"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// DefaultTimeout is how long a cluster may stay silent before it is LOST.
const DefaultTimeout = 15 * time.Second

// ErrUnknownCluster is returned for a cluster id the registry has never heard.
var ErrUnknownCluster = errors.New("unknown cluster")

// IsUnknownCluster reports whether err is or wraps ErrUnknownCluster.
func IsUnknownCluster(err error) bool { return errors.Is(err, ErrUnknownCluster) }

// Options configure a Registry.
type Options struct {
	// Clock returns the hub's current time; nil means time.Now.
	Clock func() time.Time
	// Timeout is the silence after which a cluster is LOST; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// Logger receives dropped-input and state-change logs; nil drops them.
	Logger *slog.Logger
}

// Registry is the cluster registry. It is safe for concurrent use.
type Registry struct {
	clock   func() time.Time
	timeout time.Duration
	log     *slog.Logger

	mu       sync.Mutex
	clusters map[string]*entry
	changed  chan struct{}
	asked    map[string]time.Time // when each cluster was last asked for a full advertisement
	replayed <-chan struct{}      // Start's advert watch has handed over every cluster's latest
}

type entry struct {
	id          string
	ad          *agentv1.Advertisement // current inventory, deltas applied
	conv        scheduler.Cluster      // ad converted for the core (state and freshness filled in by Views)
	session     string
	seq         uint64
	advertAt    time.Time // hub time the inventory last changed
	lastSeen    time.Time // hub time of the last advert, delta or heartbeat
	draining    bool
	drainReason string
	lost        bool
	reported    []string          // dispatch ids of the last heartbeat, sorted
	reportedWL  map[string]string // dispatch id -> workload id, from the same heartbeat
	reportedAt  time.Time
	reportedSet bool
	agentVer    string
}

// New returns an empty registry.
func New(opts Options) *Registry {
	// Nothing to replay until Start says otherwise.
	replayed := make(chan struct{})
	close(replayed)
	r := &Registry{clock: opts.Clock, timeout: opts.Timeout, log: opts.Logger, clusters: map[string]*entry{}, changed: make(chan struct{}, 1), replayed: replayed}
	if r.clock == nil {
		r.clock = time.Now
	}
	if r.timeout <= 0 {
		r.timeout = DefaultTimeout
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r
}

// Timeout is the silence after which a cluster is LOST.
func (r *Registry) Timeout() time.Duration { return r.timeout }

// Changed is signalled (without blocking; one pending signal at most) when an
// inventory or a state changes, so the scheduling loop can run a cycle.
func (r *Registry) Changed() <-chan struct{} { return r.changed }

func (r *Registry) notify() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// Start feeds the registry from the bus: every advert in the ADVERT stream
// (the latest per cluster first) and every heartbeat. It returns once both
// subscriptions run; they stop when ctx ends or the bus closes.
func (r *Registry) Start(ctx context.Context, bus *natsbus.Bus) error {
	if bus == nil {
		return errors.New("fleet: Start: bus is nil")
	}
	adverts, err := bus.WatchAdverts(ctx, func(cluster string, payload []byte) {
		err := r.HandleAdvertPayload(cluster, payload)
		if errors.Is(err, ErrNoBase) && r.shouldAsk(cluster) {
			// Ask for a full one rather than wait for the agent's
			// next periodic one (every hub starts this way when every
			// hub restarted).
			if aerr := bus.RequestAdvert(cluster); aerr != nil {
				r.log.Warn("fleet: ask for a full advertisement", "cluster", cluster, "err", aerr)
			} else {
				r.log.Info("fleet: asked for a full advertisement", "cluster", cluster, "why", err.Error())
			}
			return
		}
		if err != nil {
			r.log.Warn("fleet: dropped advertisement", "cluster", cluster, "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	r.mu.Lock()
	r.replayed = adverts.CaughtUp()
	r.mu.Unlock()
	if _, err := bus.SubscribeHeartbeats(ctx, func(cluster string, payload []byte) {
		if err := r.HandleHeartbeatPayload(cluster, payload); err != nil {
			r.log.Warn("fleet: dropped heartbeat", "cluster", cluster, "err", err)
		}
	}); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return nil
}

// Replayed is closed once Start's feed has applied the latest
// advertisement the bus held for every cluster: before that, a cluster
// the registry does not list may merely not have been read yet. Without
// Start there is nothing to replay, and it is closed from the start.
func (r *Registry) Replayed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.replayed
}

// HandleAdvertPayload decodes one message of the advert subject: a full
// Advertisement, or an AdvertisementDelta (told apart by the fields that
// only decode cleanly as one of them), and applies it.
func (r *Registry) HandleAdvertPayload(subjectCluster string, payload []byte) error {
	ad := &agentv1.Advertisement{}
	if err := protofast.Unmarshal(payload, ad); err == nil && len(ad.ProtoReflect().GetUnknown()) == 0 {
		return r.ApplyAdvert(subjectCluster, ad)
	}
	d := &agentv1.AdvertisementDelta{}
	if err := protofast.Unmarshal(payload, d); err != nil {
		return fmt.Errorf("fleet: advert from %s decodes neither as Advertisement nor as AdvertisementDelta: %w", subjectCluster, err)
	}
	return r.ApplyDelta(subjectCluster, d)
}

// seenAt is the hub time to record for a message the agent sent at sentAt:
// now, unless the message is older than the timeout by the agent's own clock
// (an advert replayed from the stream after a hub restart), in which case it
// proves nothing about liveness now.
func (r *Registry) seenAt(now time.Time, sentAt *timestamppb.Timestamp) time.Time {
	if sentAt == nil {
		return now
	}
	s := sentAt.AsTime()
	if now.Sub(s) > r.timeout {
		return s
	}
	return now
}

// entryLocked returns the cluster's entry, creating it; r.mu held.
func (r *Registry) entryLocked(id string) *entry {
	e := r.clusters[id]
	if e == nil {
		e = &entry{id: id}
		r.clusters[id] = e
	}
	return e
}

// checkSender validates a message's cluster_id and that it came on that
// cluster's own subject (subjectCluster, when known).
func checkSender(kind, subjectCluster, id string) error {
	if err := natsbus.ValidateClusterID(id); err != nil {
		return fmt.Errorf("fleet: %s cluster_id: %w", kind, err)
	}
	if subjectCluster != "" && subjectCluster != id {
		return fmt.Errorf("fleet: %s cluster_id %q arrived on the subject of cluster %q", kind, id, subjectCluster)
	}
	return nil
}

// ApplyAdvert replaces a cluster's inventory with a full advertisement. An
// advertisement of the same agent session with a sequence number not above
// the last applied one is ignored. subjectCluster, when set, must match the
// advert's cluster_id.
func (r *Registry) ApplyAdvert(subjectCluster string, ad *agentv1.Advertisement) error {
	if ad == nil {
		return errors.New("fleet: advertisement is nil")
	}
	id := ad.GetClusterId()
	if err := checkSender("advertisement", subjectCluster, id); err != nil {
		return err
	}
	conv, err := convert.Cluster(ad, scheduler.ClusterReady, time.Time{})
	if err != nil {
		return fmt.Errorf("fleet: advertisement from %s: %w", id, err)
	}
	now := r.clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entryLocked(id)
	if e.ad != nil && e.session == ad.GetSessionId() && ad.GetSeq() <= e.seq && ad.GetSeq() != 0 {
		return nil // stale or repeated
	}
	e.ad, e.conv = protofast.Clone(ad), conv
	e.session, e.seq = ad.GetSessionId(), ad.GetSeq()
	e.advertAt = now
	r.seenLocked(e, r.seenAt(now, ad.GetSentAt()))
	r.notify()
	return nil
}

// ErrNoBase: a delta that does not build on the last applied
// advertisement; the cluster's next full advertisement repairs the gap.
var ErrNoBase = errors.New("waiting for a full advertisement")

// askGap is the least time between two requests for a full advertisement
// from one cluster.
const askGap = 2 * time.Second

// shouldAsk reports whether to ask cluster for a full advertisement now,
// at most once per askGap.
func (r *Registry) shouldAsk(cluster string) bool {
	now := r.clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if last, ok := r.asked[cluster]; ok && now.Sub(last) < askGap {
		return false
	}
	if r.asked == nil {
		r.asked = map[string]time.Time{}
	}
	r.asked[cluster] = now
	return true
}

// ApplyDelta applies an advertisement delta. It is ignored unless it builds
// on the last applied sequence number of the same session (the agent's next
// full advertisement repairs the gap).
func (r *Registry) ApplyDelta(subjectCluster string, d *agentv1.AdvertisementDelta) error {
	if d == nil {
		return errors.New("fleet: delta is nil")
	}
	id := d.GetClusterId()
	if err := checkSender("delta", subjectCluster, id); err != nil {
		return err
	}
	now := r.clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.clusters[id]
	if e == nil {
		// The cluster exists, though without capacity until its next full
		// advertisement (as after a heartbeat that comes first): a hub
		// that starts where a cluster's latest message is a delta still
		// knows to wait for it after a restore (hub/dispatch, adopt.go).
		e = r.entryLocked(id)
		r.seenLocked(e, r.seenAt(now, d.GetSentAt()))
	}
	if e.ad == nil || e.session != d.GetSessionId() || e.seq != d.GetBaseSeq() {
		return fmt.Errorf("fleet: delta %d of %s builds on %d, which is not the last applied advertisement: %w", d.GetSeq(), id, d.GetBaseSeq(), ErrNoBase)
	}
	next := shallowWithoutNodes(e.ad)
	removed := map[string]bool{}
	for _, n := range d.GetRemovedNodes() {
		removed[n] = true
	}
	changed := maps.Clone(removed) // what ClusterReusing must convert afresh
	for _, up := range d.GetUpsertedNodes() {
		changed[up.GetName()] = true
	}
	nodes := make([]*agentv1.Node, 0, len(e.ad.Nodes)+len(d.GetUpsertedNodes()))
	at := make(map[string]int, len(e.ad.Nodes)+len(d.GetUpsertedNodes())) // node name -> index in nodes
	for _, n := range e.ad.Nodes {
		if !removed[n.GetName()] {
			at[n.GetName()] = len(nodes)
			nodes = append(nodes, n)
		}
	}
	for _, up := range d.GetUpsertedNodes() {
		if i, ok := at[up.GetName()]; ok {
			nodes[i] = up
			continue
		}
		at[up.GetName()] = len(nodes)
		nodes = append(nodes, up)
	}
	sort.Slice(nodes, func(a, b int) bool { return nodes[a].GetName() < nodes[b].GetName() })
	next.Nodes, next.Seq, next.SentAt = nodes, d.GetSeq(), d.GetSentAt()
	conv, err := convert.ClusterReusing(next, scheduler.ClusterReady, time.Time{}, e.conv, changed)
	if err != nil {
		return fmt.Errorf("fleet: delta %d from %s: %w", d.GetSeq(), id, err)
	}
	e.ad, e.conv, e.seq, e.advertAt = next, conv, d.GetSeq(), now
	r.seenLocked(e, r.seenAt(now, d.GetSentAt()))
	r.notify()
	return nil
}

// HandleHeartbeatPayload decodes and applies one heartbeat.
func (r *Registry) HandleHeartbeatPayload(subjectCluster string, payload []byte) error {
	hb := &agentv1.Heartbeat{}
	if err := protofast.Unmarshal(payload, hb); err != nil {
		return fmt.Errorf("fleet: heartbeat from %s: %w", subjectCluster, err)
	}
	return r.ApplyHeartbeat(subjectCluster, hb)
}

// ApplyRegister records an agent's Register: it counts as being heard, and
// its agent version is shown in the API. Capacity still comes only from
// advertisements.
func (r *Registry) ApplyRegister(req *agentv1.Register) error {
	if req == nil {
		return errors.New("fleet: register is nil")
	}
	id := req.GetClusterId()
	if err := checkSender("register", "", id); err != nil {
		return err
	}
	now := r.clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entryLocked(id)
	e.agentVer = req.GetAgentVersion()
	r.seenLocked(e, r.seenAt(now, req.GetSentAt()))
	return nil
}

// ApplyHeartbeat records that a cluster is alive and which dispatch ids it
// holds. A heartbeat from a cluster that has not advertised yet is
// remembered (it has no capacity until its first advertisement).
func (r *Registry) ApplyHeartbeat(subjectCluster string, hb *agentv1.Heartbeat) error {
	if hb == nil {
		return errors.New("fleet: heartbeat is nil")
	}
	id := hb.GetClusterId()
	if id == "" {
		id = subjectCluster
	}
	if err := checkSender("heartbeat", subjectCluster, id); err != nil {
		return err
	}
	now := r.clock()
	ids := make([]string, 0, len(hb.GetDispatches()))
	wls := make(map[string]string, len(hb.GetDispatches()))
	for _, d := range hb.GetDispatches() {
		if d.GetDispatchId() != "" {
			ids = append(ids, d.GetDispatchId())
			wls[d.GetDispatchId()] = d.GetWorkloadId()
		}
	}
	sort.Strings(ids)
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entryLocked(id)
	e.reported, e.reportedWL, e.reportedAt, e.reportedSet = ids, wls, now, true
	r.seenLocked(e, r.seenAt(now, hb.GetSentAt()))
	return nil
}

func (r *Registry) seenLocked(e *entry, at time.Time) {
	if at.After(e.lastSeen) {
		e.lastSeen = at
	}
	if e.lost && r.clock().Sub(e.lastSeen) <= r.timeout {
		e.lost = false
		r.log.Info("fleet: cluster is back", "cluster", e.id)
		r.notify()
	}
}

// Sweep marks clusters silent for longer than the timeout as LOST and
// returns the ids that became LOST in this call, sorted.
func (r *Registry) Sweep() []string {
	now := r.clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	var lost []string
	for id, e := range r.clusters {
		if !e.lost && now.Sub(e.lastSeen) > r.timeout {
			e.lost = true
			lost = append(lost, id)
			r.log.Warn("fleet: cluster lost", "cluster", id, "silent_for", now.Sub(e.lastSeen).String())
		}
	}
	sort.Strings(lost)
	if len(lost) > 0 {
		r.notify()
	}
	return lost
}

// View is one cluster as the scheduling loop needs it.
type View struct {
	Cluster scheduler.Cluster
	// AdvertAt is the hub time the inventory last changed; dispatches the
	// agent acknowledged after it are not yet reflected in it.
	AdvertAt time.Time
}

// OwnNodes gives the view its own copy of its nodes, which the caller may
// then change.
func (v *View) OwnNodes() {
	nodes := make([]scheduler.Node, len(v.Cluster.Nodes))
	for i := range v.Cluster.Nodes {
		nodes[i] = v.Cluster.Nodes[i]
		nodes[i].Res = v.Cluster.Nodes[i].Res.Clone()
	}
	v.Cluster.Nodes = nodes
}

func stateOf(e *entry) scheduler.ClusterState {
	switch {
	case e.lost:
		return scheduler.ClusterLost
	case e.draining:
		return scheduler.ClusterDraining
	}
	return scheduler.ClusterReady
}

// Views returns every cluster with an inventory, sorted by id. The Views
// are the caller's, but their nodes are shared with the registry: call
// OwnNodes before changing a view's nodes. (Copying every node of every
// cluster on every scheduling cycle, when the loop changes only the few
// clusters with work not yet advertised, was a tenth of the loop's
// allocation.)
func (r *Registry) Views() []View {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]View, 0, len(r.clusters))
	for _, e := range r.clusters {
		if e.ad == nil {
			continue
		}
		// The conversion was made when the advertisement arrived, and is
		// replaced (never changed) when the next one does.
		c := e.conv
		c.State, c.LastSeen = stateOf(e), e.lastSeen
		out = append(out, View{Cluster: c, AdvertAt: e.advertAt})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Cluster.ID < out[b].Cluster.ID })
	return out
}

// State returns a cluster's state, and false when the cluster is unknown.
func (r *Registry) State(id string) (scheduler.ClusterState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.clusters[id]
	if e == nil {
		return scheduler.ClusterReady, false
	}
	return stateOf(e), true
}

// Reported returns the dispatch ids of a cluster's last heartbeat and when it
// arrived; ok is false before the first heartbeat.
func (r *Registry) Reported(id string) (ids []string, at time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.clusters[id]
	if e == nil || !e.reportedSet {
		return nil, time.Time{}, false
	}
	return append([]string(nil), e.reported...), e.reportedAt, true
}

// ReportedSet is Reported as a set, without a copy: the dispatch ids the
// last heartbeat showed, each with its workload id (empty from agents
// that do not send it). Each heartbeat replaces the map whole and never
// changes it, so the caller may read it without a lock but must not
// change it.
func (r *Registry) ReportedSet(id string) (dispatches map[string]string, at time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.clusters[id]
	if e == nil || !e.reportedSet {
		return nil, time.Time{}, false
	}
	return e.reportedWL, e.reportedAt, true
}

// ReportedWorkload returns the workload id a cluster's last heartbeat gave
// for one of its dispatches, if it gave one.
func (r *Registry) ReportedWorkload(cluster, dispatchID string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.clusters[cluster]
	if e == nil {
		return "", false
	}
	w, ok := e.reportedWL[dispatchID]
	return w, ok && w != ""
}

// ReportedAt returns when a cluster's last heartbeat arrived, without
// copying its list; ok is false before the first heartbeat.
func (r *Registry) ReportedAt(id string) (at time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.clusters[id]
	if e == nil || !e.reportedSet {
		return time.Time{}, false
	}
	return e.reportedAt, true
}

// Capable reports whether a cluster's last full advertisement lists
// capability (agentv1.Capability*). Every hub replica reads every
// advertisement, so a new leader knows at once what each agent reads.
func (r *Registry) Capable(id, capability string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.clusters[id]
	return e != nil && e.ad != nil && slices.Contains(e.ad.GetCapabilities(), capability)
}

// IDs returns every known cluster id, sorted.
func (r *Registry) IDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.clusters))
	for id := range r.clusters {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

func (r *Registry) apiLocked(e *entry) *meridianv1.Cluster {
	c := &meridianv1.Cluster{
		Id:                e.id,
		State:             convert.State(stateOf(e)),
		DrainReason:       e.drainReason,
		RunningDispatches: int32(len(e.reported)),
		AgentVersion:      e.agentVer,
	}
	if !e.lastSeen.IsZero() {
		c.LastHeartbeat = timestamppb.New(e.lastSeen)
	}
	if e.ad != nil {
		c.Labels = map[string]string{}
		for k, v := range e.ad.GetLabels() {
			c.Labels[k] = v
		}
		modes, _ := convert.Modes(e.ad.GetFractionalModes())
		c.FractionalModes = convert.ModesList(modes)
		c.Capacity = convert.Capacity(e.ad)
		c.Connector = e.ad.GetConnector()
		c.AdvertisementSeq = int64(e.ad.GetSeq())
	}
	return c
}

// ListClusters returns every known cluster in API form, sorted by id. It
// implements the API's ClusterSource.
func (r *Registry) ListClusters() []*meridianv1.Cluster {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*meridianv1.Cluster, 0, len(r.clusters))
	for _, e := range r.clusters {
		out = append(out, r.apiLocked(e))
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Id < out[b].Id })
	return out
}

// GetCluster returns one cluster in API form.
func (r *Registry) GetCluster(id string) (*meridianv1.Cluster, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.clusters[id]
	if e == nil {
		return nil, false
	}
	return r.apiLocked(e), true
}

// SetDraining starts or stops draining a cluster: a draining cluster keeps
// its running work and takes nothing new. It fails with ErrUnknownCluster for
// a cluster never heard from. The flag lives in this registry's memory.
func (r *Registry) SetDraining(ctx context.Context, id string, draining bool) error {
	return r.SetDrainingReason(ctx, id, draining, "")
}

// SetDrainingReason is SetDraining with the operator's reason.
func (r *Registry) SetDrainingReason(ctx context.Context, id string, draining bool, reason string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.clusters[id]
	if e == nil {
		return fmt.Errorf("fleet: cluster %q: %w", id, ErrUnknownCluster)
	}
	if e.draining != draining {
		r.notify()
	}
	e.draining = draining
	e.drainReason = ""
	if draining {
		e.drainReason = reason
	}
	return nil
}

// shallowWithoutNodes copies ad's fields other than its nodes into a new
// advertisement, sharing their values. A delta replaces the node list and
// a few scalars; a deep copy of every node, which ApplyDelta made before,
// was most of what a delta cost the hub. Applied advertisements and their
// nodes are never modified in place, so sharing them is safe.
func shallowWithoutNodes(ad *agentv1.Advertisement) *agentv1.Advertisement {
	out := &agentv1.Advertisement{}
	dst := out.ProtoReflect()
	ad.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Name() != "nodes" {
			dst.Set(fd, v)
		}
		return true
	})
	return out
}
