package dispatch

import (
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// cycles is how many scheduling cycles the loop has finished.
func (h *hub) cycles(t testing.TB) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.loop.m.cycle.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// A victim's PREEMPTED event reaches the hub before its agent advertises the
// GPUs it freed. The preempting workload must wait for the room it made on
// its own cluster: the cluster still looks full, and nothing there is left
// to preempt or to wait for in the running set, but the work that stopped
// is about to be free. It must not preempt a second set of victims on
// another cluster, and it runs where it preempted.
func TestPreemptionWaitsForTheRoomItFreedWhenTheAdvertLags(t *testing.T) {
	e := newEnv(t, fastConfig())
	e.putQueue("acme/ml/train", 64) // capacity binds, not quota
	eastAg := e.startAgent("east", 1, 8, 0)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.waitKnown(h, "east")
	var east, west []string
	for i := 0; i < 8; i++ {
		w := gpuWorkload(fmt.Sprintf("small%d", i), "acme/ml/train", 1)
		w.Preemptible = true
		e.submit(w)
		east = append(east, w.Id)
	}
	eastDispatch := map[string]string{}
	for _, id := range east {
		eastDispatch[id] = e.waitRunningOn(id, "east", 10*time.Second)
	}
	westAg := e.startAgent("west", 1, 8, 0)
	e.waitKnown(h, "west")
	for i := 0; i < 2; i++ {
		w := gpuWorkload(fmt.Sprintf("half%d", i), "acme/ml/train", 4)
		w.Preemptible = true
		e.submit(w)
		west = append(west, w.Id)
	}
	for _, id := range west {
		e.waitRunningOn(id, "west", 10*time.Second)
	}

	// From now on west's advertisement shows its 8 GPUs taken, whatever
	// stops there, until the test thaws it.
	seq := westAg.freezeAdverts()
	e.waitFor("the hub to hold west's last advertisement", 10*time.Second, func() bool {
		c, ok := h.loop.GetCluster("west")
		return ok && uint64(c.GetAdvertisementSeq()) == seq
	})

	high := gpuWorkload("high", "acme/ml/train", 8)
	high.Priority = 100
	e.submit(high)
	// The two halves are preempted (fewest victims) and their PREEMPTED
	// events are applied: they are QUEUED again, with no dispatch.
	e.waitFor("both victims on west requeued", 15*time.Second, func() bool {
		for _, id := range west {
			if w, _ := e.workload(id); w.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
				return false
			}
		}
		return true
	})
	// Let the loop run several cycles on the stale advertisement: this is
	// where it used to find west full with nothing to wait for and
	// preempt all of east.
	c0 := h.cycles(t)
	e.waitFor("five cycles after the victims stopped", 15*time.Second, func() bool { return h.cycles(t) >= c0+5 })
	for _, id := range east {
		if n := eastAg.cancelCount(eastDispatch[id]); n != 0 {
			t.Fatalf("%s on east got %d cancels while high waited for west's advertisement: a second set of preemptions", id, n)
		}
	}
	w, _ := e.workload("high")
	if ph := w.GetStatus().GetPhase(); ph != meridianv1.WorkloadPhase_WORKLOAD_PHASE_QUEUED {
		t.Fatalf("high is %v on %s before west advertised the room it freed; want QUEUED: %v", ph, w.GetStatus().GetCluster(), w.GetStatus())
	}
	// Its reason says what it waits for (reasons are written once the
	// term has settled, a second after it began).
	e.waitFor("high's pending reason to name west", 10*time.Second, func() bool {
		w, _ := e.workload("high")
		return strings.Contains(w.GetStatus().GetPendingReason(), "to stop on west")
	})
	for _, id := range east {
		if n := eastAg.cancelCount(eastDispatch[id]); n != 0 {
			t.Fatalf("%s on east got %d cancels while high waited for west's advertisement", id, n)
		}
	}

	westAg.thawAdverts()
	e.waitRunningOn("high", "west", 15*time.Second)
	for _, id := range east {
		w, _ := e.workload(id)
		if w.GetStatus().GetPhase() != meridianv1.WorkloadPhase_WORKLOAD_PHASE_RUNNING || w.GetStatus().GetDispatchId() != eastDispatch[id] {
			t.Fatalf("%s on east is %v under dispatch %q (was %s); east must be left alone", id, w.GetStatus().GetPhase(), w.GetStatus().GetDispatchId(), eastDispatch[id])
		}
		if n := eastAg.cancelCount(eastDispatch[id]); n != 0 {
			t.Fatalf("%s on east got %d cancels", id, n)
		}
	}
	if got, re := metricValue(t, h.loop.m.preemptions.WithLabelValues("priority")), metricValue(t, h.loop.m.preemptions.WithLabelValues("reclaim")); got != 2 || re != 0 {
		t.Fatalf("preemptions = %v by priority and %v by reclaim, want exactly the 2 on west, by priority", got, re)
	}
	// The victims' PREEMPTED events answer the hub's own preemptions.
	e.waitFor("2 evictions by hub preemption", 10*time.Second, func() bool {
		return metricValue(t, h.loop.m.evictions.WithLabelValues("hub_preemption")) == 2
	})
	if got := metricValue(t, h.loop.m.evictions.WithLabelValues("cluster_preemption")); got != 0 {
		t.Fatalf("evictions by cluster preemption = %v, want 0", got)
	}
	if got := len(eastAg.runningIDs()); got != 8 {
		t.Fatalf("east runs %d dispatches, want its 8", got)
	}
}
