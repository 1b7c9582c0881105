package api

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-gpu/meridian/hub/records"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

type recv interface {
	Recv() (*meridianv1.WorkloadEvent, error)
}

// next receives one event or fails after 5 s.
func next(t *testing.T, s recv) *meridianv1.WorkloadEvent {
	t.Helper()
	type res struct {
		ev  *meridianv1.WorkloadEvent
		err error
	}
	ch := make(chan res, 1)
	go func() {
		ev, err := s.Recv()
		ch <- res{ev, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("recv: %v", r.err)
		}
		return r.ev
	case <-time.After(5 * time.Second):
		t.Fatal("no watch event within 5s")
	}
	return nil
}

func TestWatchDeliversCreatesAndUpdatesInOrder(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	tn := tenant(t)
	leaf := tn + "/w"
	e.mkQueues(t, tn, leaf)
	pre, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(leaf)})
	if err != nil {
		t.Fatal(err)
	}

	for _, mode := range []string{"cache", "etcd"} {
		t.Run(mode, func(t *testing.T) {
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var s meridianv1.WorkloadService_WatchWorkloadsClient
			var err error
			var since int64
			if mode == "cache" {
				s, err = e.wl.WatchWorkloads(wctx, &meridianv1.WatchWorkloadsRequest{Queue: tn, SendInitial: true})
			} else {
				// Resume from the current revision: replays from etcd.
				since = e.etcdRev(t)
				s, err = e.wl.WatchWorkloads(wctx, &meridianv1.WatchWorkloadsRequest{Queue: tn, SinceRevision: since})
			}
			if err != nil {
				t.Fatal(err)
			}
			if mode == "cache" {
				ev := next(t, s)
				if ev.GetType() != meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_ADDED || ev.GetWorkload().GetId() != pre.GetWorkload().GetId() {
					t.Fatalf("initial event %v", ev)
				}
				if bm := next(t, s); bm.GetType() != meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK || bm.GetRevision() < ev.GetRevision() {
					t.Fatalf("want bookmark, got %v", bm)
				}
			}
			// A workload in another tenant must not appear.
			other := tenant(t) + "x"
			e.mkQueues(t, other)
			if _, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(other)}); err != nil {
				t.Fatal(err)
			}
			var ids []string
			for i := 0; i < 3; i++ {
				r, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(leaf)})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, r.GetWorkload().GetId())
			}
			if _, err := e.wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: ids[1]}); err != nil {
				t.Fatal(err)
			}
			// A reader that falls behind gets each key's newest change only
			// (the cache coalesces), so ids[1]'s ADDED may already carry
			// CANCELLED and arrive after ids[2]. What must hold: one ADDED per
			// id before any MODIFIED of it, revisions strictly increasing,
			// nothing from the other tenant, and ids[1] ends CANCELLED.
			want := map[string]bool{ids[0]: true, ids[1]: true, ids[2]: true}
			added := map[string]bool{}
			var lastRev int64
			for cancelled := false; len(added) < len(ids) || !cancelled; {
				ev := next(t, s)
				if ev.GetType() == meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK {
					continue
				}
				id := ev.GetWorkload().GetId()
				if !want[id] {
					t.Fatalf("event for %s (type %v), not one of %v", id, ev.GetType(), ids)
				}
				if ev.GetRevision() <= lastRev || ev.GetRevision() <= since {
					t.Fatalf("revision %d not after %d (since %d)", ev.GetRevision(), lastRev, since)
				}
				lastRev = ev.GetRevision()
				switch ev.GetType() {
				case meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_ADDED:
					if added[id] {
						t.Fatalf("second ADDED for %s", id)
					}
					added[id] = true
				case meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_MODIFIED:
					if !added[id] {
						t.Fatalf("MODIFIED %s before its ADDED", id)
					}
				default:
					t.Fatalf("unexpected %v for %s", ev.GetType(), id)
				}
				if ev.GetWorkload().GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED {
					if id != ids[1] {
						t.Fatalf("%s cancelled, only %s was", id, ids[1])
					}
					cancelled = true
				}
			}
		})
	}
}

