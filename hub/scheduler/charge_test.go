package scheduler

import (
	"fmt"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// genRunning draws running work over the property snapshot's queues, with
// usage of one or two classes (zero, ordinary and out-of-range amounts
// included) and some of it terminating.
func genRunning(t *rapid.T, label string) Running {
	w := &Workload{ID: label, Queue: rapid.SampledFrom([]string{"t/a", "t/b", "t/c", "t", "gone"}).Draw(t, "rqueue")}
	r := Running{Workload: w, Cluster: "c0", StartedAt: t0, Terminating: rapid.IntRange(0, 4).Draw(t, "terminating") == 0}
	for n := rapid.IntRange(0, 2).Draw(t, "usages"); n > 0; n-- {
		milli := rapid.SampledFrom([]int64{0, 500, 1000, 4000, -1, quota.MaxMilli + 1}).Draw(t, "umilli")
		r.Usage = append(r.Usage, ClassMilli{Class: rapid.SampledFrom(propClasses).Draw(t, "uclass"), Milli: milli})
	}
	return r
}

// TestRunningChargeFollowsItsList: a RunningCharge kept entry by entry as
// a list is appended to and taken from (out of order, as the dispatch
// loop's dense list is) always equals the list summed afresh.
func TestRunningChargeFollowsItsList(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var list []Running
		kept := &RunningCharge{}
		for step := rapid.IntRange(1, 60).Draw(t, "steps"); step > 0; step-- {
			if len(list) > 0 && rapid.Bool().Draw(t, "remove") {
				i := rapid.IntRange(0, len(list)-1).Draw(t, "at")
				kept.Remove(&list[i])
				list[i] = list[len(list)-1]
				list = list[:len(list)-1]
			} else {
				r := genRunning(t, fmt.Sprintf("r%d", step))
				list = append(list, r)
				kept.Add(&list[len(list)-1])
			}
			if fresh := ChargeOf(list); !kept.Equal(fresh) || !fresh.Equal(kept) {
				t.Fatalf("after step %d the kept charge is %v, summed afresh %v", step, kept.sorted(), fresh.sorted())
			}
		}
		if len(list) == 0 && len(kept.sums) != 0 {
			t.Fatalf("an empty list keeps sums %v", kept.sorted())
		}
	})
}

// TestChargedNeverChangesAPlan: a plan decided with the running work's
// charge handed over (Snapshot.Charged) is the plan decided without it.
func TestChargedNeverChangesAPlan(t *testing.T) {
	withUsage := 0
	rapid.Check(t, func(t *rapid.T) {
		s, _ := genSnapshot(t)
		for i := rapid.IntRange(0, 12).Draw(t, "running"); i > 0; i-- {
			s.Running = append(s.Running, genRunning(t, fmt.Sprintf("run%02d", i)))
		}
		want := Decide(s, DefaultConfig())
		s.Charged = ChargeOf(s.Running)
		if got := Decide(s, DefaultConfig()); !reflect.DeepEqual(got, want) {
			t.Fatalf("with the charge handed over the plan is\n%+v\nwithout\n%+v", got, want)
		}
		if len(s.Charged.sums) > 0 {
			withUsage++
		}
	})
	if withUsage == 0 {
		t.Fatal("no drawn snapshot had running usage: the property checked nothing")
	}
}

// TestChargedIsWhatTheCoreCharges: the core charges the handed-over sums,
// not its own walk over Running. A queue whose nominal quota the sums say
// is in use gets nothing more, though its Running list (left empty here)
// says otherwise.
func TestChargedIsWhatTheCoreCharges(t *testing.T) {
	tree, err := quota.NewTree([]quota.QueueSpec{{Path: "t", Weight: 1}, {Path: "t/a", Weight: 1,
		Limits: map[string]quota.Limits{h100: {Nominal: 8000, BorrowLimit: 0, LendLimit: -1}}}})
	if err != nil {
		t.Fatal(err)
	}
	node := Node{Name: "n0", Res: gpufit.Node{Class: h100, CPUMilliFree: 64000, MemMiBFree: 1 << 20}}
	for g := 0; g < 8; g++ {
		node.Res.GPUs = append(node.Res.GPUs, gpufit.GPU{FreeMilli: 1000, FreeMemMiB: 81920, TotalMemMiB: 81920})
	}
	pending := &Workload{ID: "p", Queue: "t/a", CreatedAt: t0, PodSets: []PodSet{{Name: "m", Replicas: 1, Class: h100,
		Req: gpufit.Request{GPUs: 1, Milli: 1000, MemMiB: 1024}}}}
	s := &Snapshot{Now: t0, Queues: tree, Clusters: []Cluster{{ID: "c0", LastSeen: t0, Nodes: []Node{node}}}, Pending: []*Workload{pending}}
	if p := Decide(s, DefaultConfig()); len(p.Dispatches) != 1 {
		t.Fatalf("with nothing running, %d dispatches, want 1", len(p.Dispatches))
	}
	s.Charged = ChargeOf([]Running{{Workload: &Workload{ID: "r", Queue: "t/a"}, Usage: []ClassMilli{{Class: h100, Milli: 8000}}}})
	if p := Decide(s, DefaultConfig()); len(p.Dispatches) != 0 {
		t.Fatalf("with the queue's quota charged in full, %d dispatches, want 0", len(p.Dispatches))
	}
}
