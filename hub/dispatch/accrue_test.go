package dispatch

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-gpu/meridian/hub/fleet"
	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// A pass charges a workload up to the last heartbeat that showed it, and
// passes between heartbeats charge nothing new; a workload that the hub
// sees running only after its heartbeat was charged loses nothing: the
// next heartbeat charges it from its start. The totals are those of
// charging every workload from its start to the last heartbeat.
func TestAccrueChargesUpToEachHeartbeatOnce(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	reg := fleet.New(fleet.Options{Clock: func() time.Time { return now }, Timeout: time.Hour})
	l := &Loop{fleet: reg, cfg: Config{AccrueEvery: time.Second, LedgerPersistEvery: time.Hour}}
	// A half-life of two hundred years: charges add up as plain GPU-seconds.
	tm := &term{ledger: quota.NewLedger(200*365*24*time.Hour, nil), accruedTo: map[string]time.Time{},
		heartbeatCharged: map[string]time.Time{}, ledgerFloor: t0, ledgerSavedAt: t0}
	b := &built{current: map[string]curRef{}, byID: map[string]*wl{}}
	run := func(id, queue string, start time.Time) {
		w := &meridianv1.Workload{Id: id, Queue: queue, Status: &meridianv1.WorkloadStatus{
			Phase: meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING, StartTime: timestamppb.New(start)}}
		e := &wl{pb: w}
		b.byID[id] = e
		b.current["d-"+id] = curRef{w: e, r: &rec{r: &Record{DispatchID: "d-" + id, WorkloadID: id, Cluster: "east",
			Usage: []scheduler.ClassMilli{{Class: "h100", Milli: 1000}}}}}
	}
	heartbeat := func(ids ...string) {
		hb := &agentv1.Heartbeat{ClusterId: "east", SentAt: timestamppb.New(now)}
		for _, id := range ids {
			hb.Dispatches = append(hb.Dispatches, &agentv1.RunningDispatch{DispatchId: "d-" + id, WorkloadId: id})
		}
		if err := reg.ApplyHeartbeat("east", hb); err != nil {
			t.Fatal(err)
		}
	}
	pass := func() {
		if err := l.accrue(tm, b, now); err != nil {
			t.Fatal(err)
		}
	}
	gpuSeconds := func(queue string) float64 { return tm.ledger.Usage(queue, now) }
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-3 {
			t.Fatalf("%s: %.4f GPU-seconds charged, want %.4f", what, got, want)
		}
	}

	run("a", "team-a", t0)
	now = t0.Add(10 * time.Second)
	heartbeat("a", "b") // shows b before the hub sees it running
	now = now.Add(500 * time.Millisecond)
	pass()
	near("a after the first heartbeat", gpuSeconds("team-a"), 10)

	run("b", "team-b", t0.Add(4*time.Second))
	for range 3 { // passes with no new heartbeat charge nothing new
		now = now.Add(time.Second)
		pass()
	}
	near("a with no new heartbeat", gpuSeconds("team-a"), 10)

	heartbeat("a", "b")
	hb2 := now
	now = now.Add(time.Second)
	pass()
	near("a after the second heartbeat", gpuSeconds("team-a"), hb2.Sub(t0).Seconds())
	near("b, seen running after its first heartbeat", gpuSeconds("team-b"), hb2.Sub(t0.Add(4*time.Second)).Seconds())

	// A ledger write forgets the marks of workloads that stopped running.
	delete(b.current, "d-a")
	b.byID["a"].pb.Status.Phase = meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED
	forgetStopped(tm, b)
	if _, ok := tm.accruedTo["a"]; ok {
		t.Fatal("a stopped running but its accrual mark was kept")
	}
	if _, ok := tm.accruedTo["b"]; !ok {
		t.Fatal("b still runs but its accrual mark was dropped")
	}
}
