package dispatch

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"pgregory.net/rapid"

	"github.com/meridian-gpu/meridian/hub/scheduler"
	agentv1 "github.com/meridian-gpu/meridian/proto/meridian/agent/v1"
	meridianv1 "github.com/meridian-gpu/meridian/proto/meridian/v1"
)

// TestBacklogBehindTheWindow: with a window of 3, a cycle hands the core
// only the head of the queue. The workloads behind it keep the reason
// they were submitted with (a backlog costs no writes), Explain tells them
// where they stand, one that higher-priority work pushes out of the head
// is told once, and the head still runs first.
func TestBacklogBehindTheWindow(t *testing.T) {
	cfg := fastConfig()
	cfg.Scheduler = scheduler.DefaultConfig()
	cfg.Scheduler.MaxConsidered = 3
	e := newEnv(t, cfg)
	e.putQueue("team/a", 100)
	ag := e.startAgent("c1", 1, 8, 0)
	h := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, h.leading)
	e.waitKnown(h, "c1")
	e.submit(gpuWorkload("holder", "team/a", 8))
	e.waitRunningOn("holder", "c1", 10*time.Second)

	t0 := time.Now().Add(-time.Minute)
	var ws []*meridianv1.Workload
	for i := range 10 {
		w := gpuWorkload(fmt.Sprintf("w%02d", i), "team/a", 8)
		w.CreateTime = timestamppb.New(t0.Add(time.Duration(i) * time.Second))
		ws = append(ws, w)
	}
	e.submit(ws...)
	revs := map[string]int64{}
	for _, w := range ws {
		_, revs[w.GetId()] = e.workload(w.GetId())
	}
	code := func(id string) string { w, _ := e.workload(id); return w.GetStatus().GetPendingReasonCode() }
	e.waitFor("the head to be told it does not fit", 10*time.Second, func() bool {
		return code("w00") == "NoFit" && code("w01") == "NoFit" && code("w02") == "NoFit"
	})
	// Several more cycles: the rest is never written to.
	time.Sleep(10 * cfg.MaxIdle)
	for _, w := range ws[3:] {
		if got, rev := e.workload(w.GetId()); rev != revs[w.GetId()] {
			t.Fatalf("%s behind the window was written: %q (%q)", w.GetId(), got.GetStatus().GetPendingReason(), got.GetStatus().GetPendingReasonCode())
		}
	}

	deep, _ := e.workload("w08")
	ex, err := h.loop.Explain(e.ctx, deep)
	if err != nil {
		t.Fatal(err)
	}
	if ex.GetQueuePosition() != 9 || ex.GetPendingReasonCode() != "Deferred" || ex.GetPendingReason() != scheduler.WindowReason("team/a", 3) {
		t.Fatalf("explain w08: position %d, %q (%q)", ex.GetQueuePosition(), ex.GetPendingReason(), ex.GetPendingReasonCode())
	}
	head, _ := e.workload("w01")
	if ex, err := h.loop.Explain(e.ctx, head); err != nil || ex.GetQueuePosition() != 2 || ex.GetPendingReasonCode() != "NoFit" {
		t.Fatalf("explain w01: %v, position %d, %q (%q)", err, ex.GetQueuePosition(), ex.GetPendingReason(), ex.GetPendingReasonCode())
	}

	// Work of higher priority arrives: it takes the head, and w02 falls
	// behind, which its reason now says.
	urgent := gpuWorkload("urgent", "team/a", 8)
	urgent.Priority = 10
	e.submit(urgent)
	e.waitFor("w02 to be told it fell behind the window", 10*time.Second, func() bool {
		w, _ := e.workload("w02")
		return w.GetStatus().GetPendingReasonCode() == "Deferred" && w.GetStatus().GetPendingReason() == scheduler.WindowReason("team/a", 3)
	})
	if c := code("urgent"); c != "NoFit" {
		t.Fatalf("urgent: code %q, want NoFit", c)
	}
	if st := h.loop.QueueStatus("team/a"); st.GetPendingWorkloads() != 11 || st.GetRunningWorkloads() != 1 {
		t.Fatalf("queue status: %d pending, %d running; want 11 and 1", st.GetPendingWorkloads(), st.GetRunningWorkloads())
	}

	// Room frees up: the head runs first, in its order.
	ag.finish("holder")
	e.waitRunningOn("urgent", "c1", 10*time.Second)
	ag.finish("urgent")
	e.waitRunningOn("w00", "c1", 10*time.Second)
}

