package dispatch

import (
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/convert"
	"github.com/meridian-gpu/meridian/hub/fleet"
	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

var protoUnmarshal = proto.Unmarshal

func tsOf(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// decodedItem is one decoded etcd value, reused while its revision holds.
type decodedItem struct {
	modRev int64
	w      *meridianv1.Workload
	r      *Record
	q      *meridianv1.Queue
	c      *clusterSettings
	err    error
	// sw is w converted for the core (no avoid list), or swErr.
	sw    *scheduler.Workload
	swErr error
}

// decodeCache keeps decoded values across cycles so that an unchanged key is
// not decoded again. Values are shared: treat them as read-only.
type decodeCache struct {
	mu    sync.Mutex
	items map[string]decodedItem
}

// wl is a workload with the revision the cycle read it at.
type wl struct {
	key    string
	modRev int64
	w      *meridianv1.Workload
	// sw is w converted for the core, shared across cycles: copy it before
	// changing it. swErr says why it does not convert.
	sw    *scheduler.Workload
	swErr error
}

// rec is a dispatch record with its revision.
type rec struct {
	key    string
	modRev int64
	r      *Record
}

// state is one consistent read of the cache, decoded.
type state struct {
	rev        int64
	workloads  map[string]*wl  // by id
	dispatches map[string]*rec // by dispatch id
	queues     []*meridianv1.Queue
	drain      map[string]clusterSettings
}

var (
	prefWorkloads  = store.Prefix(store.KindWorkloads)
	prefDispatches = store.Prefix(store.KindDispatches)
	prefQueues     = store.Prefix(store.KindQueues)
	prefClusters   = store.Prefix(store.KindClusters)
)

// readState decodes the cache. Undecodable values are logged once per
// revision and skipped.
func (l *Loop) readState() *state {
	items, rev := l.cache.Snapshot()
	s := &state{rev: rev, workloads: map[string]*wl{}, dispatches: map[string]*rec{}, drain: map[string]clusterSettings{}}
	l.decoded.mu.Lock()
	defer l.decoded.mu.Unlock()
	seen := make(map[string]bool, len(items))
	for k, it := range items {
		var kind store.Kind
		switch {
		case strings.HasPrefix(k, prefWorkloads):
			kind = store.KindWorkloads
		case strings.HasPrefix(k, prefDispatches):
			kind = store.KindDispatches
		case strings.HasPrefix(k, prefQueues):
			kind = store.KindQueues
		case strings.HasPrefix(k, prefClusters):
			kind = store.KindClusters
		default:
			continue
		}
		seen[k] = true
		d, ok := l.decoded.items[k]
		if !ok || d.modRev != it.ModRev {
			d = decodedItem{modRev: it.ModRev}
			switch kind {
			case store.KindWorkloads:
				d.w, d.err = decodeWorkload(it.Value)
				if d.err == nil {
					d.sw, d.swErr = convert.Workload(d.w, nil)
				}
			case store.KindDispatches:
				d.r, d.err = decodeRecord(it.Value)
			case store.KindQueues:
				q := &meridianv1.Queue{}
				if d.err = protoUnmarshal(it.Value, q); d.err == nil {
					d.q = q
				}
			case store.KindClusters:
				c := &clusterSettings{}
				if d.err = json.Unmarshal(it.Value, c); d.err == nil {
					d.c = c
				}
			}
			if d.err != nil {
				l.log.Error("undecodable record skipped", "key", k, "err", d.err)
			}
			l.decoded.items[k] = d
		}
		if d.err != nil {
			continue
		}
		switch kind {
		case store.KindWorkloads:
			if d.w.GetId() != "" {
				s.workloads[d.w.GetId()] = &wl{key: k, modRev: it.ModRev, w: d.w, sw: d.sw, swErr: d.swErr}
			}
		case store.KindDispatches:
			s.dispatches[d.r.DispatchID] = &rec{key: k, modRev: it.ModRev, r: d.r}
		case store.KindQueues:
			s.queues = append(s.queues, d.q)
		case store.KindClusters:
			s.drain[strings.TrimPrefix(k, prefClusters)] = *d.c
		}
	}
	for k := range l.decoded.items {
		if !seen[k] {
			delete(l.decoded.items, k)
		}
	}
	sort.Slice(s.queues, func(a, b int) bool { return s.queues[a].GetPath() < s.queues[b].GetPath() })
	return s
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
	current map[string]*rec // dispatch id -> record whose workload still points at it
	invalid map[string]string
}

// buildSnapshot turns a state and the fleet into the core's input.
func (l *Loop) buildSnapshot(s *state, ledger *quota.Ledger, now time.Time) *built {
	b := &built{snap: &scheduler.Snapshot{Now: now, Ledger: ledger}, byID: s.workloads, current: map[string]*rec{}, invalid: map[string]string{}}
	tree, bad, err := convert.QueueTree(s.queues)
	if err != nil {
		l.log.Error("queue tree", "err", err)
		tree, _ = quota.NewTree(nil)
	}
	b.snap.Queues, b.badQ = tree, bad

	for id, r := range s.dispatches {
		w := s.workloads[r.r.WorkloadID]
		if w == nil || w.w.GetStatus().GetDispatchId() != id || !active(w.w.GetStatus().GetPhase()) {
			continue
		}
		b.current[id] = r
	}

	views := l.fleet.Views()
	for i := range views {
		if ds, ok := s.drain[views[i].Cluster.ID]; ok && ds.Draining && views[i].Cluster.State == scheduler.ClusterReady {
			views[i].Cluster.State = scheduler.ClusterDraining
		}
	}
	idx := make([]map[string]int, len(views)) // node indexes, built on first use
	for _, id := range sortedKeys(b.current) {
		r := b.current[id]
		w := s.workloads[r.r.WorkloadID]
		sw := w.sw
		if w.swErr != nil {
			l.log.Error("running workload does not convert; its usage is still charged", "workload", w.w.GetId(), "err", w.swErr)
			sw = &scheduler.Workload{ID: w.w.GetId(), Queue: w.w.GetQueue()}
		}
		started := r.r.CreatedAt
		if st := w.w.GetStatus().GetStartTime(); st != nil {
			started = st.AsTime()
		}
		b.snap.Running = append(b.snap.Running, scheduler.Running{
			Workload: sw, Cluster: r.r.Cluster, StartedAt: started, Usage: r.r.Usage, Placement: r.r.Placement,
		})
		// Work the agent has not yet reflected in its advertisement is
		// subtracted from the advertised free capacity here.
		for vi := range views {
			v := &views[vi]
			if v.Cluster.ID != r.r.Cluster {
				continue
			}
			if !r.r.Acked || !r.r.AckedAt.Before(v.AdvertAt) {
				if idx[vi] == nil {
					idx[vi] = nodeIndex(&v.Cluster)
				}
				charge(&v.Cluster, idx[vi], sw, r.r.Placement)
			}
		}
	}
	for _, v := range views {
		b.snap.Clusters = append(b.snap.Clusters, v.Cluster)
	}
	for _, id := range sortedKeys(s.workloads) {
		w := s.workloads[id]
		if w.w.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED || hasCondition(w.w, ConditionCancelRequested) {
			continue
		}
		if held(w.w, now) {
			continue // preempted recently; its reason says until when
		}
		if w.swErr != nil {
			// The API validates on submit; a record that still does not
			// convert waits with a reason naming the field.
			b.invalid[id] = "cannot be scheduled as stored: " + w.swErr.Error()
			continue
		}
		sw := w.sw
		if av := avoided(w.w, now); len(av) > 0 {
			cp := *sw
			cp.AvoidClusters = av
			sw = &cp
		}
		b.snap.Pending = append(b.snap.Pending, sw)
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

// lostViews lists clusters the fleet reports LOST.
func lostSet(views []fleet.View) map[string]bool {
	out := map[string]bool{}
	for _, v := range views {
		if v.Cluster.State == scheduler.ClusterLost {
			out[v.Cluster.ID] = true
		}
	}
	return out
}
