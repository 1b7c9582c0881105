package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

// Each filter on its own: one cluster, one workload, the expected verdict.
func TestFilters(t *testing.T) {
	frac := makeWorkload("f", "t/a").PodSet("main", 1, 1, 500, h100).Mode(FracMIG).Obj()
	whole := makeWorkload("w", "t/a").PodSet("main", 1, 8, 1000, h100).Obj()
	anyClass := makeWorkload("any", "t/a").PodSet("main", 1, 8, 1000, "").Obj()
	cpuOnly := makeWorkload("cpu", "t/a").PodSet("main", 1, 0, 1000, a100).Obj()
	tests := []struct {
		name    string
		filter  func(*planner, *clusterState, *Workload) (bool, string)
		cluster Cluster
		w       *Workload
		ok      bool
		why     string
	}{
		{"state ready", filterState, makeCluster("c").Obj(), whole, true, ""},
		{"state lost", filterState, makeCluster("c").State(ClusterLost).Obj(), whole, false, "lost"},
		{"state draining", filterState, makeCluster("c").State(ClusterDraining).Obj(), whole, false, "draining"},
		{"fresh", filterFresh, makeCluster("c").Seen(t0.Add(-29 * time.Second)).Obj(), whole, true, ""},
		{"stale", filterFresh, makeCluster("c").Seen(t0.Add(-31 * time.Second)).Obj(), whole, false, "stale"},
		{"avoid other", filterAvoid, makeCluster("c").Obj(), makeWorkload("x", "t/a").Avoid("d").Obj(), true, ""},
		{"avoid this", filterAvoid, makeCluster("c").Obj(), makeWorkload("x", "t/a").Avoid("c").Obj(), false, "rejected this workload"},
		{"selector match", filterSelector, makeCluster("c").Label("zone", "eu").Obj(), makeWorkload("x", "t/a").Selector("zone", "eu").Obj(), true, ""},
		{"selector mismatch", filterSelector, makeCluster("c").Label("zone", "us").Obj(), makeWorkload("x", "t/a").Selector("zone", "eu").Obj(), false, "zone=eu"},
		{"selector missing label", filterSelector, makeCluster("c").Obj(), makeWorkload("x", "t/a").Selector("zone", "eu").Obj(), false, "zone=eu"},
		{"class present", filterClass, makeCluster("c").Nodes(1, 8, h100, 0, 0).Obj(), whole, true, ""},
		{"class absent", filterClass, makeCluster("c").Nodes(1, 8, a100, 0, 0).Obj(), whole, false, "with no " + h100 + " GPUs"},
		{"any class", filterClass, makeCluster("c").Nodes(1, 8, a100, 0, 0).Obj(), anyClass, true, ""},
		{"cpu-only ignores class", filterClass, makeCluster("c").Nodes(1, 8, h100, 0, 0).Obj(), cpuOnly, true, ""},
		{"fraction served", filterFractional, makeCluster("c").Modes(FracMIG).Obj(), frac, true, ""},
		{"fraction not served", filterFractional, makeCluster("c").Modes(FracMPS).Obj(), frac, false, "not serving fractional mode mig"},
		{"fraction no modes", filterFractional, makeCluster("c").Obj(), makeWorkload("f", "t/a").PodSet("main", 1, 1, 500, h100).Obj(), false, "not sharing GPUs"},
		{"whole GPUs need no mode", filterFractional, makeCluster("c").Obj(), whole, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &planner{snap: &Snapshot{Now: t0}, cfg: DefaultConfig()}
			ok, why := tc.filter(p, newClusterState(&tc.cluster, nil), tc.w)
			if ok != tc.ok || !strings.Contains(why, tc.why) {
				t.Fatalf("got (%v, %q), want (%v, containing %q)", ok, why, tc.ok, tc.why)
			}
		})
	}
}

