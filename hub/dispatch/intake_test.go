package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// intakeOps is what the API hands the intake for ws (which it stamps as
// the API does): a create of each, an idempotency key each, and a check
// of the queue at revision qrev.
func (e *env) intakeOps(queue string, qrev int64, ws ...*meridianv1.Workload) []store.Op {
	e.t.Helper()
	var ops []store.Op
	for _, w := range ws {
		w.CreateTime = timestamppb.Now()
		w.Status = &meridianv1.WorkloadStatus{Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED, PendingReason: PendingWaitingForScheduler,
			PendingReasonCode: CodeWaitingForScheduler, UpdateTime: w.CreateTime}
		b, err := encodeWorkload(w)
		if err != nil {
			e.t.Fatal(err)
		}
		k, _ := WorkloadKey(w.Id)
		ik, _ := store.Key(store.KindIdempotency, "key-of-"+w.Id)
		ops = append(ops, store.PutIfModRev(k, b, 0), store.PutIfModRev(ik, []byte(w.Id), 0))
	}
	qk, _ := store.Key(store.KindQueues, queue)
	return append(ops, store.Check(qk, qrev))
}

func (e *env) queueRev(path string) int64 {
	e.t.Helper()
	k, _ := store.Key(store.KindQueues, path)
	_, rev, err := e.st.Get(e.ctx, k)
	if err != nil {
		e.t.Fatal(err)
	}
	return rev
}

// version is how many times key was written since its creation (etcd's
// version; 0: absent).
func (e *env) version(key string) int64 {
	e.t.Helper()
	resp, err := e.cli.Get(e.ctx, key)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].Version
}

// firstWrite is the workload as its key was created.
func (e *env) firstWrite(key string) *meridianv1.Workload {
	e.t.Helper()
	resp, err := e.cli.Get(e.ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		e.t.Fatalf("read %s: %v (%d keys)", key, err, len(resp.Kvs))
	}
	first, err := e.cli.Get(e.ctx, key, clientv3.WithRev(resp.Kvs[0].CreateRevision))
	if err != nil || len(first.Kvs) == 0 {
		e.t.Fatalf("read %s at its creation: %v", key, err)
	}
	w, err := decodeWorkload(first.Kvs[0].Value)
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

// leaderWithCluster starts a leading hub with a queue acme/ml/train of
// quota GPUs and one cluster, east, whose agent has nodes nodes of
// gpusPerNode GPUs and runs each workload for runFor.
func leaderWithCluster(t *testing.T, quota int64, nodes, gpusPerNode int, runFor time.Duration) (*env, *hub) {
	t.Helper()
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", quota)
	e.startAgent("east", nodes, gpusPerNode, runFor)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.waitFor("the cluster", 10*time.Second, func() bool { return len(h.loop.Fleet().IDs()) == 1 })
	return e, h
}

// A submit the cluster has room for is written once, already DISPATCHED,
// with its idempotency keys in the same commit; it then runs as any other.
func TestIntakeStoresAPlacedSubmitOnceDispatched(t *testing.T) {
	e, h := leaderWithCluster(t, 8, 2, 4, 200*time.Millisecond)

	ws := []*meridianv1.Workload{gpuWorkload("in-1", "acme/ml/train", 2), gpuWorkload("in-2", "acme/ml/train", 2), gpuWorkload("in-3", "acme/ml/train", 1)}
	out, taken, err := h.loop.Submit(e.ctx, ws, e.intakeOps("acme/ml/train", e.queueRev("acme/ml/train"), ws...))
	if err != nil || !taken {
		t.Fatalf("Submit: taken=%v err=%v", taken, err)
	}
	if len(out) != len(ws) {
		t.Fatalf("%d workloads answered for %d", len(out), len(ws))
	}
	for i, w := range out {
		st := w.GetStatus()
		if w.GetId() != ws[i].GetId() || st.GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED || st.GetCluster() != "east" || st.GetDispatchId() == "" || st.GetAttempts() != 1 {
			t.Fatalf("answer %d = %s %v", i, w.GetId(), st)
		}
		k, _ := WorkloadKey(w.GetId())
		if first := e.firstWrite(k).GetStatus(); first.GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED || first.GetDispatchId() != st.GetDispatchId() {
			t.Fatalf("%s created as %v (dispatch %q); want DISPATCHED, as answered (%q)", w.GetId(), first.GetPhase(), first.GetDispatchId(), st.GetDispatchId())
		}
		ik, _ := store.Key(store.KindIdempotency, "key-of-"+w.GetId())
		if b, _, err := e.st.Get(e.ctx, ik); err != nil || string(b) != w.GetId() {
			t.Fatalf("idempotency key of %s: %q, %v", w.GetId(), b, err)
		}
	}
	e.waitFor("the three to succeed", 20*time.Second, func() bool {
		return e.countPhase(meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED) == 3
	})
}

// A submit the cycle cannot place is created QUEUED with the reason the
// decision gave, at its first write.
func TestIntakeQueuesWithItsReason(t *testing.T) {
	e, h := leaderWithCluster(t, 2, 1, 8, time.Minute)
	time.Sleep(settleTime) // reasons are written once the fleet has settled

	ws := []*meridianv1.Workload{gpuWorkload("big", "acme/ml/train", 4)} // over the queue's quota of 2
	out, taken, err := h.loop.Submit(e.ctx, ws, e.intakeOps("acme/ml/train", e.queueRev("acme/ml/train"), ws...))
	if err != nil || !taken {
		t.Fatalf("Submit: taken=%v err=%v", taken, err)
	}
	st := out[0].GetStatus()
	if st.GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED || st.GetPendingReasonCode() == "" || st.GetPendingReasonCode() == CodeWaitingForScheduler {
		t.Fatalf("answered %v; want QUEUED with the decision's reason", st)
	}
	k, _ := WorkloadKey("big")
	stored, _ := e.workload("big")
	if v := e.version(k); v != 1 || stored.GetStatus().GetPendingReason() != st.GetPendingReason() {
		t.Fatalf("written %d times, stored reason %q; want once, %q", v, stored.GetStatus().GetPendingReason(), st.GetPendingReason())
	}
}

// A submit whose commit is refused (its queue changed since the API read
// it) comes back untaken with nothing stored, so the API stores it; the
// stored work of the same cycle is dispatched all the same.
func TestIntakeHandsBackARefusedSubmit(t *testing.T) {
	e, h := leaderWithCluster(t, 8, 2, 4, time.Minute)

	stale := e.queueRev("acme/ml/train")
	e.putQueue("acme/ml/train", 8) // a new revision: the check fails
	ws := []*meridianv1.Workload{gpuWorkload("refused", "acme/ml/train", 1)}
	ops := e.intakeOps("acme/ml/train", stale, ws...)
	// Stored work arrives just before, to share the cycle's commits.
	e.submit(gpuWorkload("stored", "acme/ml/train", 1))
	out, taken, err := h.loop.Submit(e.ctx, ws, ops)
	if taken || err != nil || out != nil {
		t.Fatalf("Submit of a refused commit: taken=%v err=%v out=%v; want untaken", taken, err, out)
	}
	k, _ := WorkloadKey("refused")
	if v := e.version(k); v != 0 {
		t.Fatalf("the refused workload was written (version %d)", v)
	}
	e.waitFor("the stored workload's dispatch", 10*time.Second, func() bool {
		w, _ := e.workload("stored")
		return w.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED
	})
	// The API then stores it itself, and the loop dispatches it.
	if _, err := e.st.Commit(e.ctx, nil, e.intakeOps("acme/ml/train", e.queueRev("acme/ml/train"), ws...)...); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the handed-back workload's dispatch", 10*time.Second, func() bool {
		w, _ := e.workload("refused")
		return w.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED
	})
}

