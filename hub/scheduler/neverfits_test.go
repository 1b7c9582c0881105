package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// Whole GPUs with gpu_memory_mib ask for GPUs with that much memory each;
// they are not a fractional request and need no sharing mode.
func TestWholeGPUsWithMemory(t *testing.T) {
	fed := func() []Cluster {
		return []Cluster{
			makeCluster("a100-1").Nodes(2, 8, a100, 0, 0).Modes(FracMPS).Obj(),
			makeCluster("a100-2").Nodes(2, 8, a100, 0, 0).Modes(FracMPS).Obj(),
			makeCluster("h100").Nodes(2, 8, h100, 0, 0).Obj(), // no sharing modes
		}
	}
	tree := func() *quota.Tree {
		tr, err := quota.NewTree([]quota.QueueSpec{{Path: "t", Weight: 1}, {Path: "t/a", Weight: 1, Limits: map[string]quota.Limits{
			h100: {Nominal: 1000_000, BorrowLimit: -1, LendLimit: -1}, a100: {Nominal: 1000_000, BorrowLimit: -1, LendLimit: -1}}}})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	tests := []struct {
		name     string
		clusters []Cluster
		w        *Workload
		cluster  string // "" for pending
		code     ReasonCode
		reason   string
	}{
		{
			name:     "8 whole H100s with 80 GiB each go to the cluster without sharing modes",
			clusters: fed(),
			w:        makeWorkload("w", "t/a").PodSet("main", 1, 8, 1000, h100).GPUMem(81920).Obj(),
			cluster:  "h100",
		},
		{
			name:     "one whole GPU with memory needs no mode either",
			clusters: fed(),
			w:        makeWorkload("w", "t/a").PodSet("main", 2, 1, 1000, h100).GPUMem(40000).Obj(),
			cluster:  "h100",
		},
		{
			name: "only GPUs with at least that much memory match",
			clusters: []Cluster{
				memNodes(makeCluster("small").Nodes(2, 8, h100, 0, 0).Obj(), 40960),
				makeCluster("large").Nodes(2, 8, h100, 0, 0).Obj(),
			},
			w:       makeWorkload("w", "t/a").PodSet("main", 1, 8, 1000, h100).GPUMem(81920).Obj(),
			cluster: "large",
		},
		{
			name:     "more memory per GPU than any GPU has never fits",
			clusters: fed(),
			w:        makeWorkload("w", "t/a").PodSet("main", 1, 8, 1000, h100).GPUMem(81921).Obj(),
			code:     ReasonNeverFits,
			reason:   "can never fit: on h100, the nvidia-h100-80gb GPUs have at most 81920 MiB of memory each, pod set main needs 81921 MiB per GPU; the other clusters have no nvidia-h100-80gb GPUs",
		},
		{
			name:     "a memory slice of one GPU is still fractional",
			clusters: fed(),
			w:        makeWorkload("w", "t/a").PodSet("main", 1, 1, 1, h100).GPUMem(20000).Obj(),
			code:     ReasonNeverFits,
			reason:   "can never fit: on h100, GPUs are not shared (no fractional mode); the other clusters have no nvidia-h100-80gb GPUs",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Decide(snapshot(tree(), tc.clusters, tc.w), DefaultConfig())
			if tc.cluster != "" {
				if d := dispatchOf(p, "w"); d == nil || d.Cluster != tc.cluster {
					t.Fatalf("dispatch = %+v, pending %+v; want dispatch to %s", d, pendingOf(p, "w"), tc.cluster)
				}
				return
			}
			pe := pendingOf(p, "w")
			if pe == nil || pe.Code != tc.code || pe.Reason != tc.reason {
				t.Fatalf("pending = %+v\nwant [%v] %q", pe, tc.code, tc.reason)
			}
		})
	}
}

