package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/api/validation"
	"github.com/meridian-gpu/meridian/hub/records"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// WatchWorkloads streams workload changes. From revision 0 it reads the
// watch cache, whose per-subscriber delivery is coalesced per workload and
// never blocks the cache: a slow client may skip intermediate states of a
// workload but always receives its latest one, and one workload's events
// arrive in revision order. While a client lags, events of different
// workloads may arrive out of revision order, so a client that resumes
// with since_revision after lagging should prefer send_initial. Quiet
// streams get a BOOKMARK with the highest revision processed every
// bookmark interval. With since_revision it replays from etcd in order.
func (s *Service) WatchWorkloads(req *meridianv1.WatchWorkloadsRequest, stream meridianv1.WorkloadService_WatchWorkloadsServer) error {
	if q := req.GetQueue(); q != "" {
		if err := validation.CheckQueuePath(q); err != nil {
			return invalid("queue", "%v", err)
		}
	}
	sel, err := parseSelector(req.GetLabelSelector())
	if err != nil {
		return invalid("label_selector", "%v", err)
	}
	if r := req.GetSinceRevision(); r < 0 {
		return invalid("since_revision", "must not be negative (got %d)", r)
	}
	for i, p := range req.GetPhase() {
		if _, ok := meridianv1.WorkloadPhase_name[int32(p)]; !ok {
			return invalid(fmt.Sprintf("phase[%d]", i), "unknown phase %d", p)
		}
	}
	if err := checkView(req.GetView()); err != nil {
		return err
	}
	if req.GetSinceRevision() > 0 && req.GetSendInitial() {
		return invalid("send_initial", "cannot be combined with since_revision; resume or start fresh")
	}
	if r := req.GetSinceRevision(); r > 0 {
		// etcd would wait silently for a revision it has not reached.
		head, err := s.cli.Get(stream.Context(), store.Prefix(store.KindWorkloads), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return storeErr("watch: read etcd revision", err)
		}
		if cur := head.Header.Revision; r > cur {
			return fieldError(codes.OutOfRange, "since_revision", "revision %d is in the future: the store is at revision %d; pass a revision from an event or a list, or 0 to start from now", r, cur)
		}
	}
	f := watchFilter{queue: req.GetQueue(), sel: sel, phases: req.GetPhase(), ctx: stream.Context(),
		basic: req.GetView() == meridianv1.WorkloadView_WORKLOAD_VIEW_BASIC}
	if req.GetSinceRevision() > 0 || s.d.Workloads == nil {
		return s.watchEtcd(stream.Context(), req, f, stream)
	}
	return s.watchCache(stream.Context(), req, f, stream)
}

type watchFilter struct {
	queue  string
	sel    selector
	phases []meridianv1.WorkloadPhase // empty: all, deletions included
	ctx    context.Context            // the caller: only the queues it may view
	basic  bool                       // send the basic view (WORKLOAD_VIEW_BASIC)
}

// view is w as the watcher asked to see it.
func (f watchFilter) view(w *meridianv1.Workload) *meridianv1.Workload {
	if f.basic {
		return records.BasicOf(w)
	}
	return w
}

// stored makes b, a workload as stored, the event's workload as the
// watcher asked to see it, without decoding it; false when b is not a
// workload's encoding.
func (f watchFilter) stored(we *meridianv1.WorkloadEvent, b []byte) bool {
	if f.basic {
		var err error
		if b, err = records.BasicWorkload(b); err != nil {
			return false
		}
	}
	withStoredWorkload(we, b)
	return true
}

func (f watchFilter) match(w *meridianv1.Workload) bool {
	return f.matchQueue(w.GetQueue()) && f.matchPhase(w.GetStatus().GetPhase()) && f.sel.matches(w.GetLabels())
}

// matchPhase is the part of match that needs only the workload's phase.
func (f watchFilter) matchPhase(p meridianv1.WorkloadPhase) bool {
	return len(f.phases) == 0 || slices.Contains(f.phases, p)
}

// deletions says whether deletions are sent: not when phases are chosen,
// as a deleted workload has none.
func (f watchFilter) deletions() bool { return len(f.phases) == 0 }

// matchQueue is the part of match that needs only the workload's queue.
func (f watchFilter) matchQueue(queue string) bool {
	return queueMatches(f.queue, queue) && canView(f.ctx, queue)
}

type eventSender interface {
	Send(*meridianv1.WorkloadEvent) error
}

