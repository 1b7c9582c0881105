package scheduler

import (
	"strings"
	"testing"
)

// Work that is stopping (a preemption or cancel in flight, or work the hub
// saw stop before its cluster advertised the room) is waited for only by a
// workload that could preempt on that cluster. A workload with no such
// right just does not fit yet: it stays NoFit, so it is never made a
// preemptor (nominated) for room that fair order hands out once it is free.
func TestOnlyAPreemptorWaitsForStoppingWork(t *testing.T) {
	c := makeCluster("east").Nodes(1, 8, h100, 0, 0).Obj()
	done := makeWorkload("done", "t/a").PodSet("main", 1, 8, 1000, h100).Obj()
	done.Preemptible = true
	run := []Running{running(done, &c, wholeNode("east-n000", 8), t0)}
	run[0].Terminating = true
	run[0].Usage = nil // stopped: its quota is already released

	for _, tc := range []struct {
		name     string
		priority int32
		wait     bool
	}{
		{"equal priority: not a preemptor", 0, false},
		{"higher priority: waits for the room", 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := makeWorkload("next", "t/a").PodSet("main", 1, 8, 1000, h100).Priority(tc.priority).Obj()
			s := snapshot(queues(h100, map[string]int64{"a": 100}), []Cluster{c}, w)
			s.Running = run
			p := Decide(s, DefaultConfig())
			if len(p.Preemptions) != 0 || len(p.Dispatches) != 0 {
				t.Fatalf("plan %+v; want nothing preempted or dispatched while the room is not advertised", p)
			}
			pe := pendingOf(p, "next")
			if pe == nil {
				t.Fatalf("next is not pending: %+v", p)
			}
			if tc.wait && (pe.Code != ReasonPreempting || !strings.Contains(pe.Reason, "to stop on east")) {
				t.Fatalf("next = %+v, want it waiting for the stopping work on east", pe)
			}
			if !tc.wait && pe.Code != ReasonNoFit {
				t.Fatalf("next = %+v, want NoFit: it may preempt nothing here", pe)
			}
		})
	}
}
