package scheduler

import (
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// headsOf is the test's own statement of the window: per queue, the first
// k non-nominated workloads by priority, then age, then id, and every
// nominated one.
func headsOf(pending []*Workload, k int) (heads []*Workload, behind map[string]bool) {
	byQ := map[string][]*Workload{}
	for _, w := range pending {
		if w.Nominated {
			heads = append(heads, w)
			continue
		}
		byQ[w.Queue] = append(byQ[w.Queue], w)
	}
	behind = map[string]bool{}
	for _, ws := range byQ {
		sort.Slice(ws, func(a, b int) bool {
			x, y := ws[a], ws[b]
			if x.Priority != y.Priority {
				return x.Priority > y.Priority
			}
			if !x.CreatedAt.Equal(y.CreatedAt) {
				return x.CreatedAt.Before(y.CreatedAt)
			}
			return x.ID < y.ID
		})
		for i, w := range ws {
			if i < k {
				heads = append(heads, w)
			} else {
				behind[w.ID] = true
			}
		}
	}
	// The caller's order of Pending must not matter either.
	sort.Slice(heads, func(a, b int) bool { return heads[a].ID > heads[b].ID })
	return heads, behind
}

// addLowPriorityWork fills some whole nodes with running priority -1
// work, so that preemption has victims.
func addLowPriorityWork(t *rapid.T, s *Snapshot) {
	n := 0
	for c := range s.Clusters {
		cl := &s.Clusters[c]
		for i := range cl.Nodes {
			gpus := len(cl.Nodes[i].Res.GPUs)
			if gpus == 0 || !rapid.Bool().Draw(t, "busy") {
				continue
			}
			full := make([]gpufit.GPU, gpus)
			for g := range full {
				full[g] = gpufit.GPU{FreeMilli: 1000, FreeMemMiB: 40960, TotalMemMiB: 40960}
			}
			cl.Nodes[i].Res.GPUs = full
			n++
			w := makeWorkload(fmt.Sprintf("run%02d", n), rapid.SampledFrom([]string{"t/a", "t/b", "t/c"}).Draw(t, "runq")).
				PodSet("main", 1, int32(gpus), 1000, cl.Nodes[i].Res.Class).Priority(-1).Obj()
			w.PodSets[0].Req.CPUMilli, w.PodSets[0].Req.MemMiB = 0, 0
			s.Running = append(s.Running, running(w, cl, wholeNode(cl.Nodes[i].Name, gpus), t0.Add(-time.Hour)))
		}
	}
}

// TestWindowKeepsThePlanOfTheHeads is the window's contract: with a budget
// of k, handing the core only the first k workloads of each queue (and the
// nominated ones) gives the same dispatches, preemptions and reasons for
// them as handing it the whole backlog, and the whole-backlog plan pends
// the rest with the window's reason.
func TestWindowKeepsThePlanOfTheHeads(t *testing.T) {
	var cut, dispatched, preempted int
	defer func() {
		if !t.Failed() && (cut == 0 || dispatched == 0 || preempted == 0) {
			t.Fatalf("vacuous: %d workloads cut, %d dispatched, %d preempted over all runs", cut, dispatched, preempted)
		}
	}()
	rapid.Check(t, func(t *rapid.T) {
		s, _ := genSnapshot(t)
		addLowPriorityWork(t, s)
		for _, w := range s.Pending {
			w.Nominated = rapid.IntRange(0, 9).Draw(t, "nominated") == 0
		}
		k := rapid.IntRange(1, 4).Draw(t, "window")
		cfg := DefaultConfig()
		cfg.MaxConsidered = k
		full := Decide(s, cfg)

		heads, behind := headsOf(s.Pending, k)
		part := *s
		part.Pending = heads
		got := Decide(&part, cfg)

		cut += len(behind)
		dispatched += len(full.Dispatches)
		preempted += len(full.Preemptions)
		if !reflect.DeepEqual(full.Dispatches, got.Dispatches) {
			t.Fatalf("dispatches differ:\nwhole backlog %+v\nheads only    %+v", full.Dispatches, got.Dispatches)
		}
		if !reflect.DeepEqual(full.Preemptions, got.Preemptions) {
			t.Fatalf("preemptions differ:\nwhole backlog %+v\nheads only    %+v", full.Preemptions, got.Preemptions)
		}
		if full.Stats.Considered != got.Stats.Considered {
			t.Fatalf("considered %d with the whole backlog, %d with the heads", full.Stats.Considered, got.Stats.Considered)
		}
		reasons := map[string]Pending{}
		for _, pe := range got.Pending {
			reasons[pe.WorkloadID] = pe
		}
		for _, pe := range full.Pending {
			if behind[pe.WorkloadID] {
				var q string
				for _, w := range s.Pending {
					if w.ID == pe.WorkloadID {
						q = w.Queue
					}
				}
				if pe.Code != ReasonDeferred || pe.Reason != WindowReason(q, k) {
					t.Fatalf("%s behind the window: got %v %q", pe.WorkloadID, pe.Code, pe.Reason)
				}
				continue
			}
			if reasons[pe.WorkloadID] != pe {
				t.Fatalf("%s: whole backlog says %+v, heads only %+v", pe.WorkloadID, pe, reasons[pe.WorkloadID])
			}
		}
	})
}

// TestWindowOffKeepsEverything: without a budget nothing is cut.
func TestWindowOffKeepsEverything(t *testing.T) {
	c := makeCluster("c1").Nodes(1, 8, h100, 1, 1).Obj()
	var pending []*Workload
	for i := range 5 {
		pending = append(pending, makeWorkload(fmt.Sprintf("w%d", i), "t/a").PodSet("main", 1, 8, 1000, h100).Created(t0.Add(time.Duration(i)*time.Second)).Obj())
	}
	s := &Snapshot{Now: t0, Queues: queues(h100, map[string]int64{"a": 64}), Clusters: []Cluster{c}, Pending: pending}
	p := Decide(s, DefaultConfig())
	if len(p.Dispatches) != 1 {
		t.Fatalf("dispatches = %d, want 1", len(p.Dispatches))
	}
	for _, pe := range p.Pending {
		if pe.Code == ReasonDeferred {
			t.Fatalf("%s deferred with no budget set: %s", pe.WorkloadID, pe.Reason)
		}
	}
	cfg := DefaultConfig()
	cfg.MaxConsidered = 2
	p = Decide(s, cfg)
	deferred := 0
	for _, pe := range p.Pending {
		if pe.Code == ReasonDeferred {
			deferred++
			if want := WindowReason("t/a", 2); pe.Reason != want {
				t.Fatalf("reason %q, want %q", pe.Reason, want)
			}
		}
	}
	if deferred != 3 || len(p.Dispatches) != 1 || p.Dispatches[0].WorkloadID != "w0" {
		t.Fatalf("with a window of 2: %d deferred (want 3), dispatches %+v (want w0)", deferred, p.Dispatches)
	}
}
