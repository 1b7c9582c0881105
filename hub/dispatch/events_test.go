package dispatch

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/leader"
	"github.com/meridian-gpu/meridian/hub/store"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
	"github.com/meridian-gpu/meridian/transport/natsbus"
)

// TestEventAgainstLaggingCache: the agent can answer a dispatch before the
// hub's watch cache has seen the commit. The event must be applied from
// etcd, not ignored (and the work cancelled) as stale.
func TestEventAgainstLaggingCache(t *testing.T) {
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
		cancelled: map[string]time.Time{}, finished: map[string]time.Time{}, started: time.Now()}

	// Commit a dispatch behind the cache's back, as the cycle would.
	w, rev := e.workload("w")
	w.Status.Phase, w.Status.Cluster, w.Status.DispatchId, w.Status.Attempts = meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED, "east", "d-1", 1
	wb, _ := encodeWorkload(w)
	rb, _ := encodeRecord(&Record{DispatchID: "d-1", WorkloadID: "w", Queue: w.Queue, Cluster: "east", Attempt: 1, CreatedAt: time.Now()})
	wk, _ := WorkloadKey("w")
	rk, _ := DispatchKey("d-1")
	if _, err := st.Commit(ctx, &fence, store.PutIfModRev(wk, wb, rev), store.PutIfModRev(rk, rb, 0)); err != nil {
		t.Fatal(err)
	}
	if it, ok := cache.Get(wk); !ok || it.ModRev != rev {
		t.Fatal("the cache was supposed to lag")
	}

	ev := &agentv1.DispatchEvent{DispatchId: "d-1", WorkloadId: "w", ClusterId: "east", Type: agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_ACCEPTED, Time: timestamppb.Now()}
	if err := l.applyBatch(tm, []batchEvent{{cluster: "east", ev: ev}}, true); err != nil {
		t.Fatal(err)
	}
	got, _ := e.workload("w")
	if got.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_ACCEPTED {
		t.Fatalf("phase = %v, want ACCEPTED: the event was judged on the lagging cache", got.GetStatus().GetPhase())
	}
	if len(tm.cancelled) != 0 {
		t.Fatalf("cancels sent: %v", tm.cancelled)
	}
	rbNow, rrev, err := st.Get(ctx, rk)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := decodeRecord(rbNow); !acked(r, got) || got.GetStatus().GetAcceptTime() == nil {
		t.Fatal("dispatch not acknowledged: the workload has no accept time")
	}
	// The acceptance went into the workload only: the record was not
	// written again.
	_, wrev, _ := st.Get(ctx, wk)
	if rrev >= wrev {
		t.Fatalf("record revision %d not older than the workload's %d: the ACCEPTED event rewrote the record", rrev, wrev)
	}
}
