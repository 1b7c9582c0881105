package scheduler

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/quota"
)

const h100 = "nvidia-h100-80gb"
const a100 = "nvidia-a100-40gb"

func snapshot(tree *quota.Tree, clusters []Cluster, pending ...*Workload) *Snapshot {
	return &Snapshot{Now: t0, Queues: tree, Clusters: clusters, Pending: pending}
}

func dispatchOf(p *Plan, id string) *Dispatch {
	for i := range p.Dispatches {
		if p.Dispatches[i].WorkloadID == id {
			return &p.Dispatches[i]
		}
	}
	return nil
}

func pendingOf(p *Plan, id string) *Pending {
	for i := range p.Pending {
		if p.Pending[i].WorkloadID == id {
			return &p.Pending[i]
		}
	}
	return nil
}

func replicas(d *Dispatch) int {
	n := 0
	for _, pp := range d.Placement {
		n += len(pp.Replicas)
	}
	return n
}

func TestPlanScenarios(t *testing.T) {
	big := map[string]int64{"a": 1000, "b": 1000}
	tests := []struct {
		name     string
		snap     *Snapshot
		dispatch map[string]string // workload -> cluster ("" = must stay pending)
		reason   map[string]string // workload -> substring of its pending reason
		check    func(t *testing.T, p *Plan)
	}{
		{
			name: "gang goes whole to the one cluster that can hold it",
			snap: snapshot(queues(h100, big), []Cluster{
				makeCluster("east").Nodes(2, 8, h100, 0, 0).Obj(),
				makeCluster("west").Nodes(4, 8, h100, 0, 0).Obj(),
			}, makeWorkload("g", "t/a").PodSet("main", 3, 8, 1000, h100).Obj()),
			dispatch: map[string]string{"g": "west"},
			check: func(t *testing.T, p *Plan) {
				if n := replicas(dispatchOf(p, "g")); n != 3 {
					t.Fatalf("gang got %d replicas, want 3", n)
				}
			},
		},
		{
			name: "gang that fits nowhere whole is not split across clusters",
			snap: snapshot(queues(h100, big), []Cluster{
				busy(makeCluster("east").Nodes(4, 8, h100, 0, 0).Obj(), 2),
				busy(makeCluster("west").Nodes(4, 8, h100, 0, 0).Obj(), 2),
			}, makeWorkload("g", "t/a").PodSet("main", 3, 8, 1000, h100).Obj()),
			dispatch: map[string]string{"g": ""},
			reason:   map[string]string{"g": "no cluster has 3 nodes with 8 free nvidia-h100-80gb GPUs; closest: east (2 of 3)"},
		},
		{
			name: "NVLink constraint needs one domain",
			snap: snapshot(queues(h100, big), []Cluster{
				makeCluster("east").Nodes(4, 8, h100, 2, 0).Obj(),
			}, makeWorkload("g", "t/a").PodSet("main", 3, 8, 1000, h100).Topology(TopologyNVLink).Obj()),
			dispatch: map[string]string{"g": ""},
			reason:   map[string]string{"g": "can never fit: the largest NVLink domain of nvidia-h100-80gb has 16 GPUs, pod set main needs 24 GPUs in one NVLink domain"},
		},
		{
			name: "rack constraint keeps replicas in one rack",
			snap: snapshot(queues(h100, big), []Cluster{
				makeCluster("east").Nodes(6, 8, h100, 0, 3).Obj(),
			}, makeWorkload("g", "t/a").PodSet("main", 3, 8, 1000, h100).Topology(TopologyRack).Obj()),
			dispatch: map[string]string{"g": "east"},
			check: func(t *testing.T, p *Plan) {
				rackOf := map[string]string{}
				for _, n := range makeCluster("east").Nodes(6, 8, h100, 0, 3).Obj().Nodes {
					rackOf[n.Name] = n.Rack
				}
				racks := map[string]bool{}
				for _, r := range dispatchOf(p, "g").Placement[0].Replicas {
					racks[rackOf[r.Node]] = true
				}
				if len(racks) != 1 {
					t.Fatalf("replicas span racks %v, want one", racks)
				}
			},
		},
		{
			name: "same-node pod set lands on one node",
			snap: snapshot(queues(h100, big), []Cluster{
				makeCluster("east").Nodes(2, 8, h100, 0, 0).Obj(),
			}, makeWorkload("g", "t/a").PodSet("main", 4, 2, 1000, h100).Topology(TopologySameNode).Obj()),
			dispatch: map[string]string{"g": "east"},
			check: func(t *testing.T, p *Plan) {
				nodes := map[string]bool{}
				for _, r := range dispatchOf(p, "g").Placement[0].Replicas {
					nodes[r.Node] = true
				}
				if len(nodes) != 1 {
					t.Fatalf("same-node pod set spans %d nodes", len(nodes))
				}
			},
		},
		{
			name: "quota limit keeps the third gang pending with a quota reason",
			snap: snapshot(func() *quota.Tree {
				tr, _ := quota.NewTree([]quota.QueueSpec{{Path: "research", Weight: 1}, {Path: "research/vision", Weight: 1,
					Limits: map[string]quota.Limits{h100: {Nominal: 16000, BorrowLimit: 0, LendLimit: -1}}}})
				return tr
			}(), []Cluster{makeCluster("east").Nodes(8, 8, h100, 0, 0).Obj()},
				makeWorkload("w1", "research/vision").PodSet("main", 1, 8, 1000, h100).Obj(),
				makeWorkload("w2", "research/vision").PodSet("main", 1, 8, 1000, h100).Created(t0.Add(time.Second)).Obj(),
				makeWorkload("w3", "research/vision").PodSet("main", 1, 8, 1000, h100).Created(t0.Add(2*time.Second)).Obj()),
			dispatch: map[string]string{"w1": "east", "w2": "east", "w3": ""},
			reason:   map[string]string{"w3": "research/vision"},
			check: func(t *testing.T, p *Plan) {
				if p.Pending[0].Code != ReasonQuota {
					t.Fatalf("code %v, want QuotaExceeded", p.Pending[0].Code)
				}
			},
		},
		{
			name: "fractional request needs a cluster that serves its mode",
			snap: snapshot(queues(a100, big), []Cluster{
				makeCluster("plain").Nodes(2, 8, a100, 0, 0).Obj(),
				makeCluster("mps").Nodes(2, 8, a100, 0, 0).Modes(FracMPS).Obj(),
			}, makeWorkload("f", "t/a").PodSet("main", 1, 1, 250, a100).Mode(FracMPS).Obj()),
			dispatch: map[string]string{"f": "mps"},
		},
		{
			name: "fractional mode nobody serves names the filter",
			snap: snapshot(queues(a100, big), []Cluster{
				makeCluster("plain").Nodes(2, 8, a100, 0, 0).Modes(FracMPS).Obj(),
			}, makeWorkload("f", "t/a").PodSet("main", 1, 1, 250, a100).Mode(FracMIG).Obj()),
			dispatch: map[string]string{"f": ""},
			reason:   map[string]string{"f": "can never fit: no registered cluster serves fractional mode mig"},
		},
		{
			name: "fractional pods share a GPU instead of taking whole ones",
			snap: snapshot(queues(a100, big), []Cluster{
				makeCluster("mps").Nodes(1, 2, a100, 0, 0).Modes(FracMPS).Obj(),
			},
				makeWorkload("f1", "t/a").PodSet("main", 1, 1, 500, a100).Obj(),
				makeWorkload("f2", "t/a").PodSet("main", 1, 1, 500, a100).Created(t0.Add(time.Second)).Obj(),
				makeWorkload("whole", "t/b").PodSet("main", 1, 1, 1000, a100).Created(t0.Add(2*time.Second)).Obj()),
			dispatch: map[string]string{"f1": "mps", "f2": "mps", "whole": "mps"},
		},
		{
			name: "elastic pod set takes what fits between min and max",
			snap: snapshot(queues(h100, big), []Cluster{
				makeCluster("east").Nodes(3, 8, h100, 0, 0).Obj(),
			}, makeWorkload("e", "t/a").PodSet("main", 5, 8, 1000, h100).Min(2).Obj()),
			dispatch: map[string]string{"e": "east"},
			check: func(t *testing.T, p *Plan) {
				if n := replicas(dispatchOf(p, "e")); n != 3 {
					t.Fatalf("elastic got %d replicas, want 3", n)
				}
			},
		},
		{
			name: "stale, lost and draining clusters are skipped",
			snap: snapshot(queues(h100, big), []Cluster{
				makeCluster("stale").Nodes(2, 8, h100, 0, 0).Seen(t0.Add(-time.Hour)).Obj(),
				makeCluster("lost").Nodes(2, 8, h100, 0, 0).State(ClusterLost).Obj(),
				makeCluster("drain").Nodes(2, 8, h100, 0, 0).State(ClusterDraining).Obj(),
			}, makeWorkload("w", "t/a").PodSet("main", 1, 8, 1000, h100).Obj()),
			dispatch: map[string]string{"w": ""},
			reason:   map[string]string{"w": "1 draining, 1 lost, 1 stale"},
		},
		{
			name: "selector and avoid list pick the cluster",
			snap: snapshot(queues(h100, big), []Cluster{
				makeCluster("a").Nodes(2, 8, h100, 0, 0).Label("zone", "eu").Obj(),
				makeCluster("b").Nodes(2, 8, h100, 0, 0).Label("zone", "us").Obj(),
				makeCluster("c").Nodes(2, 8, h100, 0, 0).Label("zone", "us").Obj(),
			}, makeWorkload("w", "t/a").PodSet("main", 1, 8, 1000, h100).Selector("zone", "us").Avoid("b").Obj()),
			dispatch: map[string]string{"w": "c"},
		},
		{
			name: "unknown queue is pending with a reason, not an error",
			snap: snapshot(queues(h100, big), []Cluster{makeCluster("a").Nodes(1, 8, h100, 0, 0).Obj()},
				makeWorkload("w", "t/nope").PodSet("main", 1, 1, 1000, h100).Obj()),
			dispatch: map[string]string{"w": ""},
			reason:   map[string]string{"w": `queue "t/nope" does not exist`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Decide(tc.snap, DefaultConfig())
			for id, want := range tc.dispatch {
				d := dispatchOf(p, id)
				switch {
				case want == "" && d != nil:
					t.Fatalf("%s dispatched to %s, want pending", id, d.Cluster)
				case want != "" && d == nil:
					t.Fatalf("%s pending (%+v), want dispatch to %s", id, pendingOf(p, id), want)
				case want != "" && d.Cluster != want:
					t.Fatalf("%s dispatched to %s, want %s", id, d.Cluster, want)
				}
			}
			for id, want := range tc.reason {
				pe := pendingOf(p, id)
				if pe == nil || !strings.Contains(pe.Reason, want) {
					t.Fatalf("%s reason = %+v, want it to contain %q", id, pe, want)
				}
			}
			if tc.check != nil {
				tc.check(t, p)
			}
			if len(p.Dispatches)+len(p.Pending) != len(tc.snap.Pending) {
				t.Fatalf("%d dispatched + %d pending != %d submitted", len(p.Dispatches), len(p.Pending), len(tc.snap.Pending))
			}
		})
	}
}