// TestWatchSlowClientDoesNotBlockCache: a watcher that never reads does not
// stop the cache (and so other watchers) from advancing.
func TestWatchSlowClientDoesNotBlockCache(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	tn := tenant(t)
	e.mkQueues(t, tn)
	slow, err := e.wl.WatchWorkloads(ctx, &meridianv1.WatchWorkloadsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_ = slow // never read
	fast, err := e.wl.WatchWorkloads(ctx, &meridianv1.WatchWorkloadsRequest{Queue: tn})
	if err != nil {
		t.Fatal(err)
	}
	next(t, fast) // bookmark
	var last string
	for i := 0; i < 200; i++ {
		w := validWorkload(tn)
		w.Runtime.GetContainer().Args = []string{string(make([]byte, 2048))}
		r, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w})
		if err != nil {
			t.Fatal(err)
		}
		last = r.GetWorkload().GetId()
	}
	for {
		ev := next(t, fast)
		if ev.GetWorkload().GetId() == last {
			break
		}
	}
}

func TestWatchBookmarksAndCompaction(t *testing.T) {
	e := newEnv(t, func(d *Deps) { d.BookmarkEvery = 50 * time.Millisecond })
	ctx := testCtx(t)
	tn := tenant(t)
	e.mkQueues(t, tn, tn+"x")
	s, err := e.wl.WatchWorkloads(ctx, &meridianv1.WatchWorkloadsRequest{Queue: tn})
	if err != nil {
		t.Fatal(err)
	}
	first := next(t, s)
	if first.GetType() != meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK {
		t.Fatalf("first event %v", first)
	}
	// A change the filter hides still moves the stream's bookmark.
	if _, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(tn + "x")}); err != nil {
		t.Fatal(err)
	}
	head, err := e.cli.Get(ctx, "/meridian/workloads/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	bm := next(t, s)
	if bm.GetType() != meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK || bm.GetRevision() <= first.GetRevision() || bm.GetRevision() > head.Header.Revision {
		t.Fatalf("bookmark %v, want revision in (%d, %d]", bm, first.GetRevision(), head.Header.Revision)
	}

	// Resuming from a compacted revision is OUT_OF_RANGE naming since_revision.
	if _, err := e.cli.Compact(ctx, head.Header.Revision); err != nil {
		t.Fatal(err)
	}
	old, err := e.wl.WatchWorkloads(ctx, &meridianv1.WatchWorkloadsRequest{SinceRevision: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = old.Recv()
	wantCode(t, err, codes.OutOfRange)
	if !slices.Contains(fields(err), "since_revision") {
		t.Fatalf("fields %v", fields(err))
	}
}

// A watcher without a label selector is sent the stored encoding as it
// is (withStoredWorkload); it must receive exactly the workload a get
// returns, and the same as a watcher whose selector forces a decode.
func TestWatchSendsTheStoredWorkload(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	tn := tenant(t)
	leaf := tn + "/w"
	e.mkQueues(t, tn, leaf)
	open := func(sel string) meridianv1.WorkloadService_WatchWorkloadsClient {
		s, err := e.wl.WatchWorkloads(ctx, &meridianv1.WatchWorkloadsRequest{Queue: tn, LabelSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		if bm := next(t, s); bm.GetType() != meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK {
			t.Fatalf("want the first bookmark, got %v", bm)
		}
		return s
	}
	plain, selected := open(""), open("team=vision")
	w := validWorkload(leaf)
	w.Labels["note"] = "x-y_z.1"
	w.Name = "unicode-free-name"
	resp, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: w})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := e.wl.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: resp.GetWorkload().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]meridianv1.WorkloadService_WatchWorkloadsClient{"no selector": plain, "selector": selected} {
		ev := next(t, s)
		if ev.GetType() != meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_ADDED || !proto.Equal(ev.GetWorkload(), stored) {
			t.Fatalf("%s: event %v\nwant the stored workload %v", name, ev, stored)
		}
		if len(ev.ProtoReflect().GetUnknown()) != 0 || len(ev.GetWorkload().ProtoReflect().GetUnknown()) != 0 {
			t.Fatalf("%s: the client saw unknown fields", name)
		}
	}
}

// A watch with phases sends only changes into those phases, from the cache
// and from etcd alike: a workload submitted and then cancelled shows up
// once, CANCELLED, and its QUEUED creation not at all. From etcd it is
// MODIFIED (the creation came first, filtered out); from the cache too,
// unless the watch had not taken the creation when the cancel came: the
// two are then one event that stands for the creation, ADDED (docs/api.md,
// "Events are level-based").
func TestWatchPhaseFilter(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	tn := tenant(t)
	leaf := tn + "/p"
	e.mkQueues(t, tn, leaf)
	cancelled := []meridianv1.WorkloadPhase{meridianv1.WorkloadPhase_WORKLOAD_PHASE_CANCELLED}
	for _, mode := range []string{"cache", "etcd"} {
		t.Run(mode, func(t *testing.T) {
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			req := &meridianv1.WatchWorkloadsRequest{Queue: tn, Phase: cancelled}
			if mode == "etcd" {
				req.SinceRevision = e.etcdRev(t)
			} else {
				// A watch from "now" starts when the hub subscribes,
				// which a submit right after the call may beat: the
				// initial listing's BOOKMARK says the watch is on.
				req.SendInitial = true
			}
			s, err := e.wl.WatchWorkloads(wctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if mode == "cache" {
				if ev := next(t, s); ev.GetType() != meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK {
					t.Fatalf("first event %v %s; want the initial listing's BOOKMARK (nothing in the queue is CANCELLED yet)", ev.GetType(), ev.GetWorkload().GetId())
				}
			}
			for range 2 {
				a, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(leaf)})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := e.wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: a.GetWorkload().GetId()}); err != nil {
					t.Fatal(err)
				}
				ev := next(t, s)
				for ev.GetType() == meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK {
					ev = next(t, s)
				}
				typeOK := ev.GetType() == meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_MODIFIED ||
					(mode == "cache" && ev.GetType() == meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_ADDED)
				if ev.GetWorkload().GetId() != a.GetWorkload().GetId() || ev.GetWorkload().GetStatus().GetPhase() != cancelled[0] || !typeOK {
					t.Fatalf("got %v %s in %v; want only %s's change to CANCELLED, as MODIFIED (or, from the cache, ADDED with the creation folded in)",
						ev.GetType(), ev.GetWorkload().GetId(), ev.GetWorkload().GetStatus().GetPhase(), a.GetWorkload().GetId())
				}
			}
		})
	}
	s, err := e.wl.WatchWorkloads(ctx, &meridianv1.WatchWorkloadsRequest{Phase: []meridianv1.WorkloadPhase{99}})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "phase[0]") {
		t.Fatalf("unknown phase: %v; want InvalidArgument naming phase[0]", err)
	}
}