// TestBehindTheWindowAfterFailover: the heads one leader told why they
// wait are known to the next leader only from the store. A head that falls
// behind the window in the new term is still told so, though the new term
// never saw it as a head (a new term used to start with no heads, and the
// workload kept "NoFit" while far behind the window).
func TestBehindTheWindowAfterFailover(t *testing.T) {
	cfg := fastConfig()
	cfg.Scheduler = scheduler.DefaultConfig()
	cfg.Scheduler.MaxConsidered = 3
	e := newEnv(t, cfg)
	e.putQueue("team/a", 100)
	e.startAgent("c1", 1, 8, 0)
	a := e.startHub("hub-a")
	e.waitFor("leadership", 10*time.Second, a.leading)
	e.waitKnown(a, "c1")
	e.submit(gpuWorkload("holder", "team/a", 8))
	e.waitRunningOn("holder", "c1", 10*time.Second)
	t0 := time.Now().Add(-time.Minute)
	for i := range 6 {
		w := gpuWorkload(fmt.Sprintf("w%02d", i), "team/a", 8)
		w.CreateTime = timestamppb.New(t0.Add(time.Duration(i) * time.Second))
		e.submit(w)
	}
	code := func(id string) string { w, _ := e.workload(id); return w.GetStatus().GetPendingReasonCode() }
	e.waitFor("the head to be told it does not fit", 10*time.Second, func() bool {
		return code("w00") == "NoFit" && code("w01") == "NoFit" && code("w02") == "NoFit"
	})
	// Work of higher priority arrives while no hub leads: the new
	// leader's first cycle already has it at the head, and w02 behind.
	a.kill()
	urgent := gpuWorkload("urgent", "team/a", 8)
	urgent.Priority = 10
	e.submit(urgent)
	b := e.startHub("hub-b")
	e.waitFor("hub-b to lead", 15*time.Second, b.leading)
	e.waitFor("w02 to be told it fell behind the window", 10*time.Second, func() bool {
		w, _ := e.workload("w02")
		return w.GetStatus().GetPendingReasonCode() == "Deferred" && w.GetStatus().GetPendingReason() == scheduler.WindowReason("team/a", 3)
	})
	// The heads keep their reasons, and the rest of the backlog was never
	// written: it has no reason at all.
	for _, id := range []string{"urgent", "w00", "w01"} {
		if c := code(id); c != "NoFit" {
			t.Errorf("%s: code %q, want NoFit", id, c)
		}
	}
	for _, id := range []string{"w03", "w04", "w05"} {
		if c := code(id); c != "" {
			t.Errorf("%s behind the window was written: code %q", id, c)
		}
	}
}

// finish ends a workload running on the agent, as if it succeeded.
func (a *agent) finish(wid string) {
	a.e.t.Helper()
	a.mu.Lock()
	var id string
	for d := range a.byWorkload[wid] {
		if _, ok := a.run[d]; ok {
			id = d
		}
	}
	if id != "" {
		a.releaseLocked(id)
	}
	a.mu.Unlock()
	if id == "" {
		a.e.t.Fatalf("%s is not running on %s", wid, a.id)
	}
	a.advertise()
	if err := a.event(id, wid, agentv1.DispatchEventType_DISPATCH_EVENT_TYPE_SUCCEEDED, ""); err != nil {
		a.e.t.Fatal(err)
	}
}