func (s *Service) watchCache(ctx context.Context, req *meridianv1.WatchWorkloadsRequest, f watchFilter, out eventSender) error {
	c := s.d.Workloads
	select {
	case <-c.Ready():
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
	// Read-your-writes: let the cache catch up with etcd's current
	// revision, so a client that just submitted sees its workload.
	head, err := s.cli.Get(ctx, store.Prefix(store.KindWorkloads), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return storeErr("watch: read etcd revision", err)
	}
	if err := c.WaitForRevision(ctx, head.Header.Revision); err != nil {
		return status.Errorf(codes.Unavailable, "watch: the hub's workload cache lags etcd: %v", err)
	}
	// Subscribe first, then read the revision: every change after it
	// arrives on the channel. Only a watch that sends the initial
	// workloads copies the cache.
	events, cancel := c.Subscribe()
	defer cancel()
	prefix := store.Prefix(store.KindWorkloads)
	var rev int64
	if req.GetSendInitial() {
		var snap map[string]store.Item
		snap, rev = c.Snapshot()
		keys := make([]string, 0, len(snap))
		for k := range snap {
			// The cache may mirror more than workloads (the hub shares one
			// cache of the whole root).
			if strings.HasPrefix(k, prefix) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			w, err := DecodeWorkloadRecord(snap[k].Value)
			if err != nil || !f.match(w) {
				continue
			}
			if err := out.Send(&meridianv1.WorkloadEvent{Type: meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_ADDED, Workload: f.view(w), Revision: snap[k].ModRev}); err != nil {
				return err
			}
		}
	} else {
		rev = c.Rev()
	}
	if err := out.Send(&meridianv1.WorkloadEvent{Type: meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK, Revision: rev, Time: timestamppb.New(s.now())}); err != nil {
		return err
	}
	// seen is the highest revision this stream has processed (sent or
	// filtered out); quiet streams get it in a periodic BOOKMARK.
	seen, bookmarked := rev, rev
	tick := time.NewTicker(s.bookmarkEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if seen == bookmarked {
				continue
			}
			bookmarked = seen
			if err := out.Send(&meridianv1.WorkloadEvent{Type: meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK, Revision: seen, Time: timestamppb.New(s.now())}); err != nil {
				return err
			}
		case ev, ok := <-events:
			if !ok {
				return status.Error(codes.Unavailable, "watch: the hub's workload cache stopped; reconnect with since_revision")
			}
			if ev.ModRev <= rev || !strings.HasPrefix(ev.Key, prefix) {
				continue
			}
			seen = max(seen, ev.ModRev)
			we, ok := s.cacheEvent(ev, rev, f)
			if !ok {
				continue
			}
			if err := out.Send(we); err != nil {
				return err
			}
		}
	}
}

// cacheEvent turns a cache event into an API event, or false when it is
// not for this watcher. start is the revision the watch started from: the
// watcher knew the key before ev when its incarnation existed then or an
// earlier event of it arrived (knewBefore), whether or not that event
// matched the filter: a workload that moves into a watched phase is
// MODIFIED, as in a watch from etcd, unless the subscriber folded its
// creation into this event (the watch had not taken it yet), which makes
// it ADDED (docs/api.md, "Events are level-based").
func (s *Service) cacheEvent(ev store.Event, start int64, f watchFilter) (*meridianv1.WorkloadEvent, bool) {
	prefix := store.Prefix(store.KindWorkloads)
	we := &meridianv1.WorkloadEvent{Revision: ev.ModRev, Time: timestamppb.New(s.now())}
	known := knewBefore(ev, start)
	if ev.Type == store.EventDelete {
		if !known || !f.deletions() {
			return nil, false
		}
		we.Type = meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_DELETED
		we.Workload = &meridianv1.Workload{Id: strings.TrimPrefix(ev.Key, prefix)}
		return we, true
	}
	we.Type = meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_MODIFIED
	if !known {
		we.Type = meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_ADDED
	}
	// Every watcher sees every workload's changes: one that watches a
	// queue it does not see, or another queue, tells so from the
	// record's summary without decoding it.
	// The cache's values never change: the summary may share their bytes.
	if sm, err := records.SummarizeWorkloadShared(ev.Value); err == nil {
		if !f.matchQueue(sm.Queue) || !f.matchPhase(sm.Phase) {
			return nil, false
		}
		if len(f.sel) == 0 && f.stored(we, ev.Value) {
			return we, true
		}
	}
	w, err := DecodeWorkloadRecord(ev.Value)
	if err != nil {
		s.log.Error("watch: skipping undecodable workload record", "key", ev.Key, "err", err)
		return nil, false
	}
	if !f.match(w) {
		return nil, false
	}
	we.Workload = f.view(w)
	return we, true
}