// A workload that no registered cluster or quota could ever hold waits
// with NeverFits and a specific reason, never with a quota reason that
// suggests waiting helps.
func TestNeverFits(t *testing.T) {
	milli := func(gpus int64) int64 {
		if gpus < 0 {
			return quota.Unlimited
		}
		return gpus * 1000
	}
	limits := func(leafNom, leafBorrow, teamNom, teamBorrow int64) *quota.Tree {
		tr, err := quota.NewTree([]quota.QueueSpec{
			{Path: "acme", Weight: 1},
			{Path: "acme/vision", Weight: 1, Limits: map[string]quota.Limits{h100: {Nominal: milli(teamNom), BorrowLimit: milli(teamBorrow), LendLimit: -1}}},
			{Path: "acme/vision/train", Weight: 1, Limits: map[string]quota.Limits{h100: {Nominal: milli(leafNom), BorrowLimit: milli(leafBorrow), LendLimit: -1}}},
			{Path: "acme/vision/eval", Weight: 1, Limits: map[string]quota.Limits{h100: {Nominal: 8000, BorrowLimit: -1, LendLimit: -1}}},
			{Path: "acme/nlp", Weight: 1, Limits: map[string]quota.Limits{a100: {Nominal: 16000, BorrowLimit: -1, LendLimit: -1}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	roomy := limits(1000, -1, 1000, -1)
	tests := []struct {
		name     string
		tree     *quota.Tree
		clusters []Cluster
		running  func(cs []Cluster) []Running
		w        *Workload
		code     ReasonCode
		reason   string // exact when it starts with "can never fit", else a substring
	}{
		{
			name:     "a replica needs more GPUs than the largest node of its class, and quota is short too",
			tree:     limits(8, 0, 16, 0),
			clusters: []Cluster{makeCluster("east").Nodes(4, 4, a100, 0, 0).Obj(), makeCluster("west").Nodes(4, 8, h100, 0, 0).Obj()},
			w:        makeWorkload("w", "acme/nlp").PodSet("worker", 10000, 8, 1000, a100).Obj(),
			code:     ReasonNeverFits,
			reason:   "can never fit: on east, the largest node of nvidia-a100-40gb has 4 GPUs, a replica of pod set worker needs 8; the other clusters have no nvidia-a100-40gb GPUs",
		},
		{
			name:     "a class no cluster has",
			tree:     roomy,
			clusters: []Cluster{makeCluster("east").Nodes(2, 8, a100, 0, 0).Obj(), makeCluster("west").Nodes(2, 8, a100, 0, 0).Obj()},
			w:        makeWorkload("w", "acme/vision/train").PodSet("main", 1, 1, 1000, h100).Obj(),
			code:     ReasonNeverFits,
			reason:   "can never fit: no registered cluster has nvidia-h100-80gb GPUs",
		},
		{
			name:     "a gang larger than any cluster of its class",
			tree:     roomy,
			clusters: []Cluster{makeCluster("east").Nodes(2, 8, h100, 0, 0).Obj(), makeCluster("west").Nodes(2, 8, h100, 0, 0).Obj()},
			w:        makeWorkload("w", "acme/vision/train").PodSet("main", 3, 8, 1000, h100).Obj(),
			code:     ReasonNeverFits,
			reason:   "can never fit: a cluster has at most 16 nvidia-h100-80gb GPUs, the workload needs 24 GPUs in one cluster",
		},
		{
			name:     "same-node pod set larger than any node",
			tree:     roomy,
			clusters: []Cluster{makeCluster("east").Nodes(4, 8, h100, 0, 0).Obj()},
			w:        makeWorkload("w", "acme/vision/train").PodSet("main", 3, 4, 1000, h100).Topology(TopologySameNode).Obj(),
			code:     ReasonNeverFits,
			reason:   "can never fit: the largest node of nvidia-h100-80gb has 8 GPUs, pod set main needs 12 GPUs on one node",
		},
		{
			name:     "more than the queue's nominal + borrowing limit",
			tree:     limits(32, 16, 1000, -1),
			clusters: []Cluster{makeCluster("east").Nodes(16, 8, h100, 0, 0).Obj()},
			w:        makeWorkload("w", "acme/vision/train").PodSet("main", 10, 8, 1000, h100).Obj(),
			code:     ReasonNeverFits,
			reason:   "can never fit: needs 80 GPUs of nvidia-h100-80gb but queue acme/vision/train may hold at most 48 GPUs (nominal 32 + borrowing limit 16)",
		},
		{
			name:     "more than the team above may hold",
			tree:     limits(32, -1, 40, 0),
			clusters: []Cluster{makeCluster("east").Nodes(16, 8, h100, 0, 0).Obj()},
			w:        makeWorkload("w", "acme/vision/train").PodSet("main", 6, 8, 1000, h100).Obj(),
			code:     ReasonNeverFits,
			reason:   "can never fit: needs 48 GPUs of nvidia-h100-80gb but queue acme/vision/train may hold at most 40 GPUs (the limit of team acme/vision: nominal 40 + borrowing limit 0)",
		},
		{
			name:     "a queue without quota for the class",
			tree:     roomy,
			clusters: []Cluster{makeCluster("east").Nodes(2, 8, h100, 0, 0).Obj()},
			w:        makeWorkload("w", "acme/nlp").PodSet("main", 1, 8, 1000, h100).Obj(),
			code:     ReasonNeverFits,
			reason:   "can never fit: needs 8 GPUs of nvidia-h100-80gb but queue acme/nlp has no nvidia-h100-80gb quota (nominal 0, borrowing limit 0)",
		},
		{
			name:     "a selector no cluster matches",
			tree:     roomy,
			clusters: []Cluster{makeCluster("east").Nodes(2, 8, h100, 0, 0).Label("zone", "us").Obj()},
			w:        makeWorkload("w", "acme/vision/train").PodSet("main", 1, 8, 1000, h100).Selector("zone", "eu").Obj(),
			code:     ReasonNeverFits,
			reason:   "can never fit: no registered cluster matches its cluster selector zone=eu",
		},
		{
			name: "quota in use now is a quota reason, not never",
			tree: limits(16, 0, 1000, -1),
			clusters: []Cluster{
				makeCluster("east").Nodes(4, 8, h100, 0, 0).Obj(),
			},
			running: func(cs []Cluster) []Running {
				hold := makeWorkload("hold", "acme/vision/train").PodSet("main", 1, 8, 1000, h100).NonPreemptible().Obj()
				return []Running{running(hold, &cs[0], wholeNode("east-n000", 8), t0)}
			},
			w:      makeWorkload("w", "acme/vision/train").PodSet("main", 2, 8, 1000, h100).Obj(),
			code:   ReasonQuota,
			reason: "would exceed its nvidia-h100-80gb limit",
		},
		{
			name:     "a full cluster that could hold it when empty is not never",
			tree:     roomy,
			clusters: []Cluster{busy(makeCluster("east").Nodes(2, 8, h100, 0, 0).Obj(), 2)},
			w:        makeWorkload("w", "acme/vision/train").PodSet("main", 2, 8, 1000, h100).Obj(),
			code:     ReasonNoFit,
			reason:   "no cluster has 2 nodes with 8 free",
		},
		{
			name:     "a draining cluster may come back: not never",
			tree:     roomy,
			clusters: []Cluster{makeCluster("east").Nodes(2, 8, h100, 0, 0).State(ClusterDraining).Obj()},
			w:        makeWorkload("w", "acme/vision/train").PodSet("main", 2, 8, 1000, h100).Obj(),
			code:     ReasonNoCluster,
			reason:   "its only cluster is not eligible: draining",
		},
		{
			name: "a lost cluster does not count",
			tree: roomy,
			clusters: []Cluster{
				makeCluster("big").Nodes(4, 8, h100, 0, 0).State(ClusterLost).Obj(),
				makeCluster("small").Nodes(1, 8, h100, 0, 0).Obj(),
			},
			w:      makeWorkload("w", "acme/vision/train").PodSet("main", 2, 8, 1000, h100).Obj(),
			code:   ReasonNeverFits,
			reason: "can never fit: a cluster has at most 8 nvidia-h100-80gb GPUs, the workload needs 16 GPUs in one cluster",
		},
		{
			name:     "with no registered cluster nothing is judged",
			tree:     roomy,
			clusters: []Cluster{makeCluster("gone").Nodes(1, 8, h100, 0, 0).State(ClusterLost).Obj()},
			w:        makeWorkload("w", "acme/vision/train").PodSet("main", 4, 8, 1000, h100).Obj(),
			code:     ReasonNoCluster,
			reason:   "not eligible: lost",
		},
		{
			name:     "an elastic gang is judged at its minimum size",
			tree:     roomy,
			clusters: []Cluster{busy(makeCluster("east").Nodes(2, 8, h100, 0, 0).Obj(), 2)},
			w:        makeWorkload("w", "acme/vision/train").PodSet("main", 8, 8, 1000, h100).Min(2).Obj(),
			code:     ReasonNoFit,
			reason:   "no cluster has",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := snapshot(tc.tree, tc.clusters, tc.w)
			if tc.running != nil {
				s.Running = tc.running(s.Clusters)
			}
			p := Decide(s, DefaultConfig())
			pe := pendingOf(p, "w")
			if pe == nil || pe.Code != tc.code {
				t.Fatalf("pending = %+v, want code %v", pe, tc.code)
			}
			exact := strings.HasPrefix(tc.reason, "can never fit")
			if exact && pe.Reason != tc.reason || !exact && !strings.Contains(pe.Reason, tc.reason) {
				t.Fatalf("reason = %q\nwant %q", pe.Reason, tc.reason)
			}
			if pe.Code == ReasonNeverFits && strings.Contains(pe.Reason, "to lend") {
				t.Fatalf("a never-fitting workload got a quota-to-lend reason: %q", pe.Reason)
			}
			// The pure helper the API uses agrees with the plan.
			if _, never := NeverFits(s, tc.w); never != (tc.code == ReasonNeverFits) {
				t.Fatalf("NeverFits = %v, plan code %v", never, pe.Code)
			}
		})
	}
}

// A workload that can never fit is not a reason to preempt anything or to
// hold nodes for it, and it does not keep others out.
func TestNeverFitsPreemptsAndReservesNothing(t *testing.T) {
	c := makeCluster("east").Nodes(2, 8, h100, 0, 0).Obj()
	low := makeWorkload("low", "t/a").PodSet("main", 1, 8, 1000, h100).Priority(0).Obj()
	run := []Running{running(low, &c, wholeNode("east-n000", 8), t0)}
	huge := makeWorkload("huge", "t/a").PodSet("main", 3, 8, 1000, h100).Priority(100).Obj()
	small := makeWorkload("small", "t/a").PodSet("main", 1, 8, 1000, h100).Created(t0.Add(time.Second)).Obj()
	s := &Snapshot{Now: t0, Queues: queues(h100, map[string]int64{"a": 1000}), Clusters: []Cluster{c}, Running: run, Pending: []*Workload{huge, small}}
	p := Decide(s, DefaultConfig())
	if pe := pendingOf(p, "huge"); pe == nil || pe.Code != ReasonNeverFits {
		t.Fatalf("huge = %+v, want NeverFits", pe)
	}
	if len(p.Preemptions) != 0 {
		t.Fatalf("preemptions for a workload that can never fit: %+v", p.Preemptions)
	}
	if d := dispatchOf(p, "small"); d == nil {
		t.Fatalf("small was kept out (%+v)", pendingOf(p, "small"))
	}
}

func TestCountOf(t *testing.T) {
	tests := map[string]struct {
		n    int64
		want string
	}{"zero": {0, "0 GPUs"}, "one": {1, "1 GPU"}, "two": {2, "2 GPUs"}}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := countOf(tc.n, "GPU"); got != tc.want {
				t.Fatalf("countOf(%d) = %q, want %q", tc.n, got, tc.want)
			}
		})
	}
}

// Counts in reasons agree with their nouns: "1 free any-class GPU".
func TestReasonsPluralise(t *testing.T) {
	c := busy(makeCluster("east").Nodes(2, 2, h100, 0, 0).Obj(), 2)
	w := makeWorkload("w", "t/a").PodSet("main", 1, 1, 1000, "").Obj()
	p := Decide(snapshot(queues(h100, map[string]int64{"a": 100}), []Cluster{c}, w), DefaultConfig())
	pe := pendingOf(p, "w")
	if pe == nil || !strings.Contains(pe.Reason, "a node with 1 free any-class GPU;") {
		t.Fatalf("reason = %+v, want %q", pe, "a node with 1 free any-class GPU")
	}
}

// Explaining one cluster phrases every line for that cluster alone.
func TestExplainCluster(t *testing.T) {
	roomy := queues(h100, map[string]int64{"a": 1000})
	tight := queues(h100, map[string]int64{"a": 8})
	// east: 4 nodes of 8 H100s in NVLink domains of 2 nodes; one node busy,
	// so one domain has room for 1 replica of 8 GPUs and the other for 2.
	east := busy(makeCluster("east").Nodes(4, 8, h100, 2, 0).Obj(), 1)
	gang := func(n int32) *Workload {
		return makeWorkload("w", "t/a").PodSet("worker", n, 8, 1000, h100).Topology(TopologyNVLink).Obj()
	}
	tests := []struct {
		name    string
		tree    *quota.Tree
		cluster Cluster
		w       *Workload
		fits    bool
		lines   []string
	}{
		{"fits", roomy, east, gang(2), true, []string{"fits now: the whole gang has room here"}},
		{"class absent", roomy, makeCluster("west").Nodes(2, 8, a100, 0, 0).Obj(), gang(1), false,
			[]string{"can never fit here, even when empty: no nvidia-h100-80gb GPUs"}},
		{"draining", roomy, makeCluster("d").Nodes(2, 8, h100, 0, 0).State(ClusterDraining).Obj(), gang(1), false,
			[]string{"not eligible: draining"}},
		{"domain too small ever", roomy, east, gang(3), false,
			[]string{"can never fit here, even when empty: the largest NVLink domain of nvidia-h100-80gb has 16 GPUs, pod set worker needs 24 GPUs in one NVLink domain"}},
		{"room for part of the gang, topology applied", roomy, busy(makeCluster("east").Nodes(4, 8, h100, 4, 0).Obj(), 1), gang(4), false,
			[]string{"no room now for the whole gang", "pod set worker: room for only 3 of the 4 replicas it needs in one NVLink domain"}},
		{"quota could never hold it", tight, east, gang(2), false,
			[]string{"its queue's quota could never hold it: needs 16 GPUs of nvidia-h100-80gb but queue t/a may hold at most 8 GPUs (the federation's whole nvidia-h100-80gb quota, the sum of the tenants' nominals, is 8 GPUs)",
				"pod set worker: room for all 2 replicas now in one NVLink domain"}},
		{"pod sets fit alone but not together", roomy, busy(makeCluster("east").Nodes(2, 8, h100, 0, 0).Obj(), 1),
			makeWorkload("w", "t/a").PodSet("a", 1, 8, 1000, h100).PodSet("b", 1, 8, 1000, h100).Obj(), false,
			[]string{"no room now for the whole gang", "pod set a: room for its replica now", "pod set b: room for its replica now",
				"each pod set has room on its own, but not all of them together"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := snapshot(tc.tree, []Cluster{tc.cluster}, tc.w)
			ex := ExplainCluster(s, DefaultConfig(), tc.w, tc.cluster.ID)
			if ex.Fits != tc.fits || strings.Join(ex.Lines, "\n") != strings.Join(tc.lines, "\n") {
				t.Fatalf("got fits=%v\n%s\nwant fits=%v\n%s", ex.Fits, strings.Join(ex.Lines, "\n"), tc.fits, strings.Join(tc.lines, "\n"))
			}
		})
	}
}

// podSetRoom counts, per pod set on its own, the replicas that have room.
func TestPodSetRoom(t *testing.T) {
	node := func(name, class string, free ...int32) Node {
		n := Node{Name: name, Res: gpufit.Node{Class: class, CPUMilliFree: 64000, MemMiBFree: 1 << 20}}
		for _, f := range free {
			n.Res.GPUs = append(n.Res.GPUs, gpufit.GPU{FreeMilli: f, FreeMemMiB: 80000, TotalMemMiB: 80000})
		}
		return n
	}
	c := Cluster{ID: "east", Nodes: []Node{
		node("a", "h100", 1000, 1000, 1000, 1000), node("b", "h100", 1000, 1000, 500, 0), node("c", "a100", 1000, 1000),
	}}
	tests := map[string]struct {
		ps   PodSet
		want string
	}{
		"two-gpu replicas of h100":   {PodSet{Name: "p", Replicas: 5, Class: "h100", Req: gpufit.Request{GPUs: 2, Milli: 1000}}, "pod set p: room for only 3 of the 5 replicas it needs"},
		"any class takes a100 too":   {PodSet{Name: "p", Replicas: 9, Req: gpufit.Request{GPUs: 2, Milli: 1000}}, "pod set p: room for only 4 of the 9 replicas it needs"},
		"halves pack onto fractions": {PodSet{Name: "p", Replicas: 20, Class: "h100", Req: gpufit.Request{GPUs: 1, Milli: 500}}, "pod set p: room for only 13 of the 20 replicas it needs"},
		"elastic":                    {PodSet{Name: "p", Replicas: 20, MinReplicas: 10, Class: "h100", Req: gpufit.Request{GPUs: 1, Milli: 500}}, "pod set p: room for 13 of its 20 replicas now, and it needs at least 10"},
		"too big for any node":       {PodSet{Name: "p", Replicas: 1, Class: "h100", Req: gpufit.Request{GPUs: 8, Milli: 1000}}, "pod set p: no room now for its replica"},
		"asks for fewer than fit":    {PodSet{Name: "p", Replicas: 1, Class: "h100", Req: gpufit.Request{GPUs: 1, Milli: 1000}}, "pod set p: room for its replica now"},
		"same node":                  {PodSet{Name: "p", Replicas: 3, Class: "h100", Req: gpufit.Request{GPUs: 2, Milli: 1000}, Topology: TopologySameNode}, "pod set p: room for only 2 of the 3 replicas it needs in one node"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := &Workload{ID: "w", PodSets: []PodSet{tc.ps}}
			got := podSetRoom(&c, DefaultConfig(), w)
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("podSetRoom = %q, want %q", got, tc.want)
			}
			if c.Nodes[0].Res.GPUs[0].FreeMilli != 1000 {
				t.Fatal("podSetRoom changed the cluster it was given")
			}
		})
	}
}
