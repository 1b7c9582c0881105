package scheduler

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/quota"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// renderPlan prints a plan in a stable, readable form for golden files.
func renderPlan(p *Plan) string {
	var b strings.Builder
	for _, d := range p.Dispatches {
		fmt.Fprintf(&b, "dispatch %s -> %s", d.WorkloadID, d.Cluster)
		if d.Borrowed {
			b.WriteString(" (borrowing)")
		}
		b.WriteString("\n")
		for _, pp := range d.Placement {
			var reps []string
			for _, r := range pp.Replicas {
				reps = append(reps, fmt.Sprintf("%s%v", r.Node, r.GPUs))
			}
			fmt.Fprintf(&b, "  %s: %s\n", pp.PodSet, strings.Join(reps, " "))
		}
	}
	for _, v := range p.Preemptions {
		fmt.Fprintf(&b, "preempt %s on %s for %s: %s\n", v.WorkloadID, v.Cluster, v.For, v.Reason)
	}
	pend := append([]Pending(nil), p.Pending...)
	sort.Slice(pend, func(a, b int) bool { return pend[a].WorkloadID < pend[b].WorkloadID })
	for _, pe := range pend {
		fmt.Fprintf(&b, "pending %s [%s]: %s\n", pe.WorkloadID, pe.Code, pe.Reason)
	}
	return b.String()
}

// goldenFederation is a small, varied federation used by the golden tests.
func goldenFederation() ([]Cluster, *quota.Tree) {
	clusters := []Cluster{
		makeCluster("us-east").Nodes(4, 8, h100, 2, 4).Label("region", "us").Obj(),
		makeCluster("us-west").Nodes(3, 8, a100, 0, 3).Label("region", "us").Obj(),
		makeCluster("eu-frac").Nodes(2, 4, a100, 0, 0).Modes(FracMPS, FracTimeSlice).Label("region", "eu").Obj(),
	}
	tree, err := quota.NewTree([]quota.QueueSpec{
		{Path: "research", Weight: 2},
		{Path: "research/vision", Weight: 1, Limits: map[string]quota.Limits{
			h100: {Nominal: 16000, BorrowLimit: 8000, LendLimit: -1}, a100: {Nominal: 8000, BorrowLimit: -1, LendLimit: -1}}},
		{Path: "research/speech", Weight: 1, Limits: map[string]quota.Limits{
			h100: {Nominal: 8000, BorrowLimit: 0, LendLimit: -1}, a100: {Nominal: 8000, BorrowLimit: -1, LendLimit: -1}}},
		{Path: "prod", Weight: 1},
		{Path: "prod/serving", Weight: 1, Limits: map[string]quota.Limits{
			a100: {Nominal: 16000, BorrowLimit: -1, LendLimit: 4000}}},
	})
	if err != nil {
		panic(err)
	}
	return clusters, tree
}

func TestGoldenPlans(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	clusters, tree := goldenFederation()
	pending := []*Workload{
		makeWorkload("gang-nvl", "research/vision").PodSet("worker", 2, 8, 1000, h100).Topology(TopologyNVLink).Created(at(1)).Obj(),
		makeWorkload("gang-too-big", "research/vision").PodSet("worker", 3, 8, 1000, h100).Topology(TopologyNVLink).Created(at(2)).Obj(),
		makeWorkload("over-limit", "research/speech").PodSet("main", 2, 8, 1000, h100).Created(at(3)).Obj(),
		makeWorkload("frac-a", "prod/serving").PodSet("main", 3, 1, 300, a100).Mode(FracMPS).Created(at(4)).Obj(),
		makeWorkload("frac-mig", "prod/serving").PodSet("main", 1, 1, 500, a100).Mode(FracMIG).Created(at(5)).Obj(),
		makeWorkload("eu-only", "prod/serving").PodSet("main", 1, 4, 1000, a100).Selector("region", "eu").Created(at(6)).Obj(),
		makeWorkload("elastic", "research/speech").PodSet("main", 4, 8, 1000, a100).Min(1).Created(at(7)).Obj(),
		makeWorkload("two-sets", "research/vision").PodSet("driver", 1, 0, 1000, "").PodSet("worker", 2, 4, 1000, a100).Created(at(8)).Obj(),
		makeWorkload("same-node", "research/vision").PodSet("main", 2, 4, 1000, h100).Topology(TopologySameNode).Created(at(9)).Obj(),
		makeWorkload("ghost", "research/nope").PodSet("main", 1, 1, 1000, h100).Obj(),
	}
	s := &Snapshot{Now: t0, Queues: tree, Clusters: clusters, Pending: pending}
	checkGolden(t, "plan_mixed.golden", renderPlan(Decide(s, DefaultConfig())))
}

func TestGoldenPreemption(t *testing.T) {
	clusters, tree := goldenFederation()
	east, west := &clusters[0], &clusters[1]
	// us-east: research/vision holds 24 H100s (nominal 16 + 8 borrowed from
	// research/speech); one node is free.
	low := makeWorkload("low-batch", "research/vision").PodSet("main", 1, 8, 1000, h100).Priority(1).Obj()
	pinned := makeWorkload("pinned", "research/vision").PodSet("main", 1, 8, 1000, h100).Priority(0).NonPreemptible().Obj()
	mid := makeWorkload("mid", "research/vision").PodSet("main", 1, 8, 1000, h100).Priority(5).Obj()
	// us-west: prod/serving fills every A100 with low-priority work.
	var run []Running
	run = append(run,
		running(low, east, wholeNode("us-east-n000", 8), t0.Add(time.Hour)),
		running(pinned, east, wholeNode("us-east-n001", 8), t0),
		running(mid, east, wholeNode("us-east-n002", 8), t0))
	for i, prio := range []int32{3, 1, 1} {
		w := makeWorkload(fmt.Sprintf("serve-%d", i), "prod/serving").PodSet("main", 1, 8, 1000, a100).Priority(prio).Obj()
		run = append(run, running(w, west, wholeNode(fmt.Sprintf("us-west-n%03d", i), 8), t0.Add(time.Duration(i)*time.Minute)))
	}
	pending := []*Workload{
		// within speech's nominal, but vision borrows the cohort's room: reclaim
		makeWorkload("urgent", "research/speech").PodSet("main", 1, 8, 1000, h100).Priority(10).Obj(),
		// beyond speech's own limit: no preemption can help
		makeWorkload("greedy", "research/speech").PodSet("main", 2, 8, 1000, h100).Priority(10).Created(t0.Add(time.Second)).Obj(),
		// no room in us-west: preempt the lowest-priority, newest serving job
		makeWorkload("hot-fix", "prod/serving").PodSet("main", 1, 8, 1000, a100).Priority(9).Obj(),
	}
	s := &Snapshot{Now: t0, Queues: tree, Clusters: clusters, Pending: pending, Running: run}
	checkGolden(t, "plan_preemption.golden", renderPlan(Decide(s, DefaultConfig())))
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run: go test ./hub/scheduler -run Golden -update)", err)
	}
	if got != string(want) {
		t.Fatalf("%s differs (rerun with -update if the change is intended)\n--- got\n%s--- want\n%s", name, got, want)
	}
}