// The bucket index is what makes candidate retrieval best-fit: a request
// scans the tightest bucket that can serve it first.
func TestPickNodePrefersTightestNode(t *testing.T) {
	c := makeCluster("c").Nodes(3, 8, h100, 0, 0).Obj()
	// n000: 8 free, n001: 3 free, n002: 2 free (others used)
	for g := 0; g < 5; g++ {
		c.Nodes[1].Res.GPUs[g].FreeMilli = 0
	}
	for g := 0; g < 6; g++ {
		c.Nodes[2].Res.GPUs[g].FreeMilli = 0
	}
	// a partially used GPU on the full node for fractional work
	c.Nodes[0].Res.GPUs[7].FreeMilli = 600
	half := makeWorkload("x", "t/a").PodSet("m", 1, 1, 500, h100).Obj().PodSets[0]
	tests := []struct {
		name         string
		ps           PodSet
		partialFirst bool
		want         string
		wantGPU      int
	}{
		{"2 GPUs take the node with exactly 2 free", makeWorkload("x", "t/a").PodSet("m", 1, 2, 1000, h100).Obj().PodSets[0], false, "c-n002", -1},
		{"3 GPUs take the node with 3 free", makeWorkload("x", "t/a").PodSet("m", 1, 3, 1000, h100).Obj().PodSets[0], false, "c-n001", -1},
		{"4 GPUs need the empty node", makeWorkload("x", "t/a").PodSet("m", 1, 4, 1000, h100).Obj().PodSets[0], false, "c-n000", -1},
		// BestFit sees every node and prefers the one with least room left.
		{"a fraction goes to the tightest node", half, false, "c-n002", 6},
		{"with PartialFirst a fraction goes to a partly used GPU", half, true, "c-n000", 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Scorer = gpufit.BestFit()
			cfg.PartialFirst = tc.partialFirst
			p := &placer{cfg: &cfg}
			cs := newClusterState(&c, nil)
			i, ok := p.pickNode(cs, &tc.ps, nil)
			if !ok || c.Nodes[i].Name != tc.want {
				t.Fatalf("picked %v (ok=%v), want %s", i, ok, tc.want)
			}
			if tc.wantGPU >= 0 && (len(p.best) != 1 || p.best[0] != tc.wantGPU) {
				t.Fatalf("fraction placed on GPUs %v, want GPU %d", p.best, tc.wantGPU)
			}
		})
	}
}

// Apply and undo keep the bucket index and class totals exact.
func TestClusterStateIndexTracksCapacity(t *testing.T) {
	c := makeCluster("c").Nodes(2, 4, h100, 0, 0).Obj()
	cs := newClusterState(&c, nil)
	ci := cs.classFor(h100)
	if ci.freeMilli != 8000 {
		t.Fatalf("free %d, want 8000", ci.freeMilli)
	}
	r := makeWorkload("x", "t/a").PodSet("m", 1, 3, 1000, h100).Obj().PodSets[0].Req
	cs.apply(0, &r, []int{0, 1, 2})
	if ci.freeMilli != 5000 || cs.meta[0].bucket != bucketWhole {
		t.Fatalf("after apply: free %d bucket %d", ci.freeMilli, cs.meta[0].bucket)
	}
	half := makeWorkload("x", "t/a").PodSet("m", 1, 1, 500, h100).Obj().PodSets[0].Req
	cs.apply(0, &half, []int{3})
	if cs.meta[0].bucket != bucketPartial {
		t.Fatalf("node with only a half GPU free is in bucket %d, want partial", cs.meta[0].bucket)
	}
	cs.undo(0, &half, []int{3})
	cs.undo(0, &r, []int{0, 1, 2})
	if ci.freeMilli != 8000 || cs.meta[0].bucket != bucketWhole+3 {
		t.Fatalf("after undo: free %d bucket %d", ci.freeMilli, cs.meta[0].bucket)
	}
	for b, nodes := range ci.buckets {
		for pos, n := range nodes {
			if cs.meta[n].bucket != int32(b) {
				t.Fatalf("index out of step for node %d", n)
			}
			if pos > 0 && nodes[pos-1] >= n {
				t.Fatalf("bucket %d is not in node order: %v", b, nodes)
			}
		}
	}
	for pos, n := range ci.partial {
		if !cs.meta[n].partial || (pos > 0 && ci.partial[pos-1] >= n) {
			t.Fatalf("partial list out of step or order: %v", ci.partial)
		}
	}
}

// A replica that may use any class looks at the tightest nodes of every
// class before the roomier nodes of any: the class that sorts first does
// not get to fill the candidate list with its empty nodes (on the OpenB
// trace, scanning class by class cost six points of allocation).
func TestPickNodeIsBestFitAcrossClasses(t *testing.T) {
	c := makeCluster("c").Nodes(4, 8, "a100", 0, 0).Nodes(1, 8, "h100", 0, 0).Obj()
	for g := 0; g < 7; g++ {
		c.Nodes[4].Res.GPUs[g].FreeMilli = 0 // the h100 node has 1 GPU free
	}
	anyClass := makeWorkload("x", "t/a").PodSet("m", 1, 1, 1000, "").Obj().PodSets[0]
	for _, k := range []int{1, 2, 8} {
		cfg := DefaultConfig()
		cfg.Scorer = gpufit.BestFit()
		cfg.NodeCandidates = k
		p := &placer{cfg: &cfg}
		i, ok := p.pickNode(newClusterState(&c, nil), &anyClass, nil)
		if !ok || c.Nodes[i].Name != "c-n004" {
			t.Fatalf("NodeCandidates %d: picked %v (ok=%v), want the h100 node with one GPU free", k, i, ok)
		}
	}
}
