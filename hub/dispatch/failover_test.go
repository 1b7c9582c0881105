package dispatch

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/leader"
	"github.com/meridian-gpu/meridian/hub/store"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func TestLeaderChange(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 16)
	ag := e.startAgent("east", 2, 8, 200*time.Millisecond)
	a, b := e.startHub("hub-a"), e.startHub("hub-b")
	e.waitFor("a leader", 10*time.Second, func() bool { return a.leading() || b.leading() })
	old, standby := a, b
	if b.leading() {
		old, standby = b, a
	}
	if standby.leading() {
		t.Fatal("two replicas lead at once")
	}
	fence, ok := old.el.Fence()
	if !ok {
		t.Fatal("leader has no fence")
	}

	var ws []*meridianv1.Workload
	for i := 0; i < 40; i++ {
		ws = append(ws, gpuWorkload(fmt.Sprintf("w%02d", i), "acme/ml/train", 1))
	}
	e.submit(ws...)
	e.waitFor("some progress", 20*time.Second, func() bool {
		return e.countPhase(meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED) >= 5
	})

	old.kill()
	took := e.waitFor("the standby to take over", 8*time.Second, standby.leading)
	if took > 5*time.Second {
		t.Fatalf("takeover took %s, want within 5s", took)
	}
	t.Logf("takeover after %s", took)

	// The deposed leader's fence no longer admits a commit.
	_, err := e.st.Commit(e.ctx, &fence, store.Put(store.Root+"/deposed-probe", []byte("x")))
	if !store.IsNotLeader(err) || !leader.IsNotLeader(err) {
		t.Fatalf("commit under the deposed fence: err = %v, want ErrNotLeader", err)
	}
	if _, _, err := e.st.Get(e.ctx, store.Root+"/deposed-probe"); !store.IsNotFound(err) {
		t.Fatalf("deposed commit left a key behind: %v", err)
	}

	e.waitFor("all forty to succeed under the new leader", 40*time.Second, func() bool {
		return e.countPhase(meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED) == 40
	})
	byW := ag.checkLaunchedOnce(t)
	for _, w := range ws {
		if len(byW[w.Id]) != 1 {
			t.Fatalf("%s launched under %d dispatch ids", w.Id, len(byW[w.Id]))
		}
	}
}

func TestHubCrashRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("crash loop takes ~20s")
	}
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 64)
	east := e.startAgent("east", 4, 8, 1200*time.Millisecond)
	west := e.startAgent("west", 4, 8, 1200*time.Millisecond)

	const n = 200
	var ws []*meridianv1.Workload
	for i := 0; i < n; i++ {
		ws = append(ws, gpuWorkload(fmt.Sprintf("w%03d", i), "acme/ml/train", 1))
	}
	e.submit(ws...)

	for round := 0; round < 3; round++ {
		h := e.startHub(fmt.Sprintf("hub-%d", round))
		e.waitFor("leadership", 10*time.Second, h.leading)
		time.Sleep(time.Duration(700+300*round) * time.Millisecond)
		inFlight := n - e.countPhase(meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED)
		t.Logf("round %d: crashing the hub with %d workloads not yet done", round, inFlight)
		if inFlight == 0 {
			t.Fatalf("round %d: nothing in flight; the test would prove nothing", round)
		}
		h.kill()
	}
	final := e.startHub("hub-final")
	e.waitFor("leadership", 10*time.Second, final.leading)
	e.waitFor("every workload to succeed", 60*time.Second, func() bool {
		return e.countPhase(meridianv1.WorkloadPhase_WORKLOAD_PHASE_SUCCEEDED) == n
	})

	all := e.workloads()
	if len(all) != n {
		t.Fatalf("%d workloads stored, want %d: acknowledged work was lost", len(all), n)
	}
	launched := map[string]int{}
	for _, ag := range []*agent{east, west} {
		for w, ds := range ag.checkLaunchedOnce(t) {
			launched[w] += len(ds)
		}
	}
	for _, w := range ws {
		if launched[w.Id] != 1 {
			t.Fatalf("%s launched under %d dispatch ids, want exactly 1", w.Id, launched[w.Id])
		}
		if a := all[w.Id].GetStatus().GetAttempts(); a != 1 {
			t.Fatalf("%s attempts = %d, want 1", w.Id, a)
		}
	}
	if got := east.totalLaunches() + west.totalLaunches(); got != n {
		t.Fatalf("%d launches in all, want %d", got, n)
	}
}

