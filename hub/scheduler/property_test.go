package scheduler

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/meridian-gpu/meridian/hub/quota"
	"github.com/meridian-gpu/meridian/hub/scheduler/gpufit"
)

var propClasses = []string{h100, a100}

// genSnapshot draws a random federation with partly used GPUs, a random
// queue tree with random limits, and a random mix of pending gangs.
func genSnapshot(t *rapid.T) (*Snapshot, map[string]quota.Limits) {
	nClusters := rapid.IntRange(1, 3).Draw(t, "clusters")
	var clusters []Cluster
	for c := 0; c < nClusters; c++ {
		cl := Cluster{ID: fmt.Sprintf("c%d", c), LastSeen: t0, Modes: FracModes(rapid.IntRange(0, 31).Draw(t, "modes") << 1)}
		nNodes := rapid.IntRange(1, 6).Draw(t, "nodes")
		for n := 0; n < nNodes; n++ {
			node := Node{
				Name:   fmt.Sprintf("c%d-n%d", c, n),
				NVLink: fmt.Sprintf("d%d", rapid.IntRange(0, 2).Draw(t, "nvl")),
				Rack:   fmt.Sprintf("r%d", rapid.IntRange(0, 1).Draw(t, "rack")),
				Res: gpufit.Node{
					Class:        rapid.SampledFrom(propClasses).Draw(t, "class"),
					CPUMilliFree: int64(rapid.IntRange(0, 64).Draw(t, "cpu")) * 1000,
					MemMiBFree:   int64(rapid.IntRange(0, 256).Draw(t, "mem")) * 1024,
				},
			}
			for g := rapid.IntRange(0, 8).Draw(t, "gpus"); g > 0; g-- {
				free := int32(rapid.SampledFrom([]int{0, 250, 500, 1000, 1000}).Draw(t, "free"))
				node.Res.GPUs = append(node.Res.GPUs, gpufit.GPU{FreeMilli: free, FreeMemMiB: 40960 * free / 1000, TotalMemMiB: 40960})
			}
			cl.Nodes = append(cl.Nodes, node)
		}
		clusters = append(clusters, cl)
	}
	limits := map[string]quota.Limits{}
	specs := []quota.QueueSpec{{Path: "t", Weight: 1}}
	for _, q := range []string{"t/a", "t/b", "t/c"} {
		l := quota.Limits{
			Nominal:     int64(rapid.IntRange(0, 24).Draw(t, "nominal")) * 1000,
			BorrowLimit: int64(rapid.SampledFrom([]int{-1, 0, 4, 8}).Draw(t, "borrow")) * 1000,
			LendLimit:   -1,
		}
		if l.BorrowLimit < 0 {
			l.BorrowLimit = -1
		}
		limits[q] = l
		specs = append(specs, quota.QueueSpec{Path: q, Weight: float64(rapid.IntRange(1, 4).Draw(t, "weight")),
			Limits: map[string]quota.Limits{h100: l, a100: l}})
	}
	tree, err := quota.NewTree(specs)
	if err != nil {
		t.Fatalf("tree: %v", err)
	}
	var pending []*Workload
	for i := rapid.IntRange(1, 15).Draw(t, "pending"); i > 0; i-- {
		w := &Workload{
			ID:          fmt.Sprintf("w%02d", i),
			Queue:       rapid.SampledFrom([]string{"t/a", "t/b", "t/c"}).Draw(t, "queue"),
			Priority:    int32(rapid.IntRange(0, 3).Draw(t, "prio")),
			Preemptible: true,
			CreatedAt:   t0.Add(time.Duration(i) * time.Second),
		}
		for s := rapid.IntRange(1, 2).Draw(t, "podsets"); s > 0; s-- {
			ps := PodSet{
				Name:     fmt.Sprintf("ps%d", s),
				Replicas: int32(rapid.IntRange(1, 4).Draw(t, "replicas")),
				Class:    rapid.SampledFrom(append([]string{""}, propClasses...)).Draw(t, "psclass"),
				Topology: Topology(rapid.IntRange(0, 3).Draw(t, "topo")),
				Req:      gpufit.Request{CPUMilli: int64(rapid.IntRange(0, 8).Draw(t, "rcpu")) * 1000, MemMiB: 1024},
			}
			if rapid.Bool().Draw(t, "fractional") {
				ps.Req.GPUs, ps.Req.Milli = 1, int32(rapid.SampledFrom([]int{100, 250, 500}).Draw(t, "milli"))
				ps.Mode = FractionalMode(rapid.SampledFrom([]int{0, int(FracMPS), int(FracMIG)}).Draw(t, "mode"))
			} else {
				ps.Req.GPUs, ps.Req.Milli = int32(rapid.IntRange(0, 8).Draw(t, "rgpus")), 1000
			}
			if rapid.Bool().Draw(t, "elastic") {
				ps.MinReplicas = int32(rapid.IntRange(1, int(ps.Replicas)).Draw(t, "min"))
			}
			w.PodSets = append(w.PodSets, ps)
		}
		pending = append(pending, w)
	}
	return &Snapshot{Now: t0, Queues: tree, Clusters: clusters, Pending: pending}, limits
}