// knewBefore says whether a watcher that started at revision start had
// the key of ev before ev: its incarnation existed at start (it was in the
// watcher's snapshot), or was created later by a change an earlier event
// carried (the event is not Fresh). A key created and deleted between two
// events the watcher received is one it never had: its delete is not
// sent. An unknown create revision (0) counts as known.
func knewBefore(ev store.Event, start int64) bool {
	return ev.CreateRev <= start || !ev.Fresh
}

// withStoredWorkload makes b, a workload as stored, the event's workload
// without decoding it: b goes out as field 2 (workload) among the event's
// unknown fields, which the marshaller writes verbatim. The store holds
// the deterministic encoding, so the client receives what a decode and a
// re-encode would have sent, for the price of a copy; a watcher with a
// label selector still decodes, to match the labels.
func withStoredWorkload(we *meridianv1.WorkloadEvent, b []byte) {
	raw := make([]byte, 0, len(b)+protowire.SizeTag(workloadEventWorkloadField)+protowire.SizeVarint(uint64(len(b))))
	raw = protowire.AppendTag(raw, workloadEventWorkloadField, protowire.BytesType)
	raw = protowire.AppendBytes(raw, b)
	we.ProtoReflect().SetUnknown(raw)
}

// workloadEventWorkloadField is WorkloadEvent.workload's field number.
var workloadEventWorkloadField = protowire.Number((&meridianv1.WorkloadEvent{}).ProtoReflect().Descriptor().Fields().ByName("workload").Number())

func (s *Service) watchEtcd(ctx context.Context, req *meridianv1.WatchWorkloadsRequest, f watchFilter, out eventSender) error {
	prefix := store.Prefix(store.KindWorkloads)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	from := req.GetSinceRevision() + 1
	if req.GetSinceRevision() == 0 {
		// No cache: list now (optionally sending it), then watch after.
		items, rev, err := s.st.List(ctx, prefix, 0)
		if err != nil {
			return storeErr("watch: list workloads", err)
		}
		if req.GetSendInitial() {
			for _, it := range items {
				w, err := DecodeWorkloadRecord(it.Value)
				if err != nil || !f.match(w) {
					continue
				}
				if err := out.Send(&meridianv1.WorkloadEvent{Type: meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_ADDED, Workload: f.view(w), Revision: it.ModRev}); err != nil {
					return err
				}
			}
		}
		if err := out.Send(&meridianv1.WorkloadEvent{Type: meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK, Revision: rev, Time: timestamppb.New(s.now())}); err != nil {
			return err
		}
		from = rev + 1
	}
	wch := s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithPrevKV())
	for wr := range wch {
		if wr.CompactRevision != 0 || errors.Is(wr.Err(), rpctypes.ErrCompacted) {
			return fieldError(codes.OutOfRange, "since_revision", "revision %d has been compacted (oldest available %d); list again or watch with send_initial", from-1, wr.CompactRevision)
		}
		if err := wr.Err(); err != nil {
			return storeErr("watch workloads", err)
		}
		for _, ev := range wr.Events {
			we := &meridianv1.WorkloadEvent{Revision: ev.Kv.ModRevision, Time: timestamppb.New(s.now())}
			val := ev.Kv.Value
			switch {
			case ev.Type == clientv3.EventTypeDelete && !f.deletions():
				continue
			case ev.Type == clientv3.EventTypeDelete:
				we.Type = meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_DELETED
				if ev.PrevKv != nil {
					val = ev.PrevKv.Value
				}
			case ev.IsCreate():
				we.Type = meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_ADDED
			default:
				we.Type = meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_MODIFIED
			}
			w, err := DecodeWorkloadRecord(val)
			if err != nil {
				if ev.Type != clientv3.EventTypeDelete {
					continue
				}
				w = &meridianv1.Workload{Id: strings.TrimPrefix(string(ev.Kv.Key), prefix)}
			} else if !f.match(w) {
				continue
			}
			we.Workload = f.view(w)
			if err := out.Send(we); err != nil {
				return err
			}
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return status.Error(codes.Unavailable, "watch: etcd watch ended; reconnect with since_revision")
}
