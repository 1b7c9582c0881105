package dispatch

import (
	"slices"
	"testing"
	"time"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

func (e *env) phaseOn(id string) (meridianv1.WorkloadPhase, string, string) {
	w, _ := e.workload(id)
	return w.GetStatus().GetPhase(), w.GetStatus().GetCluster(), w.GetStatus().GetDispatchId()
}

func (e *env) waitRunningOn(id, cluster string, timeout time.Duration) string {
	e.t.Helper()
	var did string
	e.waitFor(id+" running on "+cluster, timeout, func() bool {
		p, c, d := e.phaseOn(id)
		did = d
		return p == meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING && c == cluster
	})
	return did
}

func (e *env) waitKnown(h *hub, clusters ...string) {
	e.t.Helper()
	e.waitFor("clusters announced", 10*time.Second, func() bool {
		for _, c := range clusters {
			if _, ok := h.loop.GetCluster(c); !ok {
				return false
			}
		}
		return true
	})
}

func TestAgentLoss(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 32)
	east := e.startAgent("east", 1, 8, 0)
	west := e.startAgent("west", 1, 8, 0)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.waitKnown(h, "east", "west")
	if err := h.loop.SetDraining(e.ctx, "west", true); err != nil {
		t.Fatal(err)
	}
	if c, _ := h.loop.GetCluster("west"); c.GetState() != meridianv1.ClusterState_CLUSTER_STATE_DRAINING {
		t.Fatalf("west state = %v after drain", c.GetState())
	}

	keep := gpuWorkload("keep", "acme/ml/train", 1)
	move := gpuWorkload("move", "acme/ml/train", 1)
	move.RequeueOnClusterLoss = true
	e.submit(keep, move)
	keepID := e.waitRunningOn("keep", "east", 10*time.Second)
	moveOld := e.waitRunningOn("move", "east", 10*time.Second)

	// East goes silent. A dispatch sent to it now is never acknowledged.
	east.vanish()
	lostAt := time.Now()
	e.submit(gpuWorkload("fresh", "acme/ml/train", 1))
	var freshOld string
	e.waitFor("fresh dispatched to east", 5*time.Second, func() bool {
		p, c, d := e.phaseOn("fresh")
		freshOld = d
		return p == meridianv1.WorkloadPhase_WORKLOAD_PHASE_DISPATCHED && c == "east"
	})
	if err := h.loop.SetDraining(e.ctx, "west", false); err != nil {
		t.Fatal(err)
	}

	// After the timeout, fresh (unacknowledged) and move (asks for it) go to
	// west; keep stays where it runs.
	timeout := fastConfig().ClusterTimeout
	e.waitRunningOn("fresh", "west", timeout+5*time.Second)
	e.waitRunningOn("move", "west", 5*time.Second)
	t.Logf("requeued to west %s after east went silent (timeout %s)", time.Since(lostAt), timeout)
	if c, _ := h.loop.GetCluster("east"); c.GetState() != meridianv1.ClusterState_CLUSTER_STATE_LOST {
		t.Fatalf("east state = %v, want LOST", c.GetState())
	}
	if p, c, d := e.phaseOn("keep"); p != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING || c != "east" || d != keepID {
		t.Fatalf("keep = %v on %s as %s; want RUNNING on east as %s", p, c, d, keepID)
	}
	fw, _ := e.workload("fresh")
	if av := avoided(fw, time.Now()); !slices.Contains(av, "east") {
		t.Fatalf("fresh does not avoid east after the loss: conditions %v", fw.GetStatus().GetConditions())
	}

	// East comes back: its stale work is cancelled, current work keeps running.
	east.connect()
	e.waitFor("east READY again", 5*time.Second, func() bool {
		c, _ := h.loop.GetCluster("east")
		return c.GetState() == meridianv1.ClusterState_CLUSTER_STATE_READY
	})
	e.waitFor("stale work on east stopped", 10*time.Second, func() bool {
		ids := east.runningIDs()
		return len(ids) == 1 && ids[0] == keepID
	})
	if east.cancelCount(moveOld) == 0 {
		t.Fatalf("move's old dispatch %s on east was never cancelled", moveOld)
	}
	if east.cancelCount(keepID) != 0 {
		t.Fatal("current work on east got a cancel")
	}
	time.Sleep(500 * time.Millisecond) // a few cycles and heartbeats later
	if p, c, d := e.phaseOn("keep"); p != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING || c != "east" || d != keepID {
		t.Fatalf("keep = %v on %s as %s after east returned", p, c, d)
	}
	for _, id := range []string{"fresh", "move"} {
		if p, c, _ := e.phaseOn(id); p != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING || c != "west" {
			t.Fatalf("%s = %v on %s after east returned; stale events must not move it", id, p, c)
		}
	}
	_ = freshOld
	west.checkLaunchedOnce(t)
}