func TestPlanInvariants(t *testing.T) {
	dispatched, pendingN := 0, 0
	defer func() {
		// Guard against a vacuous property: the generator must produce both.
		if !t.Failed() && (dispatched == 0 || pendingN == 0) {
			t.Fatalf("generator produced %d dispatches and %d pending; the property checked nothing", dispatched, pendingN)
		}
	}()
	rapid.Check(t, func(t *rapid.T) {
		s, limits := genSnapshot(t)
		p := Decide(s, DefaultConfig())
		dispatched += len(p.Dispatches)
		pendingN += len(p.Pending)

		// Every workload gets exactly one outcome.
		seen := map[string]int{}
		for _, d := range p.Dispatches {
			seen[d.WorkloadID]++
		}
		for _, pe := range p.Pending {
			seen[pe.WorkloadID]++
			if pe.Reason == "" {
				t.Fatalf("%s pending without a reason", pe.WorkloadID)
			}
		}
		for _, w := range s.Pending {
			if seen[w.ID] != 1 {
				t.Fatalf("%s has %d outcomes, want 1", w.ID, seen[w.ID])
			}
		}

		// Replay the dispatches on a copy of the clusters: every replica must
		// fit where it was put (no GPU over 1000 milli or its memory), every
		// gang must be whole, in one cluster, and inside its topology domain.
		clusters := deepCopyClusters(s.Clusters)
		byID := map[string]*Cluster{}
		for i := range clusters {
			byID[clusters[i].ID] = &clusters[i]
		}
		byWL := map[string]*Workload{}
		for _, w := range s.Pending {
			byWL[w.ID] = w
		}
		used := map[string]map[string]int64{}
		for _, d := range p.Dispatches {
			w, c := byWL[d.WorkloadID], byID[d.Cluster]
			if len(d.Placement) != len(w.PodSets) {
				t.Fatalf("%s placed %d of %d pod sets", w.ID, len(d.Placement), len(w.PodSets))
			}
			for i, pp := range d.Placement {
				ps := &w.PodSets[i]
				min := ps.MinReplicas
				if min <= 0 {
					min = ps.Replicas
				}
				if n := int32(len(pp.Replicas)); n < min || n > ps.Replicas {
					t.Fatalf("%s/%s got %d replicas, want %d..%d", w.ID, ps.Name, n, min, ps.Replicas)
				}
				domains := map[string]bool{}
				for _, rp := range pp.Replicas {
					var node *Node
					for k := range c.Nodes {
						if c.Nodes[k].Name == rp.Node {
							node = &c.Nodes[k]
						}
					}
					if node == nil {
						t.Fatalf("%s placed on node %s outside its cluster %s", w.ID, rp.Node, c.ID)
					}
					if ps.Class != "" && ps.Req.GPUs > 0 && node.Res.Class != ps.Class {
						t.Fatalf("%s wants %s, got node of %s", w.ID, ps.Class, node.Res.Class)
					}
					for _, g := range rp.GPUs {
						gpu := node.Res.GPUs[g]
						if gpu.FreeMilli < ps.Req.Milli || gpu.FreeMemMiB < ps.Req.GPUMemMiB {
							t.Fatalf("%s overcommits GPU %d of %s", w.ID, g, node.Name)
						}
					}
					if !gpufit.Fits(&node.Res, &ps.Req) {
						t.Fatalf("%s does not fit on %s", w.ID, node.Name)
					}
					node.Res.Apply(&ps.Req, rp.GPUs)
					switch ps.Topology {
					case TopologySameNode:
						domains[node.Name] = true
					case TopologyNVLink:
						domains[node.NVLink] = true
					case TopologyRack:
						domains[node.Rack] = true
					}
				}
				if len(domains) > 1 {
					t.Fatalf("%s/%s spans %d %s domains", w.ID, ps.Name, len(domains), ps.Topology)
				}
			}
			for _, u := range d.Usage {
				if used[w.Queue] == nil {
					used[w.Queue] = map[string]int64{}
				}
				used[w.Queue][u.Class] += u.Milli
			}
		}
		// No queue beyond nominal plus its borrowing limit.
		for q, byClass := range used {
			l := limits[q]
			for class, m := range byClass {
				if l.BorrowLimit >= 0 && m > l.Nominal+l.BorrowLimit {
					t.Fatalf("queue %s uses %d of %s, over nominal %d + borrow %d", q, m, class, l.Nominal, l.BorrowLimit)
				}
			}
		}
		// The same snapshot gives the same plan.
		if p2 := Decide(s, DefaultConfig()); !reflect.DeepEqual(p, p2) {
			t.Fatalf("plan is not deterministic")
		}
	})
}

// A Scratch reused across calls never changes a plan: each snapshot is
// decided with the scratch the previous, different snapshots left behind,
// and must get the plan a fresh call gives.
func TestScratchNeverChangesAPlan(t *testing.T) {
	scratch := &Scratch{}
	calls, dispatched := 0, 0
	rapid.Check(t, func(t *rapid.T) {
		s, _ := genSnapshot(t)
		want := Decide(s, DefaultConfig())
		cfg := DefaultConfig()
		cfg.Scratch = scratch
		for round := 0; round < 2; round++ { // twice: the second reuses this snapshot's own state
			got := Decide(s, cfg)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: with a reused scratch the plan is\n%+v\nwithout\n%+v", round, got, want)
			}
		}
		calls++
		dispatched += len(want.Dispatches)
	})
	if len(scratch.clusters) == 0 || dispatched == 0 {
		t.Fatalf("after %d calls the scratch holds %d clusters and %d workloads were dispatched: nothing was reused", calls, len(scratch.clusters), dispatched)
	}
}