// WORKLOAD_VIEW_BASIC: every path of the watch (the cache's stored bytes,
// the cache with a label selector, the initial listing, the replay from
// etcd) sends the basic view of the workload it would send whole, and an
// unknown view is refused naming the field.
func TestWatchBasicView(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	tn := tenant(t)
	leaf := tn + "/v"
	e.mkQueues(t, tn, leaf)
	basic := meridianv1.WorkloadView_WORKLOAD_VIEW_BASIC
	pre, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(leaf)})
	if err != nil {
		t.Fatal(err)
	}
	since := e.etcdRev(t)
	streams := map[string]meridianv1.WorkloadService_WatchWorkloadsClient{}
	for name, req := range map[string]*meridianv1.WatchWorkloadsRequest{
		"cache":          {Queue: tn, View: basic, SendInitial: true},
		"cache selector": {Queue: tn, View: basic, SendInitial: true, LabelSelector: "team=vision"},
		"etcd":           {Queue: tn, View: basic, SinceRevision: since},
	} {
		s, err := e.wl.WatchWorkloads(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if req.SendInitial {
			ev := next(t, s)
			want := pre.GetWorkload()
			if ev.GetType() != meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_ADDED || !proto.Equal(ev.GetWorkload(), records.BasicOf(want)) {
				t.Fatalf("%s: initial event %v; want the basic view of %v", name, ev, want)
			}
			if bm := next(t, s); bm.GetType() != meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK {
				t.Fatalf("%s: want the initial listing's bookmark, got %v", name, bm)
			}
		}
		streams[name] = s
	}
	resp, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(leaf)})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := e.wl.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: resp.GetWorkload().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored.GetPodSets()) == 0 {
		t.Fatal("the stored workload has no pod sets: the test would not tell the views apart")
	}
	for name, s := range streams {
		ev := next(t, s)
		for ev.GetType() == meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK {
			ev = next(t, s)
		}
		if ev.GetType() != meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_ADDED || !proto.Equal(ev.GetWorkload(), records.BasicOf(stored)) {
			t.Fatalf("%s: event %v\nwant the basic view of %v", name, ev, stored)
		}
		if len(ev.GetWorkload().GetPodSets()) != 0 || ev.GetWorkload().GetStatus().GetPhase() != stored.GetStatus().GetPhase() {
			t.Fatalf("%s: the basic view has pod sets, or lost the phase: %v", name, ev.GetWorkload())
		}
	}
	s, err := e.wl.WatchWorkloads(ctx, &meridianv1.WatchWorkloadsRequest{View: 7})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "view") {
		t.Fatalf("unknown view: %v; want InvalidArgument naming view", err)
	}
}

