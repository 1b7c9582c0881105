package retention

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/api"
	"github.com/meridian-gpu/meridian/hub/leader"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

const day = 24 * time.Hour

func TestPassDeletesOldFinishedAndKeepsTheRest(t *testing.T) {
	e := newEnv(t)
	old := t0.Add(-8 * day)
	for _, w := range []wl{
		{id: "old-succeeded", queue: "a", phase: succeeded, end: old},
		{id: "old-failed", queue: "a", phase: failed, end: old},
		{id: "old-cancelled", queue: "b", phase: cancelled, end: old},
		{id: "recent-succeeded", queue: "a", phase: succeeded, end: t0.Add(-time.Hour)},
		// Active work is kept however old; these have no end time and
		// were created 30 days before t0.
		{id: "old-queued", queue: "a", phase: queued},
		{id: "old-running", queue: "a", phase: running},
		{id: "old-dispatched", queue: "b", phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED},
		// An active workload with a stale end time from an earlier
		// attempt is still active.
		{id: "requeued", queue: "a", phase: queued, end: old},
	} {
		e.put(t, w)
	}
	r := e.runner(t, Config{Policy: Policy{TTL: 7 * day}}, t0)
	res, err := r.Pass(testCtx(t), e.fence)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"old-dispatched", "old-queued", "old-running", "recent-succeeded", "requeued"}
	if got := e.workloadIDs(t); !slices.Equal(got, want) {
		t.Fatalf("left %v, want %v", got, want)
	}
	if res.Scanned != 8 || res.Finished != 4 || res.ExpiredTTL != 3 || res.Deleted != 3 || res.Changed != 0 || res.Deferred != 0 {
		t.Fatalf("result %+v", res)
	}
	if v := metricValue(t, e.reg, "meridian_retention_deleted_workloads_total", map[string]string{"reason": "ttl"}); v != 3 {
		t.Fatalf("deleted counter %v, want 3", v)
	}
	// A second pass finds nothing more to do.
	res, err = r.Pass(testCtx(t), e.fence)
	if err != nil || res.Deleted != 0 || res.Finished != 1 {
		t.Fatalf("second pass: %+v, %v", res, err)
	}
}

func TestPassPerQueueCapKeepsTheNewest(t *testing.T) {
	e := newEnv(t)
	for i, id := range []string{"a1", "a2", "a3", "a4", "a5"} {
		// a1 is the newest.
		e.put(t, wl{id: id, queue: "a", phase: succeeded, end: t0.Add(-time.Duration(i+1) * time.Hour)})
	}
	e.put(t, wl{id: "b1", queue: "b", phase: failed, end: t0.Add(-100 * day)})
	e.put(t, wl{id: "b2", queue: "b", phase: failed, end: t0.Add(-90 * day)})
	e.put(t, wl{id: "a-running", queue: "a", phase: running})
	// BatchSize 1 makes each delete its own transaction.
	r := e.runner(t, Config{Policy: Policy{MaxPerQueue: 2}, BatchSize: 1}, t0)
	res, err := r.Pass(testCtx(t), e.fence)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a-running", "a1", "a2", "b1", "b2"}
	if got := e.workloadIDs(t); !slices.Equal(got, want) {
		t.Fatalf("left %v, want %v", got, want)
	}
	if res.OverCap != 3 || res.Deleted != 3 {
		t.Fatalf("result %+v", res)
	}
	if v := metricValue(t, e.reg, "meridian_retention_deleted_workloads_total", map[string]string{"reason": "queue_cap"}); v != 3 {
		t.Fatalf("deleted counter %v, want 3", v)
	}
}

func TestPassMaxPerPassDefersTheRest(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"w1", "w2", "w3", "w4", "w5"} {
		e.put(t, wl{id: id, queue: "a", phase: succeeded, end: t0.Add(-30 * day)})
	}
	r := e.runner(t, Config{Policy: Policy{TTL: day}, BatchSize: 2, MaxPerPass: 3}, t0)
	res, err := r.Pass(testCtx(t), e.fence)
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 3 || res.Deferred != 2 || len(e.workloadIDs(t)) != 2 {
		t.Fatalf("first pass %+v, left %v", res, e.workloadIDs(t))
	}
	// The second pass deletes what the first left without listing again.
	if res, err = r.Pass(testCtx(t), e.fence); err != nil || res.Deleted != 2 || res.Carried != 2 || res.Scanned != 0 || len(e.workloadIDs(t)) != 0 {
		t.Fatalf("second pass %+v, %v, left %v", res, err, e.workloadIDs(t))
	}
	// With nothing carried, the next pass lists.
	if res, err = r.Pass(testCtx(t), e.fence); err != nil || res.Carried != 0 || res.Deleted != 0 {
		t.Fatalf("third pass %+v, %v", res, err)
	}
}

