package scheduler

import (
	"strings"
	"testing"
	"time"
)

// EASY backfill onto nodes held for a starving gang: only work whose
// max_runtime ends before the gang's expected start may use them.
func TestBackfillOntoHeldNodes(t *testing.T) {
	cases := []struct {
		name      string
		bLimit    time.Duration // max_runtime of the 4-GPU job on node 1 (started at t0)
		small     time.Duration // max_runtime of the 4-GPU candidate
		backfills bool
	}{
		{"ends before the gang's start", 3 * time.Hour, 2 * time.Hour, true},
		{"ends exactly at the gang's start", 3 * time.Hour, 3 * time.Hour, true},
		{"ends after the gang's start", 3 * time.Hour, 4 * time.Hour, false},
		{"no max_runtime never backfills", 3 * time.Hour, 0, false},
		{"running work without an end: no expected start", 0, time.Hour, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Six busy 4-GPU nodes (they could never host an 8-GPU replica)
			// keep the hold within a quarter of the cluster.
			c := busy(makeCluster("east").Nodes(6, 4, h100, 0, 0).Nodes(2, 8, h100, 0, 0).Obj(), 6)
			a := makeWorkload("a", "t/other").PodSet("main", 1, 8, 1000, h100).Obj()
			a.MaxRuntime = 2 * time.Hour // started an hour ago: ends at t0+1h
			b := makeWorkload("b", "t/other").PodSet("main", 1, 4, 1000, h100).Obj()
			b.MaxRuntime = tc.bLimit // ends at t0+3h when set
			run := []Running{
				running(a, &c, wholeNode("east-n006", 8), t0.Add(-time.Hour)),
				running(b, &c, []PodSetPlacement{{PodSet: "main", Replicas: []ReplicaPlacement{{Node: "east-n007", GPUs: []int{0, 1, 2, 3}}}}}, t0),
			}
			gang := makeWorkload("gang", "t/a").PodSet("main", 2, 8, 1000, h100).Created(t0.Add(-time.Minute)).Obj()
			small := makeWorkload("small", "t/a").PodSet("main", 1, 4, 1000, h100).Obj()
			small.MaxRuntime = tc.small
			s := snapshot(queues(h100, map[string]int64{"a": 100, "other": 100}), []Cluster{c}, gang, small)
			s.Running = run
			p := Decide(s, DefaultConfig())
			if pe := pendingOf(p, "gang"); pe == nil || !strings.Contains(pe.Reason, "holding 2 nodes on east") {
				t.Fatalf("gang = %+v, want it waiting with 2 nodes held", pe)
			}
			if !tc.backfills {
				if len(p.Dispatches) != 0 {
					t.Fatalf("dispatched %+v onto held nodes", p.Dispatches)
				}
				return
			}
			if len(p.Dispatches) != 1 || p.Dispatches[0].WorkloadID != "small" {
				t.Fatalf("dispatches = %+v, want small backfilled", p.Dispatches)
			}
			d := p.Dispatches[0].Decision
			if d.Rule != RuleBackfill || !d.Shadow.Equal(t0.Add(3*time.Hour)) {
				t.Fatalf("decision = %+v, want backfill before the gang's start at t0+3h", d)
			}
			if !strings.Contains(d.Text(), "backfill: on east, its max_runtime ends before the held gang's expected start at 2026-11-30T15:00:00Z") {
				t.Fatalf("text = %q", d.Text())
			}
		})
	}
}