func TestPriorityPreemptionPicksMinimalVictims(t *testing.T) {
	c := makeCluster("east").Nodes(2, 8, h100, 0, 0).Obj()
	low1 := makeWorkload("low1", "t/a").PodSet("main", 1, 8, 1000, h100).Priority(1).Obj()
	low2 := makeWorkload("low2", "t/a").PodSet("main", 1, 8, 1000, h100).Priority(2).Obj()
	run := []Running{
		running(low1, &c, wholeNode("east-n000", 8), t0),
		running(low2, &c, wholeNode("east-n001", 8), t0),
	}
	high := makeWorkload("high", "t/a").PodSet("main", 1, 8, 1000, h100).Priority(10).Obj()
	s := snapshot(queues(h100, map[string]int64{"a": 100}), []Cluster{c}, high)
	s.Running = run
	p := Decide(s, DefaultConfig())
	if len(p.Preemptions) != 1 || p.Preemptions[0].WorkloadID != "low1" {
		t.Fatalf("preemptions = %+v, want exactly low1 (lowest priority)", p.Preemptions)
	}
	if p.Preemptions[0].For != "high" {
		t.Fatalf("preemption of low1 is for %q, want high", p.Preemptions[0].For)
	}
	if r := p.Preemptions[0].Rule; r != PreemptPriority || r.String() != "priority" {
		t.Fatalf("preemption rule = %v, want priority", r)
	}
	// Both reasons reach their owners, who may be other tenants: neither
	// names the other side.
	if pe := pendingOf(p, "high"); pe == nil || pe.Code != ReasonPreempting || strings.Contains(pe.Reason, "low1") {
		t.Fatalf("high pending = %+v, want WaitingForPreemption that does not name low1", pe)
	}
	if regexp.MustCompile(`\bhigh\b`).MatchString(p.Preemptions[0].Reason) {
		t.Fatalf("the victim's reason %q names the workload it makes room for", p.Preemptions[0].Reason)
	}
}