// What a pass leaves for the next is still checked when deleted: a
// carried workload written again since (here: running again, as a retry
// would leave it) is kept; and a carry older than an Interval is dropped
// for a fresh list.
func TestCarriedWorkloadsAreCheckedAgain(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"w1", "w2", "w3", "w4"} {
		e.put(t, wl{id: id, queue: "a", phase: succeeded, end: t0.Add(-30 * day)})
	}
	r := e.runner(t, Config{Policy: Policy{TTL: day}, BatchSize: 2, MaxPerPass: 2}, t0)
	res, err := r.Pass(testCtx(t), e.fence)
	if err != nil || res.Deleted != 2 || res.Deferred != 2 {
		t.Fatalf("first pass %+v, %v", res, err)
	}
	left := e.workloadIDs(t)
	e.put(t, wl{id: left[0], queue: "a", phase: succeeded, end: t0.Add(-30 * day)}) // a new mod revision
	res, err = r.Pass(testCtx(t), e.fence)
	if err != nil || res.Carried != 2 || res.Deleted != 1 || res.Changed != 1 {
		t.Fatalf("carried pass %+v, %v", res, err)
	}
	if got := e.workloadIDs(t); len(got) != 1 || got[0] != left[0] {
		t.Fatalf("left %v, want only %s, rewritten after it was chosen", got, left[0])
	}

	e2 := newEnv(t)
	for _, id := range []string{"w1", "w2", "w3"} {
		e2.put(t, wl{id: id, queue: "a", phase: succeeded, end: t0.Add(-30 * day)})
	}
	now := t0
	r2 := e2.runner(t, Config{Policy: Policy{TTL: day}, MaxPerPass: 1, Interval: time.Minute}, t0)
	r2.clock = func() time.Time { return now }
	if res, err := r2.Pass(testCtx(t), e2.fence); err != nil || res.Deferred != 2 {
		t.Fatalf("first pass %+v, %v", res, err)
	}
	now = now.Add(2 * time.Minute)
	if res, err := r2.Pass(testCtx(t), e2.fence); err != nil || res.Carried != 0 || res.Scanned != 2 {
		t.Fatalf("a pass an Interval after the carry: %+v, %v, want a fresh list of 2", res, err)
	}
}

func TestWorkloadChangedAfterTheListIsKept(t *testing.T) {
	e := newEnv(t)
	old := t0.Add(-30 * day)
	for _, id := range []string{"w1", "w2", "w3"} {
		e.put(t, wl{id: id, queue: "a", phase: succeeded, end: old, idem: "key-" + id})
	}
	r := e.runner(t, Config{Policy: Policy{TTL: day}}, t0)
	r.afterSelect = func() {
		// Between the list and the delete, w2 is written again (as if
		// an operator or a late event rewrote it).
		e.put(t, wl{id: "w2", queue: "a", phase: failed, end: old, idem: "key-w2"})
	}
	res, err := r.Pass(testCtx(t), e.fence)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.workloadIDs(t); !slices.Equal(got, []string{"w2"}) {
		t.Fatalf("left %v, want [w2]", got)
	}
	if res.Deleted != 2 || res.Changed != 1 || res.IdempotencyKeys != 2 {
		t.Fatalf("result %+v", res)
	}
	if !e.exists(t, api.IdempotencyKey("a", "key-w2")) || e.exists(t, api.IdempotencyKey("a", "key-w1")) {
		t.Fatal("idempotency keys: want key-w2 kept and key-w1 deleted")
	}
	if v := metricValue(t, e.reg, "meridian_retention_changed_total", nil); v != 1 {
		t.Fatalf("changed counter %v, want 1", v)
	}
}

func TestWorkloadRequeuedAfterTheListIsKept(t *testing.T) {
	e := newEnv(t)
	e.put(t, wl{id: "w1", queue: "a", phase: failed, end: t0.Add(-30 * day)})
	r := e.runner(t, Config{Policy: Policy{TTL: day}}, t0)
	r.afterSelect = func() { e.put(t, wl{id: "w1", queue: "a", phase: queued}) }
	res, err := r.Pass(testCtx(t), e.fence)
	if err != nil {
		t.Fatal(err)
	}
	if !e.exists(t, wkey(t, "w1")) || res.Deleted != 0 || res.Changed != 1 {
		t.Fatalf("a workload back in QUEUED was deleted or miscounted: %+v", res)
	}
}

