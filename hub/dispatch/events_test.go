package dispatch

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/leader"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	"github.com/meridian-gpu/meridian/hub/store"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// TestEventAgainstLaggingCache: the agent can answer a dispatch before the
// hub's watch cache has seen the commit. The event must be applied from
// etcd, not ignored (and the work cancelled) as stale. Both forms of a
// dispatch are covered: kept in the workload (what this hub writes) and
// an older hub's record under its own key, which a finish must delete.
func TestEventAgainstLaggingCache(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		name := "folded"
		if legacy {
			name = "legacy-record"
		}
		t.Run(name, func(t *testing.T) { testEventAgainstLaggingCache(t, legacy) })
	}
}

func testEventAgainstLaggingCache(t *testing.T, legacy bool) {
	e := newEnv(t, fastConfig())
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	cli, err := etcdSrv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	st, _ := store.New(cli, store.Options{MaxTxnOps: etcdSrv.MaxTxnOps()})
	e.submit(gpuWorkload("w", "acme/ml/train", 1))

	// A cache that saw the QUEUED workload and then stopped following etcd.
	cctx, stopCache := context.WithCancel(ctx)
	cache, _ := store.NewCache(cli, store.Root+"/")
	go func() { _ = cache.Run(cctx) }()
	<-cache.Ready()
	stopCache()
	bus, err := natsbus.Connect(ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	if err := bus.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	el, _ := leader.New(cli, electionPrefix, "lagging", time.Second)
	l, err := New(Deps{Store: st, Cache: cache, Bus: bus, Elector: el, Config: fastConfig()})
	if err != nil {
		t.Fatal(err)
	}
	fence, err := el.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = el.Resign(context.Background()) }()
	tm := &term{fence: fence, ctx: ctx, cancel: cancel, accruedTo: map[string]time.Time{}, published: map[string]time.Time{},
		cancelled: map[string]time.Time{}, finished: newFinishedMemory(), started: time.Now()}

	// Commit a dispatch behind the cache's back, as the cycle would (or as
	// an older hub did, with a record of its own).
	w, rev := e.workload("w")
	w.Status.Phase, w.Status.Cluster, w.Status.DispatchId, w.Status.Attempts = meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED, "east", "d-1", 1
	r := &Record{DispatchID: "d-1", WorkloadID: "w", Queue: w.Queue, Cluster: "east", Attempt: 1, CreatedAt: time.Now(),
		Usage: []scheduler.ClassMilli{{Class: "a100", Milli: 1000}}, LeaderTerm: fence.Rev}
	wk, _ := WorkloadKey("w")
	rk, _ := DispatchKey("d-1")
	ops := []store.Op{}
	if legacy {
		r.LeaderTerm = 0 // older hubs kept the term in the record only
		rb, _ := encodeRecord(r)
		ops = append(ops, store.PutIfModRev(rk, rb, 0))
	} else {
		foldRecord(w.Status, r)
	}
	wb, _ := encodeWorkload(w)
	ops = append(ops, store.PutIfModRev(wk, wb, rev))
	if _, err := st.Commit(ctx, &fence, ops...); err != nil {
		t.Fatal(err)
	}
	if it, ok := cache.Get(wk); !ok || it.ModRev != rev {
		t.Fatal("the cache was supposed to lag")
	}

	sendOn := func(subject string, typ agentv1.DispatchEventType) {
		t.Helper()
		ev := &agentv1.DispatchEvent{DispatchId: "d-1", WorkloadId: "w", ClusterId: "east", Type: typ, Time: timestamppb.Now()}
		if err := l.applyBatch(tm, []batchEvent{{cluster: subject, ev: ev}}, true); err != nil {
			t.Fatal(err)
		}
	}
	send := func(typ agentv1.DispatchEventType) { t.Helper(); sendOn("east", typ) }
	// Another cluster's agent publishing east's event on its own subject
	// changes nothing and earns no cancel.
	sendOn("west", agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_FAILED)
	if got, _ := e.workload("w"); got.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED || len(tm.cancelled) != 0 {
		t.Fatalf("an event on west's subject naming east was applied: phase %v, cancels %v", got.GetStatus().GetPhase(), tm.cancelled)
	}
	var forged dto.Metric
	if err := l.m.forgedEvents.Write(&forged); err != nil || forged.GetCounter().GetValue() != 1 {
		t.Fatalf("meridian_forged_events_total = %v (%v), want 1", forged.GetCounter().GetValue(), err)
	}
	send(agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED)
	got, _ := e.workload("w")
	if got.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_ACCEPTED {
		t.Fatalf("phase = %v, want ACCEPTED: the event was judged on the lagging cache", got.GetStatus().GetPhase())
	}
	if len(tm.cancelled) != 0 {
		t.Fatalf("cancels sent: %v", tm.cancelled)
	}
	if got.GetStatus().GetAcceptTime() == nil {
		t.Fatal("dispatch not acknowledged: the workload has no accept time")
	}
	_, wrev, _ := st.Get(ctx, wk)
	if legacy {
		// The acceptance went into the workload only: the record was not
		// written again.
		_, rrev, err := st.Get(ctx, rk)
		if err != nil {
			t.Fatal(err)
		}
		if rrev >= wrev {
			t.Fatalf("record revision %d not older than the workload's %d: the ACCEPTED event rewrote the record", rrev, wrev)
		}
	} else if gr := recordOf(got); gr.LeaderTerm != fence.Rev || len(gr.Usage) != 1 || gr.Usage[0] != r.Usage[0] {
		t.Fatalf("the workload lost its dispatch: %+v", gr)
	}

	send(agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED)
	got, _ = e.workload("w")
	if got.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED {
		t.Fatalf("phase = %v, want SUCCEEDED", got.GetStatus().GetPhase())
	}
	if _, _, err := st.Get(ctx, rk); !store.IsNotFound(err) {
		t.Fatalf("dispatch record after the finish: err = %v, want it deleted (or never written)", err)
	}
	// A redelivered finish is stale and changes nothing; nor do a
	// redelivered ACCEPTED and RUNNING (a hub that applied them died
	// before the ack), which must not earn the finished dispatch a cancel.
	_, before, _ := st.Get(ctx, wk)
	send(agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED)
	send(agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_RUNNING)
	send(agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED)
	if _, after, _ := st.Get(ctx, wk); after != before {
		t.Fatalf("a repeated event rewrote the finished workload (revision %d -> %d)", before, after)
	}
	if len(tm.cancelled) != 0 {
		t.Fatalf("cancels sent for a dispatch that succeeded: %v", tm.cancelled)
	}
}