func TestRepublishAfterCrashBeforePublish(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 16)
	ag := e.startAgent("east", 2, 8, 0)
	a := e.startHub("hub-a")
	a.loop.dropPublishes.Store(true) // commits land, publishes vanish
	e.waitFor("leadership", 10*time.Second, a.leading)
	var ws []*meridianv1.Workload
	for i := 0; i < 5; i++ {
		ws = append(ws, gpuWorkload(fmt.Sprintf("w%d", i), "acme/ml/train", 1))
	}
	e.submit(ws...)
	e.waitFor("all five committed as DISPATCHED", 10*time.Second, func() bool {
		return e.countPhase(meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED) == 5
	})
	time.Sleep(300 * time.Millisecond)
	if n := ag.totalLaunches(); n != 0 {
		t.Fatalf("agent launched %d dispatches that were never published", n)
	}
	before := map[string]string{}
	for id, w := range e.workloads() {
		before[id] = w.GetStatus().GetDispatchId()
	}
	a.kill()

	b := e.startHub("hub-b")
	e.waitFor("takeover", 10*time.Second, b.leading)
	e.waitFor("all five running after the republish", 10*time.Second, func() bool {
		return e.countPhase(meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING) == 5
	})
	byW := ag.checkLaunchedOnce(t)
	for id, did := range before {
		if !byW[id][did] || len(byW[id]) != 1 {
			t.Fatalf("%s: launched %v, want only the committed dispatch %s", id, byW[id], did)
		}
	}
}

func TestDrainSurvivesLeaderChange(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 8)
	e.startAgent("east", 1, 8, 0)
	west := e.startAgent("west", 1, 8, 0)
	a := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, a.leading)
	e.waitKnown(a, "east", "west")
	if err := a.loop.SetDrainingReason(e.ctx, "east", true, "rack A power work"); err != nil {
		t.Fatal(err)
	}
	if c, _ := a.loop.GetCluster("east"); c.GetDrainReason() != "rack A power work" {
		t.Fatalf("east's drain reason = %q, want the operator's", c.GetDrainReason())
	}
	if err := a.loop.SetDraining(e.ctx, "nowhere", true); err == nil || !strings.Contains(err.Error(), "nowhere") {
		t.Fatalf("draining an unknown cluster: err = %v, want one naming it", err)
	}
	a.kill()
	b := e.startHub("hub-b")
	e.waitFor("takeover", 10*time.Second, b.leading)
	e.waitKnown(b, "east", "west")
	if c, _ := b.loop.GetCluster("east"); c.GetState() != meridianv1.ClusterState_CLUSTER_STATE_DRAINING || c.GetDrainReason() != "rack A power work" {
		t.Fatalf("east after takeover = %v (%q), want DRAINING with the operator's reason", c.GetState(), c.GetDrainReason())
	}
	var ws []*meridianv1.Workload
	for i := 0; i < 4; i++ {
		ws = append(ws, gpuWorkload(fmt.Sprintf("w%d", i), "acme/ml/train", 1))
	}
	e.submit(ws...)
	for _, w := range ws {
		e.waitRunningOn(w.Id, "west", 10*time.Second)
	}
	if n := len(west.runningIDs()); n != 4 {
		t.Fatalf("west runs %d, want all 4 (east drains)", n)
	}
	// Reopening drops the reason.
	if err := b.loop.SetDraining(e.ctx, "east", false); err != nil {
		t.Fatal(err)
	}
	if c, _ := b.loop.GetCluster("east"); c.GetState() != meridianv1.ClusterState_CLUSTER_STATE_READY || c.GetDrainReason() != "" {
		t.Fatalf("east after resume = %v (%q), want READY with no reason", c.GetState(), c.GetDrainReason())
	}
}
