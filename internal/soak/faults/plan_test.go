package faults

import (
	"reflect"
	"testing"
	"time"
)

// A plan is the same for the same seed, brings every kind once per round,
// sizes pauses from the lease and the cluster timeout, and fits its span.
func TestPlan(t *testing.T) {
	c := PlanConfig{Seed: 42, Span: 10 * time.Minute, LeaderTTL: 3 * time.Second, ClusterTimeout: 15 * time.Second}
	p := Plan(c)
	if !reflect.DeepEqual(p, Plan(c)) {
		t.Fatal("two plans of one seed differ")
	}
	c2 := c
	c2.Seed = 43
	if reflect.DeepEqual(p, Plan(c2)) {
		t.Fatal("two seeds gave the same plan")
	}
	n := len(AllKinds())
	if len(p) < 2*n {
		t.Fatalf("%d faults in 10 minutes, want at least two rounds of %d", len(p), n)
	}
	seen := map[Kind]int{}
	for i, f := range p {
		if i < n {
			seen[f.Kind]++
		}
		if f.At+f.Budget() > c.Span {
			t.Errorf("fault %d (%s) ends after the span", i, f.Kind)
		}
		if i > 0 && f.At < p[i-1].At+p[i-1].Budget() {
			t.Errorf("fault %d (%s) starts before fault %d ends", i, f.Kind, i-1)
		}
		switch f.Kind {
		case HubPause:
			if f.Hold <= c.LeaderTTL {
				t.Errorf("pause of %s is not past the lease %s", f.Hold, c.LeaderTTL)
			}
		case AgentStopShort:
			if f.Hold >= c.ClusterTimeout {
				t.Errorf("short agent stop of %s reaches the cluster timeout", f.Hold)
			}
		case AgentStopLong, AgentCut:
			if f.Hold <= c.ClusterTimeout {
				t.Errorf("long agent stop of %s does not pass the cluster timeout", f.Hold)
			}
		}
	}
	if len(seen) != n {
		t.Fatalf("first round has kinds %v, want each of %v once", seen, AllKinds())
	}
	if got := Plan(PlanConfig{Seed: 1, Span: 5 * time.Second, LeaderTTL: time.Second, ClusterTimeout: 10 * time.Second}); len(got) != 0 {
		t.Fatalf("a 5 s span holds %d faults, want none", len(got))
	}
}