// TestBacklogOrder checks the backlog against a sorted list under random
// adds and drops: heads walks each queue in the core's order, stops at the
// window, counts what it left behind, and position is the place in line.
func TestBacklogOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := newBacklog()
		live := map[string]*wl{}
		t0 := time.Unix(1700000000, 0)
		for i := range rapid.IntRange(0, 60).Draw(t, "ops") {
			if ids := sortedKeys(live); len(ids) > 0 && rapid.IntRange(0, 2).Draw(t, "drop") == 0 {
				id := rapid.SampledFrom(ids).Draw(t, "victim")
				b.drop(live[id])
				delete(live, id)
				continue
			}
			id := fmt.Sprintf("w%03d", i)
			w := &wl{pb: &meridianv1.Workload{Id: id}}
			if rapid.IntRange(0, 9).Draw(t, "bad") == 0 {
				w.swErr = fmt.Errorf("bad")
			} else {
				w.sw = &scheduler.Workload{ID: id, Queue: rapid.SampledFrom([]string{"q/a", "q/b"}).Draw(t, "queue"),
					Priority: int32(rapid.IntRange(0, 2).Draw(t, "prio")), CreatedAt: t0.Add(time.Duration(rapid.IntRange(0, 5).Draw(t, "age")) * time.Second)}
			}
			b.add(w)
			live[id] = w
		}
		byQ := map[string][]*scheduler.Workload{}
		bad := 0
		for _, w := range live {
			if w.sw == nil {
				bad++
				continue
			}
			byQ[w.sw.Queue] = append(byQ[w.sw.Queue], w.sw)
		}
		if len(b.bad) != bad {
			t.Fatalf("bad: %d filed, want %d", len(b.bad), bad)
		}
		window := rapid.IntRange(0, 8).Draw(t, "window")
		var got []string
		skip := rapid.IntRange(0, 3).Draw(t, "skip") // pass over every skip-th
		n := 0
		behind := b.heads(window, func(w *wl) bool {
			n++
			if skip > 0 && n%skip == 0 {
				return false
			}
			got = append(got, w.sw.ID)
			return true
		})
		var want []string
		wantBehind := 0
		n = 0
		for _, q := range sortedKeys(byQ) {
			ws := byQ[q]
			sort.Slice(ws, func(i, j int) bool {
				if ws[i].Priority != ws[j].Priority {
					return ws[i].Priority > ws[j].Priority
				}
				if !ws[i].CreatedAt.Equal(ws[j].CreatedAt) {
					return ws[i].CreatedAt.Before(ws[j].CreatedAt)
				}
				return ws[i].ID < ws[j].ID
			})
			if int(b.count[q]) != len(ws) {
				t.Fatalf("count[%s] = %d, want %d", q, b.count[q], len(ws))
			}
			taken, seen := 0, 0
			for i, w := range ws {
				if pos := b.position(w); pos != i {
					t.Fatalf("position of %s = %d, want %d", w.ID, pos, i)
				}
				if window > 0 && taken >= window {
					continue
				}
				seen++
				n++
				if skip > 0 && n%skip == 0 {
					continue
				}
				want = append(want, w.ID)
				taken++
			}
			wantBehind += len(ws) - seen
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || behind != wantBehind {
			t.Fatalf("heads(%d) = %v behind %d, want %v behind %d", window, got, behind, want, wantBehind)
		}
		for q := range b.count {
			if len(byQ[q]) == 0 {
				t.Fatalf("queue %s counted with no workloads", q)
			}
		}
	})
}

// TestFellBehindUntilTold: a workload pushed out of its queue's window is
// owed the window's reason until the mirror shows it stored, so a write
// that did not commit (a conflict, the fleet still settling) is made by a
// later cycle rather than never.
func TestFellBehindUntilTold(t *testing.T) {
	queued := map[string]*wl{}
	for _, id := range []string{"a", "b", "c", "u"} {
		queued[id] = &wl{pb: &meridianv1.Workload{Id: id, Queue: "q", Status: &meridianv1.WorkloadStatus{PendingReasonCode: "NoFit"}}}
	}
	s := &state{queued: queued, cancelReq: map[string]*wl{}}
	why := func(q string) string { return scheduler.WindowReason(q, 3) }
	heads := func(ids ...string) *built {
		snap := &scheduler.Snapshot{}
		for _, id := range ids {
			snap.Pending = append(snap.Pending, &scheduler.Workload{ID: id, Queue: "q"})
		}
		return &built{snap: snap}
	}
	tm := &term{}
	now := time.Now()
	if out := fellBehind(tm, heads("a", "b", "c"), s, now, why); len(out) != 0 {
		t.Fatalf("first cycle: %v fell behind, want none", out)
	}
	if out := fellBehind(tm, heads("u", "a", "b"), s, now, why); len(out) != 1 || out["c"] != "q" {
		t.Fatalf("u arrived ahead: %v fell behind, want c", out)
	}
	// The write did not commit: c is still owed its reason.
	if out := fellBehind(tm, heads("u", "a", "b"), s, now, why); len(out) != 1 || out["c"] != "q" {
		t.Fatalf("after a write that did not commit: %v, want c again", out)
	}
	// Stored: nothing more is owed.
	queued["c"] = &wl{pb: &meridianv1.Workload{Id: "c", Queue: "q", Status: &meridianv1.WorkloadStatus{
		PendingReasonCode: scheduler.ReasonDeferred.String(), PendingReason: why("q")}}}
	if out := fellBehind(tm, heads("u", "a", "b"), s, now, why); len(out) != 0 || len(tm.behind) != 0 {
		t.Fatalf("after c was told: %v owed, %v kept", out, tm.behind)
	}
	// One that falls behind and comes back before it is told is owed nothing.
	if out := fellBehind(tm, heads("u", "a", "c"), s, now, why); len(out) != 1 || out["b"] != "q" {
		t.Fatalf("b fell behind: %v", out)
	}
	if out := fellBehind(tm, heads("a", "b", "c"), s, now, why); len(out) != 1 || out["u"] != "q" || tm.behind["b"] != "" {
		t.Fatalf("b back in the head, u out: %v owed, %v kept", out, tm.behind)
	}
}