// A replica that does not lead takes nothing, and neither does a loop told
// to leave submits to the API (Config.QueueSubmits).
func TestIntakeTakesNothingOnAFollower(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 8)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	f := e.startHub("hub-b")
	ws := []*meridianv1.Workload{gpuWorkload("w", "acme/ml/train", 1)}
	if _, taken, err := f.loop.Submit(e.ctx, ws, e.intakeOps("acme/ml/train", e.queueRev("acme/ml/train"), ws...)); taken || err != nil {
		t.Fatalf("a follower's Submit: taken=%v err=%v", taken, err)
	}
}

func TestIntakeOffWithQueueSubmits(t *testing.T) {
	ws := []*meridianv1.Workload{gpuWorkload("w", "acme/ml/train", 1)}
	off := fastConfig()
	off.QueueSubmits = true
	e2 := newEnv(t, off)
	e2.putQueue("acme/ml/train", 8)
	h2 := e2.startHub("hub-c")
	e2.waitFor("leadership", 10*time.Second, h2.leading)
	if _, taken, err := h2.loop.Submit(e2.ctx, ws, e2.intakeOps("acme/ml/train", e2.queueRev("acme/ml/train"), ws...)); taken || err != nil {
		t.Fatalf("Submit with QueueSubmits: taken=%v err=%v", taken, err)
	}
	if v := e2.version(prefWorkloads + "w"); v != 0 {
		t.Fatalf("a declined submit was written (version %d)", v)
	}
}

// Submits waiting when a term ends go back untaken.
func TestIntakeDeclinesWhatATermLeaves(t *testing.T) {
	l := &Loop{}
	u, ok := newIntakeUnit(context.Background(), []*meridianv1.Workload{{Id: "a"}}, []store.Op{store.PutIfModRev(prefWorkloads+"a", []byte("x"), 0)})
	if !ok {
		t.Fatal("newIntakeUnit refused a well-formed submit")
	}
	l.intake, l.intakeLen = []*intakeUnit{u}, 1
	l.declineIntake()
	select {
	case a := <-u.done:
		if a.taken || a.err != nil {
			t.Fatalf("answered %+v; want untaken", a)
		}
	default:
		t.Fatal("a waiting submit was not answered")
	}
	if len(l.intake) != 0 || l.intakeLen != 0 {
		t.Fatalf("intake left %d (%d workloads)", len(l.intake), l.intakeLen)
	}
}