func TestLostFenceDeletesNothing(t *testing.T) {
	t.Run("stale fence", func(t *testing.T) {
		e := newEnv(t)
		e.put(t, wl{id: "w1", queue: "a", phase: succeeded, end: t0.Add(-30 * day), idem: "k1"})
		stale := e.fence
		if err := e.el.Resign(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		r := e.runner(t, Config{Policy: Policy{TTL: day}}, t0)
		res, err := r.Pass(testCtx(t), stale)
		if !leader.IsNotLeader(err) {
			t.Fatalf("pass with a stale fence: %v, want a not-leader error", err)
		}
		if !e.exists(t, wkey(t, "w1")) || !e.exists(t, api.IdempotencyKey("a", "k1")) || res.Deleted != 0 {
			t.Fatalf("a deposed leader deleted: %+v", res)
		}
		if v := metricValue(t, e.reg, "meridian_retention_passes_total", map[string]string{"outcome": "not_leader"}); v != 1 {
			t.Fatalf("not_leader passes %v, want 1", v)
		}
	})
	t.Run("lost between list and delete", func(t *testing.T) {
		e := newEnv(t)
		e.put(t, wl{id: "w1", queue: "a", phase: succeeded, end: t0.Add(-30 * day)})
		e.put(t, wl{id: "w2", queue: "a", phase: succeeded, end: t0.Add(-30 * day)})
		r := e.runner(t, Config{Policy: Policy{TTL: day}, BatchSize: 1}, t0)
		// Another replica takes over while the pass is running.
		r.afterSelect = func() {
			if err := e.el.Resign(testCtx(t)); err != nil {
				t.Error(err)
			}
			other, err := leader.New(e.cli, store.Root+"/leader", "other", 5*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := other.Campaign(testCtx(t)); err != nil {
				t.Error(err)
			}
			t.Cleanup(func() { _ = other.Resign(context.Background()) })
		}
		res, err := r.Pass(testCtx(t), e.fence)
		if !leader.IsNotLeader(err) {
			t.Fatalf("pass: %v, want a not-leader error", err)
		}
		if got := e.workloadIDs(t); len(got) != 2 || res.Deleted != 0 || res.Deferred != 2 {
			t.Fatalf("left %v, result %+v", got, res)
		}
	})
	t.Run("a replica that does not lead never passes", func(t *testing.T) {
		e := newEnv(t)
		e.put(t, wl{id: "w1", queue: "a", phase: succeeded, end: t0.Add(-30 * day)})
		src := &countingFence{}
		r, err := New(Deps{Store: e.st, Leader: src, Clock: func() time.Time { return t0 }, Registerer: e.reg,
			Config: Config{Policy: Policy{TTL: day}, Interval: 5 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(testCtx(t))
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		for src.calls.Load() < 5 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !e.exists(t, wkey(t, "w1")) {
			t.Fatal("a replica that does not lead deleted a workload")
		}
		if v := metricValue(t, e.reg, "meridian_retention_passes_total", nil); v != 0 {
			t.Fatalf("%v passes ran on a replica that does not lead", v)
		}
	})
}

// countingFence never leads and counts how often it was asked.
type countingFence struct{ calls atomic.Int64 }

func (c *countingFence) Fence() (leader.Fence, bool) {
	c.calls.Add(1)
	return leader.Fence{}, false
}

func TestIdempotencyKeyDeletedOnlyWhenItNamesTheWorkload(t *testing.T) {
	e := newEnv(t)
	old := t0.Add(-30 * day)
	e.put(t, wl{id: "mine", queue: "a", phase: succeeded, end: old, idem: "k-mine"})
	e.put(t, wl{id: "stale", queue: "a", phase: succeeded, end: old, idem: "k-shared"})
	// The key "k-shared" names a newer workload, which is kept.
	e.put(t, wl{id: "newer", queue: "a", phase: succeeded, end: t0.Add(-time.Hour), idem: "k-shared"})
	// Same client key in another queue is a different idempotency record.
	e.put(t, wl{id: "other-queue", queue: "b", phase: running, idem: "k-mine"})
	r := e.runner(t, Config{Policy: Policy{TTL: day}}, t0)
	res, err := r.Pass(testCtx(t), e.fence)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.workloadIDs(t); !slices.Equal(got, []string{"newer", "other-queue"}) {
		t.Fatalf("left %v", got)
	}
	if res.Deleted != 2 || res.IdempotencyKeys != 1 {
		t.Fatalf("result %+v", res)
	}
	if e.exists(t, api.IdempotencyKey("a", "k-mine")) {
		t.Fatal("the deleted workload's own idempotency key is still there")
	}
	b, _, err := e.st.Get(testCtx(t), api.IdempotencyKey("a", "k-shared"))
	if err != nil || string(b) != "newer" {
		t.Fatalf("k-shared = %q, %v; want it kept, naming the newer workload", b, err)
	}
	if b, _, err := e.st.Get(testCtx(t), api.IdempotencyKey("b", "k-mine")); err != nil || string(b) != "other-queue" {
		t.Fatalf("queue b's k-mine = %q, %v; want it kept", b, err)
	}
}

func TestRunDeletesWhileLeading(t *testing.T) {
	e := newEnv(t)
	e.put(t, wl{id: "w1", queue: "a", phase: succeeded, end: t0.Add(-30 * day)})
	e.put(t, wl{id: "w2", queue: "a", phase: queued})
	r := e.runner(t, Config{Policy: Policy{TTL: day}, Interval: 10 * time.Millisecond}, t0)
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for e.exists(t, wkey(t, "w1")) {
		if time.Now().After(deadline) {
			t.Fatal("the leader's runner did not delete the old workload")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !e.exists(t, wkey(t, "w2")) {
		t.Fatal("the queued workload was deleted")
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name string
		d    Deps
		want string
	}{
		{"no store", Deps{Leader: e.el}, "Deps.Store"},
		{"no leader", Deps{Store: e.st}, "Deps.Leader"},
		{"negative ttl", Deps{Store: e.st, Leader: e.el, Config: Config{Policy: Policy{TTL: -1}}}, "Policy.TTL"},
		{"negative cap", Deps{Store: e.st, Leader: e.el, Config: Config{Policy: Policy{MaxPerQueue: -1}}}, "Policy.MaxPerQueue"},
		{"negative interval", Deps{Store: e.st, Leader: e.el, Config: Config{Interval: -time.Second}}, "Config.Interval"},
		{"negative batch", Deps{Store: e.st, Leader: e.el, Config: Config{BatchSize: -1}}, "Config.BatchSize"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.d)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v, want an error naming %s", err, c.want)
			}
		})
	}
	// The batch never exceeds what one transaction can carry.
	small, err := store.New(e.cli, store.Options{MaxTxnOps: 10})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Deps{Store: small, Leader: e.el, Config: Config{BatchSize: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Config().BatchSize != 5 {
		t.Fatalf("batch size %d, want 5 (half of MaxTxnOps 10)", r.Config().BatchSize)
	}
}

// TestAPIAfterDeletion drives the real API service: once retention deleted
// a workload, GET says NotFound and a replay of its idempotency key
// submits a new workload.
func TestAPIAfterDeletion(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	svc, err := api.New(api.Deps{Store: e.st, HubID: "test-hub", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateQueue(ctx, &meridianv1.CreateQueueRequest{Queue: &meridianv1.Queue{
		Path: "research", Weight: 1,
		Quotas: []*meridianv1.QueueQuota{{AcceleratorClass: "nvidia-h100-80gb", NominalMilliGpus: 8000}},
	}}); err != nil {
		t.Fatal(err)
	}
	spec := &meridianv1.Workload{
		Name: "nightly", Queue: "research", IdempotencyKey: "nightly-2026-11-01",
		PodSets: []*meridianv1.PodSet{{
			Name: "worker", Replicas: 1,
			Resources: &meridianv1.Resources{GpuMilli: 1000, CpuMilli: 4000, MemoryMib: 8192, AcceleratorClass: "nvidia-h100-80gb"},
		}},
		Runtime: &meridianv1.RuntimeTemplate{Kind: &meridianv1.RuntimeTemplate_Container{Container: &meridianv1.ContainerTemplate{Image: "example/train:1"}}},
	}
	first, err := svc.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: proto.Clone(spec).(*meridianv1.Workload)})
	if err != nil {
		t.Fatal(err)
	}
	id := first.GetWorkload().GetId()
	if again, err := svc.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: proto.Clone(spec).(*meridianv1.Workload)}); err != nil || !again.GetReplayed() || again.GetWorkload().GetId() != id {
		t.Fatalf("replay before retention: %v, %v", again, err)
	}
	// The workload finishes, as the loop records it.
	key := wkey(t, id)
	b, rev, err := e.st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	w, err := api.DecodeWorkloadRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	w.Status.Phase = succeeded
	w.Status.EndTime, w.Status.UpdateTime = timestamppb.New(end), timestamppb.New(end)
	b, err = proto.MarshalOptions{Deterministic: true}.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Commit(ctx, nil, store.PutIfModRev(key, b, rev)); err != nil {
		t.Fatal(err)
	}

	// Eight days later, retention deletes it.
	r := e.runner(t, Config{Policy: Policy{TTL: 7 * day}}, end.Add(8*day))
	res, err := r.Pass(ctx, e.fence)
	if err != nil || res.Deleted != 1 || res.IdempotencyKeys != 1 {
		t.Fatalf("pass: %+v, %v", res, err)
	}

	if _, err := svc.GetWorkload(ctx, &meridianv1.GetWorkloadRequest{Id: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("GET after deletion: %v, want NotFound", err)
	}
	fresh, err := svc.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: proto.Clone(spec).(*meridianv1.Workload)})
	if err != nil {
		t.Fatalf("replaying the key after deletion: %v, want a fresh submit", err)
	}
	fw := fresh.GetWorkload()
	if fresh.GetReplayed() || fw.GetId() == id || fw.GetStatus().GetPhase() != queued {
		t.Fatalf("replay after deletion returned %v (replayed %v); want a new QUEUED workload", fw, fresh.GetReplayed())
	}
	if b, _, err := e.st.Get(ctx, api.IdempotencyKey("research", spec.GetIdempotencyKey())); err != nil || string(b) != fw.GetId() {
		t.Fatalf("idempotency key now names %q (%v), want %s", b, err, fw.GetId())
	}
	// And the new workload replays as usual.
	if again, err := svc.SubmitWorkload(ctx, &meridianv1.SubmitWorkloadRequest{Workload: proto.Clone(spec).(*meridianv1.Workload)}); err != nil || !again.GetReplayed() || again.GetWorkload().GetId() != fw.GetId() {
		t.Fatalf("replay of the new workload: %v, %v", again, err)
	}
}

// A backlog larger than MaxPerPass is worked off in steps a short pause
// apart, not one step per Interval: with the defaults (10,000 per 5
// minutes) retention could delete at most 33 workloads a second, and a
// hub finishing more than that grew without bound.
func TestRunCatchesUpInStepsOfMaxPerPass(t *testing.T) {
	e := newEnv(t)
	for i := range 23 {
		e.put(t, wl{id: "w" + string(rune('a'+i)), queue: "a", phase: succeeded, end: t0.Add(-30 * day)})
	}
	const interval = 2 * time.Second
	r := e.runner(t, Config{Policy: Policy{TTL: day}, Interval: interval, MaxPerPass: 5, CatchUpPause: 10 * time.Millisecond}, t0)
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.Run(ctx) }()
	for len(e.workloadIDs(t)) > 0 {
		// Five passes are needed; one per Interval would take 10 s.
		if time.Since(start) > interval+3*time.Second {
			t.Fatalf("%d workloads left %s after start: the backlog waits an Interval per MaxPerPass", len(e.workloadIDs(t)), time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := New(Deps{Store: e.st, Leader: e.el, Config: Config{CatchUpPause: -time.Second}}); err == nil || !strings.Contains(err.Error(), "Config.CatchUpPause") {
		t.Fatalf("a negative CatchUpPause: %v, want an error naming it", err)
	}
}

// The first pass comes FirstPass after the start, not an Interval, and a
// follower that becomes leader passes soon too: hubs restarted more often
// than the Interval never ran retention at all (the chaos soak ended with
// 233,000 keys, and every restarted hub took longer to list them).
func TestFirstPassComesSoon(t *testing.T) {
	e := newEnv(t)
	e.put(t, wl{id: "w1", queue: "a", phase: succeeded, end: t0.Add(-30 * day)})
	if err := e.el.Resign(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	r := e.runner(t, Config{Policy: Policy{TTL: day}, Interval: time.Hour, FirstPass: 50 * time.Millisecond}, t0)
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	if !e.exists(t, wkey(t, "w1")) {
		t.Fatal("a follower deleted")
	}
	if _, err := e.el.Campaign(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for e.exists(t, wkey(t, "w1")) {
		if time.Since(start) > 3*time.Second {
			t.Fatal("the new leader did not pass within 3 s (the Interval is an hour)")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