// A watch from the cache without the initial list still tells a workload
// it has not seen (ADDED) from one it has: those stored before it started
// come as MODIFIED and DELETED, a new one as ADDED first; a workload
// created and deleted while the watcher lagged may be skipped whole, but a
// DELETED never comes for a workload the watcher was not told of.
func TestWatchWithoutInitialListTellsAddedFromModified(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	tn := tenant(t)
	leaf := tn + "/fresh"
	e.mkQueues(t, tn, leaf)
	submit := func() string {
		t.Helper()
		r, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(leaf)})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetWorkload().GetId()
	}
	remove := func(id string) {
		t.Helper()
		k, err := WorkloadKey(id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.Commit(ctx, nil, store.DeleteAny(k)); err != nil {
			t.Fatal(err)
		}
	}
	pre := submit()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := e.wl.WatchWorkloads(wctx, &meridianv1.WatchWorkloadsRequest{Queue: tn})
	if err != nil {
		t.Fatal(err)
	}
	if bm := next(t, s); bm.GetType() != meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK {
		t.Fatalf("want the starting bookmark, got %v", bm)
	}
	expect := func(typ meridianv1.WorkloadEventType, id string) {
		t.Helper()
		for {
			ev := next(t, s)
			if ev.GetType() == meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK {
				continue
			}
			if ev.GetType() != typ || ev.GetWorkload().GetId() != id {
				t.Fatalf("got %v %s, want %v %s", ev.GetType(), ev.GetWorkload().GetId(), typ, id)
			}
			return
		}
	}
	if _, err := e.wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: pre}); err != nil {
		t.Fatal(err)
	}
	expect(meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_MODIFIED, pre)
	fresh := submit()
	expect(meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_ADDED, fresh)
	if _, err := e.wl.CancelWorkload(ctx, &meridianv1.CancelWorkloadRequest{Id: fresh}); err != nil {
		t.Fatal(err)
	}
	expect(meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_MODIFIED, fresh)
	remove(pre)
	expect(meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_DELETED, pre)

	// Created and deleted back to back, then a marker: whatever arrives
	// for the first, its DELETED only after its ADDED.
	brief := submit()
	remove(brief)
	marker := submit()
	told := false
	for {
		ev := next(t, s)
		id := ev.GetWorkload().GetId()
		switch {
		case ev.GetType() == meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_BOOKMARK:
		case id == marker:
			return
		case id != brief:
			t.Fatalf("unexpected %v %s", ev.GetType(), id)
		case ev.GetType() == meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_ADDED:
			told = true
		case ev.GetType() == meridianv1.WorkloadEventType_WORKLOAD_EVENT_TYPE_DELETED && !told:
			t.Fatalf("DELETED %s, which the watcher was never told of", brief)
		}
	}
}

// knewBefore, case by case: a watcher that started at revision 100.
func TestKnewBefore(t *testing.T) {
	for _, c := range []struct {
		name      string
		createRev int64
		fresh     bool
		want      bool
	}{
		{"in the snapshot, changed", 40, false, true},
		{"in the snapshot, its creation folded into a later change", 40, true, true},
		{"created after the start, told before", 140, false, true},
		{"created after the start, not told", 140, true, false},
		{"create revision unknown", 0, true, true},
	} {
		if got := knewBefore(store.Event{CreateRev: c.createRev, Fresh: c.fresh}, 100); got != c.want {
			t.Errorf("%s: knewBefore = %v, want %v", c.name, got, c.want)
		}
	}
}