// newIntakeUnit takes a submit only when ops create every one of its
// workloads, once, at their keys.
func TestNewIntakeUnitChecksTheCreates(t *testing.T) {
	ws := []*meridianv1.Workload{{Id: "a"}, {Id: "b"}}
	ik := store.PutIfModRev("/meridian/idempotency/x", []byte("a"), 0)
	cases := []struct {
		name string
		ops  []store.Op
		want bool
	}{
		{"both created", []store.Op{store.PutIfModRev(prefWorkloads+"a", nil, 0), ik, store.PutIfModRev(prefWorkloads+"b", nil, 0)}, true},
		{"one missing", []store.Op{store.PutIfModRev(prefWorkloads+"a", nil, 0), ik}, false},
		{"one twice", []store.Op{store.PutIfModRev(prefWorkloads+"a", nil, 0), store.PutIfModRev(prefWorkloads+"a", nil, 0), store.PutIfModRev(prefWorkloads+"b", nil, 0)}, false},
		{"an overwrite", []store.Op{store.PutIfModRev(prefWorkloads+"a", nil, 7), store.PutIfModRev(prefWorkloads+"b", nil, 0)}, false},
		{"an unguarded put", []store.Op{store.Put(prefWorkloads+"a", nil), store.PutIfModRev(prefWorkloads+"b", nil, 0)}, false},
		{"another workload", []store.Op{store.PutIfModRev(prefWorkloads+"a", nil, 0), store.PutIfModRev(prefWorkloads+"c", nil, 0)}, false},
	}
	for _, c := range cases {
		if _, ok := newIntakeUnit(context.Background(), ws, c.ops); ok != c.want {
			t.Errorf("%s: took=%v, want %v", c.name, ok, c.want)
		}
	}
	if _, ok := newIntakeUnit(context.Background(), nil, nil); ok {
		t.Error("took a submit of no workloads")
	}
}

// One cycle's submits never write a key twice, nor check one at two
// revisions; the same check is shared.
func TestClaimKeepsOneTransactionValid(t *testing.T) {
	unit := func(id string, extra ...store.Op) *intakeUnit {
		return &intakeUnit{keys: []string{prefWorkloads + id}, extra: extra}
	}
	q5, q6 := store.Check("/meridian/queues/q", 5), store.Check("/meridian/queues/q", 6)
	idem := store.PutIfModRev("/meridian/idempotency/k", []byte("x"), 0)
	claimed := map[string]int64{}
	steps := []struct {
		u    *intakeUnit
		want bool
	}{
		{unit("a", idem, q5), true},
		{unit("b", q5), true},                                 // the same check
		{unit("c", q6), false},                                // the queue at another revision
		{unit("d", idem), false},                              // the same idempotency key
		{unit("a"), false},                                    // the same workload
		{unit("e", store.Check(prefWorkloads+"a", 0)), false}, // a check of a key written
		{unit("f", q5), true},
	}
	for i, s := range steps {
		if got := claim(claimed, s.u); got != s.want {
			t.Errorf("step %d (%s): claim=%v, want %v", i, s.u.keys[0], got, s.want)
		}
	}
	if _, ok := claimed[prefWorkloads+"c"]; ok {
		t.Error("a refused submit's keys were claimed")
	}
}

// Many submits at once, each from its own caller, through one leader: each
// is stored once, and they run.
func TestIntakeUnderConcurrentSubmits(t *testing.T) {
	e, h := leaderWithCluster(t, 64, 4, 8, 100*time.Millisecond)
	const n = 40
	type result struct {
		taken bool
		err   error
	}
	res := make(chan result, n)
	qrev := e.queueRev("acme/ml/train")
	for i := range n {
		ws := []*meridianv1.Workload{gpuWorkload(fmt.Sprintf("c-%02d", i), "acme/ml/train", 1)}
		ops := e.intakeOps("acme/ml/train", qrev, ws...)
		go func() {
			_, taken, err := h.loop.Submit(e.ctx, ws, ops)
			if err == nil && !taken {
				_, err = e.st.Commit(e.ctx, nil, ops...) // the API's own path
			}
			res <- result{taken, err}
		}()
	}
	took := 0
	for range n {
		r := <-res
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.taken {
			took++
		}
	}
	if took == 0 {
		t.Fatal("the leader took none of the submits")
	}
	e.waitFor("all to succeed", 30*time.Second, func() bool {
		return e.countPhase(meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED) == n
	})
	t.Logf("the loop stored %d of %d submits", took, n)
}
