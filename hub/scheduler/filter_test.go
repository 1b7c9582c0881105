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
			ok, why := tc.filter(p, newClusterState(&tc.cluster), tc.w)
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
	tests := []struct {
		name string
		ps   PodSet
		want string
	}{
		{"2 GPUs take the node with exactly 2 free", makeWorkload("x", "t/a").PodSet("m", 1, 2, 1000, h100).Obj().PodSets[0], "c-n002"},
		{"3 GPUs take the node with 3 free", makeWorkload("x", "t/a").PodSet("m", 1, 3, 1000, h100).Obj().PodSets[0], "c-n001"},
		{"4 GPUs need the empty node", makeWorkload("x", "t/a").PodSet("m", 1, 4, 1000, h100).Obj().PodSets[0], "c-n000"},
		{"a fraction goes to a partly used GPU", makeWorkload("x", "t/a").PodSet("m", 1, 1, 500, h100).Obj().PodSets[0], "c-n000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Scorer = gpufit.BestFit()
			p := &placer{cfg: &cfg}
			cs := newClusterState(&c)
			i, ok := p.pickNode(cs, &tc.ps, nil)
			if !ok || c.Nodes[i].Name != tc.want {
				t.Fatalf("picked %v (ok=%v), want %s", i, ok, tc.want)
			}
			if tc.ps.Req.Shared() && (len(p.best) != 1 || p.best[0] != 7) {
				t.Fatalf("fraction placed on GPUs %v, want the partly used GPU 7", p.best)
			}
		})
	}
}

// Apply and undo keep the bucket index and class totals exact.
func TestClusterStateIndexTracksCapacity(t *testing.T) {
	c := makeCluster("c").Nodes(2, 4, h100, 0, 0).Obj()
	cs := newClusterState(&c)
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
			if cs.meta[n].bucket != int32(b) || cs.meta[n].pos != int32(pos) {
				t.Fatalf("index out of step for node %d", n)
			}
		}
	}
}
