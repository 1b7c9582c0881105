package scheduler

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The order of Snapshot.Running must not change the plan: the hub hands the
// core its running work straight from a map, without sorting 100,000
// entries every cycle. The property builds running work (by planning a
// first snapshot and running what it dispatched), marks some of it
// terminating, offers higher-priority work that must preempt, and compares
// the plans for two orders of Running.
func TestDecideIgnoresRunningOrder(t *testing.T) {
	preempted := 0
	defer func() {
		t.Logf("%d preemptions over the cases", preempted)
		if !t.Failed() && preempted == 0 {
			t.Fatalf("no case preempted anything; the property checked nothing")
		}
	}()
	rapid.Check(t, func(t *rapid.T) {
		s, _ := genSnapshot(t)
		first := Decide(s, DefaultConfig())
		clusters := deepCopyClusters(s.Clusters)
		for i := range clusters {
			clusters[i].LastSeen = t0.Add(3 * time.Minute) // fresh at the second decision
		}
		byCluster := map[string]*Cluster{}
		for i := range clusters {
			byCluster[clusters[i].ID] = &clusters[i]
		}
		byID := map[string]*Workload{}
		for _, w := range s.Pending {
			byID[w.ID] = w
		}
		var run []Running
		for _, d := range first.Dispatches {
			// Few distinct start times, so that ties are common.
			started := t0.Add(time.Duration(rapid.IntRange(0, 2).Draw(t, "started")) * time.Minute)
			r := running(byID[d.WorkloadID], byCluster[d.Cluster], d.Placement, started)
			r.Terminating = rapid.IntRange(0, 5).Draw(t, "terminating") == 0
			run = append(run, r)
		}
		var pending []*Workload
		// The same shapes again, some at a higher priority: they fit only
		// where running work makes room.
		for _, d := range first.Dispatches {
			cp := *byID[d.WorkloadID]
			cp.ID = fmt.Sprintf("hi-%s", cp.ID)
			cp.Priority += int32(rapid.IntRange(0, 3).Draw(t, "bump"))
			pending = append(pending, &cp)
		}
		second := &Snapshot{Now: t0.Add(3 * time.Minute), Queues: s.Queues, Clusters: clusters, Running: run, Pending: pending}
		perm := rapid.Permutation(run).Draw(t, "order")
		shuffled := *second
		shuffled.Running = perm
		a, b := Decide(second, DefaultConfig()), Decide(&shuffled, DefaultConfig())
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("the plan depends on the order of Running:\n%+v\n%+v", a, b)
		}
		preempted += len(a.Preemptions)
	})
}