func TestPreemptionNeverTakesNonPreemptibleOrEqualPriority(t *testing.T) {
	c := makeCluster("east").Nodes(2, 8, h100, 0, 0).Obj()
	pinned := makeWorkload("pinned", "t/a").PodSet("main", 1, 8, 1000, h100).Priority(1).NonPreemptible().Obj()
	peer := makeWorkload("peer", "t/a").PodSet("main", 1, 8, 1000, h100).Priority(10).Obj()
	s := snapshot(queues(h100, map[string]int64{"a": 100}), []Cluster{c},
		makeWorkload("high", "t/a").PodSet("main", 1, 8, 1000, h100).Priority(10).Obj())
	s.Running = []Running{running(pinned, &c, wholeNode("east-n000", 8), t0), running(peer, &c, wholeNode("east-n001", 8), t0)}
	s.Clusters = []Cluster{c}
	p := Decide(s, DefaultConfig())
	if len(p.Preemptions) != 0 {
		t.Fatalf("preempted %+v; non-preemptible and equal-priority work must be left alone", p.Preemptions)
	}
}

func TestGangPreemptedWhole(t *testing.T) {
	c := makeCluster("east").Nodes(2, 8, h100, 0, 0).Obj()
	gang := makeWorkload("gang", "t/a").PodSet("main", 2, 4, 1000, h100).Priority(1).Obj()
	pl := []PodSetPlacement{{PodSet: "main", Replicas: []ReplicaPlacement{{Node: "east-n000", GPUs: []int{0, 1, 2, 3}}, {Node: "east-n001", GPUs: []int{0, 1, 2, 3}}}}}
	filler := makeWorkload("filler", "t/a").PodSet("main", 2, 4, 1000, h100).Priority(5).Obj()
	pl2 := []PodSetPlacement{{PodSet: "main", Replicas: []ReplicaPlacement{{Node: "east-n000", GPUs: []int{4, 5, 6, 7}}, {Node: "east-n001", GPUs: []int{4, 5, 6, 7}}}}}
	s := snapshot(queues(h100, map[string]int64{"a": 100}), nil,
		makeWorkload("high", "t/a").PodSet("main", 1, 8, 1000, h100).Priority(10).Obj())
	s.Running = []Running{running(gang, &c, pl, t0), running(filler, &c, pl2, t0)}
	s.Clusters = []Cluster{c}
	p := Decide(s, DefaultConfig())
	// One 8-GPU node needs both gangs gone from it; each victim is a whole gang.
	got := map[string]bool{}
	for _, v := range p.Preemptions {
		got[v.WorkloadID] = true
	}
	if !got["gang"] || !got["filler"] || len(p.Preemptions) != 2 {
		t.Fatalf("preemptions = %+v, want both whole gangs", p.Preemptions)
	}
}