// TestUpgradeFromRecordKeys: an older hub left an unacknowledged dispatch
// with its record under its own key. A hub that keeps dispatches in their
// workloads takes over: it publishes that dispatch again, the agent
// launches it once, and its finish deletes the record, while new work is
// dispatched the new way beside it.
func TestUpgradeFromRecordKeys(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 2)
	e.submit(gpuWorkload("old", "acme/ml/train", 1))
	w, rev := e.workload("old")
	w.Status.Phase, w.Status.Cluster, w.Status.DispatchId, w.Status.Attempts = meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED, "east", "d-old", 1
	w.Status.DispatchTime = timestamppb.Now()
	rb, _ := encodeRecord(&Record{DispatchID: "d-old", WorkloadID: "old", Queue: w.Queue, Cluster: "east", Attempt: 1, CreatedAt: time.Now(),
		Placement: []scheduler.PodSetPlacement{{PodSet: w.PodSets[0].Name, Replicas: []scheduler.ReplicaPlacement{{Node: "east-n0", GPUs: []int{0}}}}},
		Usage:     []scheduler.ClassMilli{{Class: "a100", Milli: 1000}}, LeaderTerm: 1})
	wb, _ := encodeWorkload(w)
	wk, _ := WorkloadKey("old")
	rk, _ := DispatchKey("d-old")
	if _, err := e.st.Commit(e.ctx, nil, store.PutIfModRev(wk, wb, rev), store.PutIfModRev(rk, rb, 0)); err != nil {
		t.Fatal(err)
	}

	ag := e.startAgent("east", 2, 4, 300*time.Millisecond)
	h := e.startHub("hub-new")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.submit(gpuWorkload("new", "acme/ml/train", 1))
	e.waitFor("both to succeed", 20*time.Second, func() bool {
		return e.countPhase(meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED) == 2
	})
	byW := ag.checkLaunchedOnce(t)
	if !byW["old"]["d-old"] || len(byW["old"]) != 1 {
		t.Fatalf("the older hub's dispatch was launched as %v, want once as d-old", byW["old"])
	}
	if keys := e.dispatchKeys(); len(keys) != 0 {
		t.Fatalf("records left after both finished: %v", keys)
	}
	if nw, _ := e.workload("new"); !folded(nw) || nw.GetStatus().GetDispatchTerm() <= 0 || len(nw.GetStatus().GetQuotaCharge()) != 1 {
		t.Fatalf("the new dispatch is not kept in its workload: %v", nw.GetStatus())
	}
}