func TestRejectBackoff(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 32)
	east := e.startAgent("east", 1, 8, 0)
	e.startAgent("west", 1, 8, 0)
	east.mu.Lock()
	east.reject = true
	east.mu.Unlock()
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.waitKnown(h, "east", "west")
	if err := h.loop.SetDraining(e.ctx, "west", true); err != nil {
		t.Fatal(err)
	}
	e.submit(gpuWorkload("w", "acme/ml/train", 1))
	e.waitFor("rejection recorded", 10*time.Second, func() bool {
		w, _ := e.workload("w")
		return slices.Contains(avoided(w, time.Now()), "east") && w.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED
	})
	w, _ := e.workload("w")
	if w.GetStatus().GetAttempts() != 1 {
		t.Fatalf("attempts = %d after one rejection", w.GetStatus().GetAttempts())
	}
	// While east is backed off and west drains, it waits with a reason.
	e.waitFor("a pending reason", 5*time.Second, func() bool {
		w, _ := e.workload("w")
		r := w.GetStatus().GetPendingReason()
		return r != "" && r != PendingWaitingForScheduler && w.GetStatus().GetPhase() == meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED
	})
	if err := h.loop.SetDraining(e.ctx, "west", false); err != nil {
		t.Fatal(err)
	}
	e.waitRunningOn("w", "west", 10*time.Second)
	w, _ = e.workload("w")
	if w.GetStatus().GetAttempts() != 2 {
		t.Fatalf("attempts = %d, want 2", w.GetStatus().GetAttempts())
	}
}

// TestHubCutOffFromNATSLosesNothing: when the hub cannot hear NATS at all,
// the silence of every cluster is the hub's problem, not theirs; nothing is
// marked LOST or requeued.
func TestHubCutOffFromNATSLosesNothing(t *testing.T) {
	cfg := fastConfig()
	cfg.ClusterTimeout = 800 * time.Millisecond
	e := newEnv(t, cfg)
	e.putQueue("acme/ml/train", 8)
	e.startAgent("east", 1, 8, 0)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	w := gpuWorkload("w", "acme/ml/train", 1)
	w.RequeueOnClusterLoss = true
	e.submit(w)
	did := e.waitRunningOn("w", "east", 10*time.Second)

	if err := e.ns.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * cfg.ClusterTimeout) // far past the cluster timeout
	if c, _ := h.loop.GetCluster("east"); c.GetState() == meridianv1.ClusterState_CLUSTER_STATE_LOST {
		t.Fatal("east marked LOST while the hub itself was cut off from NATS")
	}
	if err := e.ns.Restart(); err != nil {
		t.Fatal(err)
	}
	e.waitFor("heartbeats again", 15*time.Second, func() bool {
		_, at, ok := h.loop.Fleet().Reported("east")
		return ok && time.Since(at) < 300*time.Millisecond
	})
	time.Sleep(cfg.ClusterTimeout) // through the grace period
	if p, c, d := e.phaseOn("w"); p != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING || c != "east" || d != did {
		t.Fatalf("w = %v on %s as %s; want still RUNNING on east as %s", p, c, d, did)
	}
	if c, _ := h.loop.GetCluster("east"); c.GetState() != meridianv1.ClusterState_CLUSTER_STATE_READY {
		t.Fatalf("east = %v after NATS came back", c.GetState())
	}
}

// TestNewHubAfterOutageWaitsForHeartbeats: a hub that starts after a long
// outage finds only old adverts; it must give agents one timeout to speak
// before it calls their clusters LOST.
func TestNewHubAfterOutageWaitsForHeartbeats(t *testing.T) {
	cfg := fastConfig()
	cfg.ClusterTimeout = 800 * time.Millisecond
	e := newEnv(t, cfg)
	e.putQueue("acme/ml/train", 8)
	east := e.startAgent("east", 1, 8, 0)
	a := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, a.leading)
	w := gpuWorkload("w", "acme/ml/train", 1)
	w.RequeueOnClusterLoss = true
	e.submit(w)
	did := e.waitRunningOn("w", "east", 10*time.Second)

	a.kill()
	east.vanish()                      // the whole control plane is gone...
	time.Sleep(2 * cfg.ClusterTimeout) // ...long enough for the last advert to be stale
	b := e.startHub("hub-b")
	e.waitFor("takeover", 10*time.Second, b.leading)
	time.Sleep(cfg.ClusterTimeout / 3)
	east.connect()
	time.Sleep(2 * cfg.ClusterTimeout)
	if p, c, d := e.phaseOn("w"); p != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING || c != "east" || d != did {
		t.Fatalf("w = %v on %s as %s; want still RUNNING on east as %s", p, c, d, did)
	}
	if n := east.cancelCount(did); n != 0 {
		t.Fatalf("east got %d cancels for its current work", n)
	}
}