func TestQuotaReclaimPreemptsBorrower(t *testing.T) {
	tree, err := quota.NewTree([]quota.QueueSpec{
		{Path: "t", Weight: 1},
		{Path: "t/lender", Weight: 1, Limits: map[string]quota.Limits{h100: {Nominal: 8000, BorrowLimit: 0, LendLimit: -1}}},
		{Path: "t/borrower", Weight: 1, Limits: map[string]quota.Limits{h100: {Nominal: 8000, BorrowLimit: -1, LendLimit: -1}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := makeCluster("east").Nodes(2, 8, h100, 0, 0).Obj()
	b1 := makeWorkload("b1", "t/borrower").PodSet("main", 1, 8, 1000, h100).Priority(100).Obj()
	b2 := makeWorkload("b2", "t/borrower").PodSet("main", 1, 8, 1000, h100).Priority(100).Obj()
	s := snapshot(tree, nil, makeWorkload("mine", "t/lender").PodSet("main", 1, 8, 1000, h100).Priority(0).Obj())
	s.Running = []Running{running(b1, &c, wholeNode("east-n000", 8), t0), running(b2, &c, wholeNode("east-n001", 8), t0.Add(time.Minute))}
	s.Clusters = []Cluster{c}
	p := Decide(s, DefaultConfig())
	if len(p.Preemptions) != 1 || p.Preemptions[0].WorkloadID != "b2" {
		t.Fatalf("preemptions = %+v, want the newest borrower b2 reclaimed", p.Preemptions)
	}
	if !strings.Contains(p.Preemptions[0].Reason, "reclaimed") {
		t.Fatalf("reason %q should say reclaimed", p.Preemptions[0].Reason)
	}
	if r := p.Preemptions[0].Rule; r != PreemptReclaim || r.String() != "reclaim" {
		t.Fatalf("preemption rule = %v, want reclaim", r)
	}
}

func TestFairshareSplitsByWeight(t *testing.T) {
	tree, err := quota.NewTree([]quota.QueueSpec{
		// The team pool is the tenant's; neither project owns any of it, so
		// weights alone split it.
		{Path: "t", Weight: 1, Limits: map[string]quota.Limits{h100: {Nominal: 32000, BorrowLimit: 0, LendLimit: -1}}},
		{Path: "t/small", Weight: 1, Limits: map[string]quota.Limits{h100: {Nominal: 0, BorrowLimit: -1, LendLimit: -1}}},
		{Path: "t/large", Weight: 3, Limits: map[string]quota.Limits{h100: {Nominal: 0, BorrowLimit: -1, LendLimit: -1}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var pend []*Workload
	for i := 0; i < 8; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		pend = append(pend,
			makeWorkload("s"+string(rune('0'+i)), "t/small").PodSet("main", 1, 8, 1000, h100).Created(at).Obj(),
			makeWorkload("l"+string(rune('0'+i)), "t/large").PodSet("main", 1, 8, 1000, h100).Created(at).Obj())
	}
	s := snapshot(tree, []Cluster{makeCluster("east").Nodes(4, 8, h100, 0, 0).Obj()}, pend...)
	p := Decide(s, DefaultConfig())
	counts := map[byte]int{}
	for _, d := range p.Dispatches {
		counts[d.WorkloadID[0]]++
	}
	if counts['l'] != 3 || counts['s'] != 1 {
		t.Fatalf("dispatched large=%d small=%d, want 3:1 by weight", counts['l'], counts['s'])
	}
}

func TestPlanIsDeterministicAndDoesNotMutateSnapshot(t *testing.T) {
	c1 := makeCluster("east").Nodes(3, 8, h100, 2, 0).Obj()
	c2 := makeCluster("west").Nodes(3, 4, h100, 0, 0).Modes(FracMPS).Obj()
	var pend []*Workload
	for i := 0; i < 20; i++ {
		pend = append(pend, makeWorkload("w"+string(rune('a'+i)), []string{"t/a", "t/b"}[i%2]).
			PodSet("main", int32(1+i%3), int32(1+i%4), 1000, h100).Created(t0.Add(time.Duration(i)*time.Second)).Obj())
	}
	s := snapshot(queues(h100, map[string]int64{"a": 20, "b": 10}), []Cluster{c1, c2}, pend...)
	before := deepCopyClusters(s.Clusters)
	p1 := Decide(s, DefaultConfig())
	p2 := Decide(s, DefaultConfig())
	if !reflect.DeepEqual(p1, p2) {
		t.Fatalf("two plans of one snapshot differ:\n%+v\n%+v", p1, p2)
	}
	if !reflect.DeepEqual(before, s.Clusters) {
		t.Fatal("Plan mutated the snapshot's clusters")
	}
	if len(p1.Dispatches) == 0 {
		t.Fatal("expected some dispatches")
	}
}

func deepCopyClusters(cs []Cluster) []Cluster {
	out := make([]Cluster, len(cs))
	for i, c := range cs {
		out[i] = c
		out[i].Nodes = make([]Node, len(c.Nodes))
		for j, n := range c.Nodes {
			out[i].Nodes[j] = n
			out[i].Nodes[j].Res = n.Res.Clone()
		}
	}
	return out
}

// With NominalFirst, work a queue is owed (within its nominal quota) is
// admitted before work that borrows, whatever the fairshare order says.
func TestNominalWorkBeforeBorrowing(t *testing.T) {
	tree, err := quota.NewTree([]quota.QueueSpec{
		{Path: "t", Weight: 1},
		{Path: "t/owner", Weight: 1, Limits: map[string]quota.Limits{h100: {Nominal: 8000, BorrowLimit: -1, LendLimit: -1}}},
		{Path: "t/guest", Weight: 100, Limits: map[string]quota.Limits{h100: {Nominal: 8000, BorrowLimit: -1, LendLimit: -1}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := makeCluster("east").Nodes(2, 8, h100, 0, 0).Obj()
	s := snapshot(tree, []Cluster{c},
		makeWorkload("guest-1", "t/guest").PodSet("main", 1, 8, 1000, h100).Obj(),
		makeWorkload("guest-2", "t/guest").PodSet("main", 1, 8, 1000, h100).Created(t0.Add(time.Second)).Obj(),
		makeWorkload("owner-1", "t/owner").PodSet("main", 1, 8, 1000, h100).Created(t0.Add(time.Hour)).Obj())
	cfg := DefaultConfig()
	cfg.NominalFirst = true
	p := Decide(s, cfg)
	if dispatchOf(p, "owner-1") == nil || dispatchOf(p, "guest-1") == nil || dispatchOf(p, "guest-2") != nil {
		t.Fatalf("dispatches %+v; want owner-1 and guest-1 within their nominal, guest-2 (borrowing) waiting", p.Dispatches)
	}
}

func TestNominatedWorkloadGoesFirst(t *testing.T) {
	c := makeCluster("east").Nodes(1, 8, h100, 0, 0).Obj()
	first := makeWorkload("early", "t/a").PodSet("main", 1, 8, 1000, h100).Priority(50).Obj()
	nominated := makeWorkload("nominee", "t/b").PodSet("main", 1, 8, 1000, h100).Created(t0.Add(time.Hour)).Obj()
	nominated.Nominated = true
	s := snapshot(queues(h100, map[string]int64{"a": 8, "b": 8}), []Cluster{c}, first, nominated)
	p := Decide(s, DefaultConfig())
	if d := dispatchOf(p, "nominee"); d == nil {
		t.Fatalf("the nominated workload did not get the room it preempted for: %+v", p)
	}
}

func TestWorkAlreadyStoppingIsWaitedForNotPreemptedAgain(t *testing.T) {
	c := makeCluster("east").Nodes(2, 8, h100, 0, 0).Obj()
	low1 := makeWorkload("low1", "t/a").PodSet("main", 1, 8, 1000, h100).Priority(1).Obj()
	low2 := makeWorkload("low2", "t/a").PodSet("main", 1, 8, 1000, h100).Priority(1).Obj()
	run := []Running{
		running(low1, &c, wholeNode("east-n000", 8), t0),
		running(low2, &c, wholeNode("east-n001", 8), t0),
	}
	run[0].Terminating = true // preempted in an earlier cycle, not gone yet
	s := snapshot(queues(h100, map[string]int64{"a": 100}), []Cluster{c},
		makeWorkload("high", "t/a").PodSet("main", 1, 8, 1000, h100).Priority(10).Obj())
	s.Running = run
	p := Decide(s, DefaultConfig())
	if len(p.Preemptions) != 0 {
		t.Fatalf("preempted %+v again; the room of low1 is already on its way", p.Preemptions)
	}
	if pe := pendingOf(p, "high"); pe == nil || pe.Code != ReasonPreempting || !strings.Contains(pe.Reason, "already") && !strings.Contains(pe.Reason, "stop") {
		t.Fatalf("high = %+v, want it waiting for the stopping work", pe)
	}
	// A second urgent workload needs a second victim: low2, never low1.
	s.Pending = append(s.Pending, makeWorkload("high2", "t/a").PodSet("main", 1, 8, 1000, h100).Priority(10).Created(t0.Add(time.Second)).Obj())
	p = Decide(s, DefaultConfig())
	for _, v := range p.Preemptions {
		if v.WorkloadID == "low1" {
			t.Fatalf("low1 is already stopping and was chosen again: %+v", p.Preemptions)
		}
	}
}
