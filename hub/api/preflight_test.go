package api

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// A submit reads the queue and the idempotency key from the watch cache
// when it can. Against a cache frozen in the past, every submit must still
// come out as if it had read etcd: a queue created after the cache froze is
// found, a queue changed since is retried rather than refused, a queue that
// gained children is refused, and a reused idempotency key replays.
func TestSubmitPreflightSurvivesAStaleCache(t *testing.T) {
	ctx := testCtx(t)
	cli, err := etcdSrv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	frozen, err := store.NewCache(cli, store.Root+"/")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(d *Deps) { d.Workloads = frozen })
	tn := tenant(t)
	leaf, parent := tn+"/leaf", tn+"/parent"
	e.mkQueues(t, tn, leaf, parent)
	first, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: withKey(validWorkload(leaf), "k1")})
	if err != nil {
		t.Fatal(err)
	}
	// Freeze: list once, then stop following etcd.
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = frozen.Run(rctx) }()
	select {
	case <-frozen.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("cache not ready")
	}
	stop()
	<-done

	late := tn + "/late"
	e.mkQueues(t, late)
	if _, err := e.qs.UpdateQueue(ctx, &meridianv1.UpdateQueueRequest{
		Queue: &meridianv1.Queue{Path: leaf, Weight: 3}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"weight"}}}); err != nil {
		t.Fatal(err)
	}
	e.mkQueues(t, parent+"/child")

	if _, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(late)}); err != nil {
		t.Errorf("queue created after the cache froze: %v", err)
	}
	if _, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(leaf)}); err != nil {
		t.Errorf("queue changed after the cache froze: %v", err)
	}
	if _, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: validWorkload(parent)}); err == nil {
		t.Error("a queue that gained children after the cache froze took a workload")
	}
	again, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: withKey(validWorkload(leaf), "k1")})
	if err != nil || !again.GetReplayed() || again.GetWorkload().GetId() != first.GetWorkload().GetId() {
		t.Errorf("reused idempotency key: replayed %v id %s (want %s), err %v", again.GetReplayed(), again.GetWorkload().GetId(), first.GetWorkload().GetId(), err)
	}
	// A key first used after the cache froze replays too.
	second, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: withKey(validWorkload(leaf), "k2")})
	if err != nil {
		t.Fatal(err)
	}
	replay, err := e.wl.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: withKey(validWorkload(leaf), "k2")})
	if err != nil || !replay.GetReplayed() || replay.GetWorkload().GetId() != second.GetWorkload().GetId() {
		t.Errorf("key used after the freeze: replayed %v id %s (want %s), err %v", replay.GetReplayed(), replay.GetWorkload().GetId(), second.GetWorkload().GetId(), err)
	}
}

func withKey(w *meridianv1.Workload, key string) *meridianv1.Workload {
	w.IdempotencyKey = key
	return w
}
